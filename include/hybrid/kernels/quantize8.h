// Block-wise 8-bit quantization with bitsandbytes' dynamic (non-linear) code: each block of values
// is scaled by its fp32 absmax and every value stored as the index of the nearest code value.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ht {

// The 256-value "dynamic tree" code of Dettmers et al. (8-bit optimizers, 2022), built as
// bitsandbytes' create_dynamic_map(): reading a code's bits after the sign, the number of leading
// zeros picks a decade i (0..6) and the bits after the first one are a linear fraction inside it.
// Decade i covers [0.1, 1] * 10^(i-6) with 2^i values per sign (signed code) or 2^(i+1) values
// (unsigned code, which spends the sign bit on precision), each the midpoint of an equal split of
// the decade; with 0 and +1 (no -1: bitsandbytes' table is kept as is) that makes 256 entries.
// So the code spans 10^-7 .. 1 relative to the block's absmax and is densest near it: relative
// error ~0.7 % (signed) / ~0.35 % (unsigned) next to the absmax, coarser far below it, which suits
// Adam's moments (large entries drive the update; small ones need only their order of magnitude).
class DynamicCode {
 public:
  // is_signed: values in [-1, 1] for Adam's first moment; else [0, 1] for the second moment.
  explicit DynamicCode(bool is_signed);
  static const DynamicCode& signed_code();  // built once
  static const DynamicCode& unsigned_code();

  float value(uint8_t index) const { return values_[index]; }
  const std::array<float, 256>& values() const { return values_; }  // sorted ascending
  uint8_t zero_index() const { return zero_index_; }

  // Index of the code value nearest to x (ties go to the larger value); x finite, |x| <= 1.
  // A 64K-entry table indexed by the top 16 bits of x's order-preserving bit pattern gives the
  // answer for the bucket's lower end; the buckets are narrow enough (checked when the table is
  // built) to hold at most two decision midpoints, so two branch-free comparisons finish the job.
  // Exact, and ~1 ns per value against 30 ns for std::upper_bound over the table.
  uint8_t quantize(float x) const {
    const uint32_t j = bucket_start_[order_key(x) >> 16];
    return static_cast<uint8_t>(j + (x >= midpoints_[j]) + (x >= midpoints_[j + 1]));
  }
  // Reference: binary search over the sorted midpoints (used by tests).
  uint8_t quantize_by_search(float x) const;

  // Block forms, for the optimizer's inner loop. out[j] = value(codes[j]) * scale.
  void dequantize(const uint8_t* codes, float scale, float* out, int64_t n) const;
  // out[j] = quantize(x[j] * inv); every x[j] * inv finite with magnitude <= 1.
  void quantize(const float* x, float inv, uint8_t* out, int64_t n) const;
  // out[j] = quantize_stochastic(x[j] * inv, u[j]).
  void quantize_stochastic(const float* x, float inv, const float* u, uint8_t* out,
                           int64_t n) const;

  // Stochastic rounding: one of the two code values bracketing x, the upper one with probability
  // (x - lower) / (upper - lower), so the expected stored value is x. u is uniform in [0, 1).
  // Same bucket scheme as quantize(), on the code values instead of the midpoints.
  uint8_t quantize_stochastic(float x, float u) const {
    const uint32_t f = bucket_floor_[order_key(x) >> 16];
    // Branch-free: these comparisons are coin flips, and mispredictions would dominate the step.
    const int lo = std::min<int>(f + (x >= padded_[f + 1]) + (x >= padded_[f + 2]), 254);
    const float a = padded_[lo], b = padded_[lo + 1];
    return static_cast<uint8_t>(lo + static_cast<int>(u * (b - a) < x - a));
  }

 private:
  // Maps floats to unsigned integers in the same order (negative floats have their bits flipped).
  static uint32_t order_key(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }

  std::array<float, 256> values_;
  std::array<float, 257> midpoints_;   // [i] between values_[i] and values_[i+1]; [255..] = +inf
  std::vector<uint8_t> bucket_start_;  // [65536]: nearest index of each bucket's smallest float
  std::array<float, 258> padded_;      // values_ followed by +inf, +inf
  std::vector<uint8_t> bucket_floor_;  // [65536]: last value <= each bucket's smallest float
  uint8_t zero_index_ = 0;
};

// Whole-tensor form, for tests and tools (the optimizer quantizes block by block in place).
struct BlockQuantized {
  at::Tensor codes;   // uint8 [n]
  at::Tensor absmax;  // float32 [ceil(n / block_size)]
  int64_t block_size = 0;
};
// x: a tensor of any shape, read in its flattened (contiguous) order. float32 CPU tensors take the
// CPU kernel; any other device or dtype ATen's ops on its fp32 values (the same codes, bit for bit).
BlockQuantized quantize_blockwise(const at::Tensor& x, const DynamicCode& code, int64_t block_size);
at::Tensor dequantize_blockwise(const BlockQuantized& q, const DynamicCode& code);  // float [n]

}  // namespace ht
