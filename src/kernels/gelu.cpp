// Tanh-approximated GELU written as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), with a
// branch-free Cephes-style expf so the loops vectorise; target_clones picks AVX-512/AVX2 at load.
#include "kernels/gelu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "kernels/dispatch.h"

// GCC will not if-convert the float clamps below (so will not vectorise) while it must preserve
// floating-point traps; nothing here relies on them. Clang does not trap by default.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
// After the pragma: GCC does not inline functions compiled with other optimisation flags, and a
// call to bf16_to_float in the loops below kept them scalar (16x slower than the fp32 loops).
#include "kernels/bf16.h"

namespace ht {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr int64_t kGrain = 16384;  // elements per parallel task

// e^x for x in [-87, 88], relative error ~2e-7 (Cephes expf); no branches, no libm call.
inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float t = x * 1.44269504088896341f;
  const int32_t n = static_cast<int32_t>(t + 128.5f) - 128;  // round(t); t + 128.5 > 0
  const float fn = static_cast<float>(n);
  const float r = x - fn * 0.693359375f + fn * 2.12194440e-4f;
  const float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * z + r + 1.0f;
  const int32_t bits = (n + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return e * scale;
}

// sigmoid(2u) = 0.5 (1 + tanh(u)).
inline float sigmoid_2u(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 1.0f / (1.0f + exp_approx(-2.0f * u));
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void gelu_forward_kernel(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * sigmoid_2u(x[i]);
}

// d/dx [x s] = s + x * 2 s (1 - s) * du/dx, du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
__attribute__((target_clones("avx512f", "avx2", "default")))
void gelu_backward_kernel(const float* __restrict x, const float* __restrict dy,
                          float* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], s = sigmoid_2u(v);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    dx[i] = dy[i] * (s + v * 2.0f * s * (1.0f - s) * du);
  }
}

// bf16 in and out, fp32 inside: a block at a time is widened into a stack buffer, run through the
// fp32 kernels above and rounded once. (One fused loop with the conversions inline vectorised
// poorly: 4x the fp32 loop's time, against ~1.2x this way.)
constexpr int64_t kBlock = 2048;

__attribute__((target_clones("avx512f", "avx2", "default")))
void widen_block(const uint16_t* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(x[i]);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void round_block(const float* __restrict x, uint16_t* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_bf16(x[i]);
}

void gelu_forward_kernel_bf16(const uint16_t* x, uint16_t* y, int64_t n) {
  alignas(64) float xf[kBlock], yf[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    widen_block(x + b, xf, m);
    gelu_forward_kernel(xf, yf, m);
    round_block(yf, y + b, m);
  }
}

void gelu_backward_kernel_bf16(const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n) {
  alignas(64) float xf[kBlock], dyf[kBlock], dxf[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    widen_block(x + b, xf, m);
    widen_block(dy + b, dyf, m);
    gelu_backward_kernel(xf, dyf, dxf, m);
    round_block(dxf, dx + b, m);
  }
}

const uint16_t* bits(const at::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}
uint16_t* mutable_bits(at::Tensor& t) {
  return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
}

// x contiguous, float32 or bfloat16 -> y of x's shape and dtype.
at::Tensor forward_pass(const at::Tensor& x) {
  auto y = at::empty_like(x, at::MemoryFormat::Contiguous);
  if (x.scalar_type() == at::kBFloat16) {
    const uint16_t* xp = bits(x);
    uint16_t* yp = mutable_bits(y);
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
      gelu_forward_kernel_bf16(xp + b, yp + b, e - b);
    });
    return y;
  }
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
    gelu_forward_kernel(xp + b, yp + b, e - b);
  });
  return y;
}

class GeluTanh : public torch::autograd::Function<GeluTanh> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    return forward_pass(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto x = ctx->get_saved_variables()[0];
    const auto dy = grad_out[0].to(x.scalar_type()).contiguous();
    auto dx = at::empty_like(x);
    if (x.scalar_type() == at::kBFloat16) {
      const uint16_t *xp = bits(x), *dyp = bits(dy);
      uint16_t* dxp = mutable_bits(dx);
      at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
        gelu_backward_kernel_bf16(xp + b, dyp + b, dxp + b, e - b);
      });
      return {dx};
    }
    const float *xp = x.data_ptr<float>(), *dyp = dy.data_ptr<float>();
    float* dxp = dx.data_ptr<float>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
      gelu_backward_kernel(xp + b, dyp + b, dxp + b, e - b);
    });
    return {dx};
  }
};

}  // namespace

namespace {

using GeluFn = at::Tensor (*)(const at::Tensor& x);

// Contiguous float32 or bfloat16 CPU tensors.
at::Tensor gelu_cpu(const at::Tensor& x) {
  if (at::GradMode::is_enabled() && x.requires_grad()) return GeluTanh::apply(x);
  return forward_pass(x);
}

at::Tensor gelu_fallback(const at::Tensor& x) { return at::gelu(x, "tanh"); }

const KernelTable<GeluFn> kGelu{"gelu_tanh", gelu_cpu, gelu_cpu, gelu_fallback};

}  // namespace

at::Tensor gelu_tanh(const at::Tensor& x) { return kGelu(kernel_path(x, x.is_contiguous()), x); }

}  // namespace ht
