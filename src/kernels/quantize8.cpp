// Builds the dynamic 8-bit code tables, runs them over blocks of values (the optimizer's inner
// loop) and quantizes whole tensors for tests and tools.
#include "hybrid/kernels/quantize8.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "kernels/dispatch.h"
#include "kernels/quantize8_aten.h"

namespace ht {
namespace {

// bitsandbytes' create_dynamic_map(signed, max_exponent_bits = 7, total_bits = 8).
std::array<float, 256> dynamic_map(bool is_signed) {
  std::vector<double> data;
  for (int i = 0; i < 7; ++i) {
    const int n = is_signed ? (1 << i) : (1 << (i + 1));  // values per sign in decade 10^(i-6)
    const double decade = std::pow(10.0, i - 6);
    for (int k = 0; k < n; ++k) {
      const double lo = 0.1 + 0.9 * k / n, hi = 0.1 + 0.9 * (k + 1) / n;
      data.push_back(decade * (lo + hi) / 2.0);
      if (is_signed) data.push_back(-decade * (lo + hi) / 2.0);
    }
  }
  data.push_back(0.0);
  data.push_back(1.0);
  std::sort(data.begin(), data.end());
  std::array<float, 256> values;
  if (data.size() != values.size()) throw std::logic_error("dynamic_map: table is not 256 long");
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(data[i]);
  return values;
}

float key_to_float(uint32_t key) {
  const uint32_t u = (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace

DynamicCode::DynamicCode(bool is_signed) : values_(dynamic_map(is_signed)) {
  for (int i = 0; i < 255; ++i) midpoints_[i] = 0.5f * (values_[i] + values_[i + 1]);
  midpoints_[255] = midpoints_[256] = std::numeric_limits<float>::infinity();
  zero_index_ =
      static_cast<uint8_t>(std::find(values_.begin(), values_.end(), 0.0f) - values_.begin());
  std::copy(values_.begin(), values_.end(), padded_.begin());
  padded_[256] = padded_[257] = std::numeric_limits<float>::infinity();
  bucket_start_.resize(1 << 16);
  bucket_floor_.resize(1 << 16);
  for (uint32_t b = 0; b < bucket_start_.size(); ++b) {
    const float lowest = key_to_float(b << 16);
    if (std::isnan(lowest)) {  // buckets of NaN bit patterns: never looked up, keep them bounded
      bucket_start_[b] = bucket_floor_[b] = (b & 0x8000u) ? 254 : 0;
      continue;
    }
    uint32_t j = 0;
    while (j < 255 && midpoints_[j] <= lowest) ++j;
    bucket_start_[b] = static_cast<uint8_t>(j);
    uint32_t f = 0;
    while (f < 255 && values_[f + 1] <= lowest) ++f;
    bucket_floor_[b] = static_cast<uint8_t>(f);
  }
  // The lookups check two midpoints (values) past the bucket's entry, so no bucket may contain
  // three. The narrowest gap (0.7 % of the value, top of the unsigned code) is wider than a
  // bucket (<= 0.78 %), so this holds; checked here so that a change of the code cannot break it.
  for (int i = 0; i + 2 < 256; ++i) {
    const bool midpoints_share =
        i + 2 < 255 && (order_key(midpoints_[i]) >> 16) == (order_key(midpoints_[i + 2]) >> 16);
    const bool values_share = (order_key(values_[i]) >> 16) == (order_key(values_[i + 2]) >> 16);
    if (midpoints_share || values_share)
      throw std::logic_error("DynamicCode: three entries share a lookup bucket");
  }
}

const DynamicCode& DynamicCode::signed_code() {
  static const DynamicCode code(true);
  return code;
}

const DynamicCode& DynamicCode::unsigned_code() {
  static const DynamicCode code(false);
  return code;
}

void DynamicCode::dequantize(const uint8_t* codes, float scale, float* out, int64_t n) const {
  for (int64_t j = 0; j < n; ++j) out[j] = value(codes[j]) * scale;
}

void DynamicCode::quantize(const float* x, float inv, uint8_t* out, int64_t n) const {
  for (int64_t j = 0; j < n; ++j) out[j] = quantize(x[j] * inv);
}

void DynamicCode::quantize_stochastic(const float* x, float inv, const float* u, uint8_t* out,
                                      int64_t n) const {
  for (int64_t j = 0; j < n; ++j) out[j] = quantize_stochastic(x[j] * inv, u[j]);
}

uint8_t DynamicCode::quantize_by_search(float x) const {
  // Nearest index = number of midpoints <= x (midpoints_[255] is +inf, never counted).
  return static_cast<uint8_t>(std::upper_bound(midpoints_.begin(), midpoints_.begin() + 255, x) -
                              midpoints_.begin());
}

namespace {

BlockQuantized quantize_cpu(const at::Tensor& x_in, const DynamicCode& code, int64_t block_size) {
  const at::Tensor x = x_in.detach().contiguous();
  const int64_t n = x.numel(), n_blocks = (n + block_size - 1) / block_size;
  BlockQuantized q{at::empty({n}, x.options().dtype(at::kByte)), at::empty({n_blocks}, x.options()),
                   block_size};
  const float* xd = x.data_ptr<float>();
  uint8_t* cd = q.codes.data_ptr<uint8_t>();
  float* ad = q.absmax.data_ptr<float>();
  at::parallel_for(0, n_blocks, 64, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t lo = b * block_size, hi = std::min(n, lo + block_size);
      float absmax = 0.0f;
      for (int64_t j = lo; j < hi; ++j) absmax = std::max(absmax, std::fabs(xd[j]));
      const float inv = absmax > 0.0f ? 1.0f / absmax : 0.0f;
      code.quantize(xd + lo, inv, cd + lo, hi - lo);
      ad[b] = absmax;
    }
  });
  return q;
}

BlockQuantized quantize_fallback(const at::Tensor& x, const DynamicCode& code, int64_t block_size) {
  return quantize_blockwise_aten(x, code, block_size);
}

at::Tensor dequantize_cpu(const BlockQuantized& q, const DynamicCode& code) {
  const int64_t n = q.codes.numel(), bs = q.block_size;
  at::Tensor out = at::empty({n}, q.absmax.options());
  const uint8_t* cd = q.codes.data_ptr<uint8_t>();
  const float* ad = q.absmax.data_ptr<float>();
  float* od = out.data_ptr<float>();
  at::parallel_for(0, n, 65536, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) od[j] = code.value(cd[j]) * ad[j / bs];
  });
  return out;
}

using QuantizeFn = BlockQuantized (*)(const at::Tensor&, const DynamicCode&, int64_t);
using DequantizeFn = at::Tensor (*)(const BlockQuantized&, const DynamicCode&);

// bf16 input has no kernel of its own: ATen quantizes its fp32 values (the same codes).
const KernelTable<QuantizeFn> kQuantize{"quantize_blockwise", quantize_cpu, nullptr,
                                        quantize_fallback,
                                        "no bf16 kernel; ATen's ops quantized the fp32 values"};
const KernelTable<DequantizeFn> kDequantize{"dequantize_blockwise", dequantize_cpu, nullptr,
                                            dequantize_blockwise_aten, ""};

// The code's values and decision midpoints as fp32 tensors on `device` (built as DynamicCode
// builds them, so bucketize gives the CPU kernel's indices).
at::Tensor code_values(const DynamicCode& code, const at::Device& device) {
  return at::tensor(at::ArrayRef<float>(code.values().data(), 256)).to(device);
}

}  // namespace

