// Vectorised fp32 <-> bf16 casts of whole tensors (target_clones picks AVX-512/AVX2 at load): the
// weight casts and output roundings of bf16 mixed precision run through these.
#include "kernels/bf16.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

namespace ht {
namespace {

constexpr int64_t kGrain = 32768;  // elements per parallel task

__attribute__((target_clones("avx512f", "avx2", "default")))
void round_kernel(const float* __restrict x, uint16_t* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_bf16(x[i]);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void widen_kernel(const uint16_t* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(x[i]);
}

}  // namespace

void round_into(at::Tensor& dst, const at::Tensor& src) {
  TORCH_CHECK(dst.scalar_type() == at::kBFloat16 && src.scalar_type() == at::kFloat &&
                  dst.is_contiguous() && src.is_contiguous() && dst.numel() == src.numel() &&
                  dst.device().is_cpu() && src.device().is_cpu(),
              "round_into: expected contiguous bf16 dst and float32 src of one size on the CPU");
  const float* xp = src.data_ptr<float>();
  auto* yp = reinterpret_cast<uint16_t*>(dst.data_ptr<at::BFloat16>());
  at::parallel_for(0, src.numel(), kGrain, [&](int64_t b, int64_t e) { round_kernel(xp + b, yp + b, e - b); });
}

void widen_into(at::Tensor& dst, const at::Tensor& src) {
  TORCH_CHECK(dst.scalar_type() == at::kFloat && src.scalar_type() == at::kBFloat16 &&
                  dst.is_contiguous() && src.is_contiguous() && dst.numel() == src.numel() &&
                  dst.device().is_cpu() && src.device().is_cpu(),
              "widen_into: expected contiguous float32 dst and bf16 src of one size on the CPU");
  const auto* xp = reinterpret_cast<const uint16_t*>(src.data_ptr<at::BFloat16>());
  float* yp = dst.data_ptr<float>();
  at::parallel_for(0, src.numel(), kGrain, [&](int64_t b, int64_t e) { widen_kernel(xp + b, yp + b, e - b); });
}

at::Tensor to_bf16(const at::Tensor& x) {
  if (x.scalar_type() != at::kFloat || !x.is_contiguous() || !x.device().is_cpu())
    return x.to(at::kBFloat16);
  at::Tensor y = at::empty(x.sizes(), x.options().dtype(at::kBFloat16));
  round_into(y, x);
  return y;
}

at::Tensor to_f32(const at::Tensor& x) {
  if (x.scalar_type() != at::kBFloat16 || !x.is_contiguous() || !x.device().is_cpu())
    return x.to(at::kFloat);
  at::Tensor y = at::empty(x.sizes(), x.options().dtype(at::kFloat));
  widen_into(y, x);
  return y;
}

}  // namespace ht
