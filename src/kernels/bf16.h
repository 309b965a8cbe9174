// bfloat16 <-> float32 conversions for hand-written loops: branch-free, so they vectorise, and
// bit-identical to c10::BFloat16's (round to nearest even, NaN kept a quiet NaN).
#pragma once

#include <cstdint>
#include <cstring>

#include <ATen/core/Tensor.h>

namespace ht {

inline float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  // NaN tested on the bits: an integer select vectorises under any floating-point flags (a float
  // compare does not where traps are honoured, and that blocked the bf16 GELU loops).
  return (bits & 0x7FFFFFFFu) > 0x7F800000u ? uint16_t{0x7FC0} : static_cast<uint16_t>(rounded);
}

// Whole-tensor casts with the loops above, vectorised and threaded: LibTorch 1.13's own
// fp32 <-> bf16 copy runs a scalar loop per element (bench/bf16_kernels measures both).
// Contiguous float32 -> bfloat16 of the same shape (any other input: ATen's .to()).
at::Tensor to_bf16(const at::Tensor& x);
// Contiguous bfloat16 -> float32 (any other input: ATen's .to()).
at::Tensor to_f32(const at::Tensor& x);
// dst (bf16, contiguous) = src (float32, contiguous) rounded; same number of elements.
void round_into(at::Tensor& dst, const at::Tensor& src);
// dst (float32, contiguous) = src (bf16, contiguous) widened (exact).
void widen_into(at::Tensor& dst, const at::Tensor& src);

}  // namespace ht