BlockQuantized quantize_blockwise_aten(const at::Tensor& x_in, const DynamicCode& code,
                                       int64_t block_size, const at::Tensor& u) {
  const at::Tensor x = x_in.detach().reshape({-1}).to(at::kFloat);  // [n]
  const int64_t n = x.numel(), n_blocks = (n + block_size - 1) / block_size;
  const at::Tensor padded = at::constant_pad_nd(x, {0, n_blocks * block_size - n});
  const at::Tensor blocks = padded.view({n_blocks, block_size});
  const at::Tensor absmax = blocks.abs().amax(1);  // [n_blocks]
  const at::Tensor inv = at::where(absmax > 0, absmax.reciprocal(), at::zeros_like(absmax));
  const at::Tensor scaled = (blocks * inv.unsqueeze(1)).view({-1}).narrow(0, 0, n);  // [n]
  const at::Tensor values = code_values(code, x.device());                          // [256]
  at::Tensor index;
  if (!u.defined()) {
    // Nearest, ties up: the number of midpoints <= x.
    const at::Tensor mid = (values.narrow(0, 0, 255) + values.narrow(0, 1, 255)) * 0.5;
    index = at::bucketize(scaled, mid, /*out_int32=*/false, /*right=*/true);
  } else {
    // The bracketing pair [lo, lo + 1]; the upper one with probability (x - a) / (b - a).
    const at::Tensor lo = (at::bucketize(scaled, values, false, true) - 1).clamp_(0, 254);
    const at::Tensor a = values.index_select(0, lo), b = values.index_select(0, lo + 1);
    index = lo + (u.reshape({-1}).to(at::kFloat) * (b - a) < scaled - a).to(at::kLong);
  }
  return {index.to(at::kByte), absmax, block_size};
}

at::Tensor dequantize_blockwise_aten(const BlockQuantized& q, const DynamicCode& code) {
  const int64_t n = q.codes.numel();
  const at::Tensor values = code_values(code, q.codes.device());
  const at::Tensor scale = q.absmax.repeat_interleave(q.block_size).narrow(0, 0, n);
  return values.index_select(0, q.codes.to(at::kLong)) * scale;
}

BlockQuantized quantize_blockwise(const at::Tensor& x, const DynamicCode& code, int64_t block_size) {
  if (block_size < 1) throw std::invalid_argument("quantize_blockwise: block_size must be >= 1");
  return kQuantize(kernel_path(x), x, code, block_size);
}

at::Tensor dequantize_blockwise(const BlockQuantized& q, const DynamicCode& code) {
  const int64_t n = q.codes.numel(), bs = q.block_size;
  if (bs < 1 || q.absmax.numel() != (n + bs - 1) / bs)
    throw std::invalid_argument("dequantize_blockwise: absmax does not match codes and block size");
  const bool layout_ok = q.codes.is_contiguous() && q.absmax.is_contiguous() &&
                         q.codes.scalar_type() == at::kByte && q.codes.device() == q.absmax.device();
  return kDequantize(kernel_path(q.absmax, layout_ok), q, code);
}

}  // namespace ht
