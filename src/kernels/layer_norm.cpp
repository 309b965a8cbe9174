// LayerNorm with fp32 statistics and a bf16 output, the input saved in bf16: what bf16 mixed
// precision keeps of a pre-LN block's norms (the residual stream itself stays fp32).
#include "kernels/layer_norm.h"

#include <torch/torch.h>

#include "kernels/bf16.h"
#include "kernels/dispatch.h"

namespace ht {
namespace {

class LayerNormToBf16 : public torch::autograd::Function<LayerNormToBf16> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, const at::Tensor& bias, double eps) {
    const int64_t C = x.size(-1);
    auto [y, mean, rstd] = at::native_layer_norm(x, {C}, weight, bias, eps);  // fp32
    ctx->save_for_backward({to_bf16(x.contiguous()), mean, rstd, weight, bias});
    ctx->saved_data["x_dtype"] = x.scalar_type();
    return to_bf16(y);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto x = to_f32(saved[0]);  // [..., C], the rounded input widened again
    const auto &mean = saved[1], &rstd = saved[2], &weight = saved[3], &bias = saved[4];
    const auto dy = grad_out[0].to(at::kFloat).contiguous();
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                      ctx->needs_input_grad(2)};
    auto [dx, dw, db] =
        at::native_layer_norm_backward(dy, x, {x.size(-1)}, mean, rstd, weight, bias, mask);
    if (dx.defined()) dx = dx.to(ctx->saved_data["x_dtype"].toScalarType());
    return {dx, dw, db, at::Tensor()};
  }
};

using LayerNormFn = at::Tensor (*)(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                                   double eps, c10::ScalarType out_dtype);

at::Tensor ln_f32(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps,
                  c10::ScalarType) {
  return at::layer_norm(x, {x.size(-1)}, w, b, eps);
}

at::Tensor ln_bf16(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps,
                   c10::ScalarType) {
  const bool grad = at::GradMode::is_enabled() &&
                    (x.requires_grad() || w.requires_grad() || b.requires_grad());
  if (!grad) return to_bf16(at::layer_norm(x, {x.size(-1)}, w, b, eps));
  return LayerNormToBf16::apply(x, w, b, eps);
}

at::Tensor ln_fallback(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps,
                       c10::ScalarType out_dtype) {
  return at::layer_norm(x, {x.size(-1)}, w, b, eps).to(out_dtype);
}

const KernelTable<LayerNormFn> kLayerNorm{"layer_norm", ln_f32, ln_bf16, ln_fallback};

}  // namespace

at::Tensor layer_norm_to(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                         double eps, c10::ScalarType out_dtype) {
  const bool fp32_in = x.scalar_type() == at::kFloat && weight.defined() && bias.defined() &&
                       weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat;
  return kLayerNorm(kernel_path(x.device(), out_dtype, fp32_in), x, weight, bias, eps, out_dtype);
}

}  // namespace ht
