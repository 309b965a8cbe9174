// Conv1D-layout linear layer with a hand-written backward: dx = dy W^T, dW = x^T dy, db = sum dy.
// Written out (rather than at::addmm) so every GEMM uses the backend of gemm.h, in fp32 or bf16.
#include "kernels/linear.h"

#include <torch/torch.h>

#include "kernels/bf16.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"

namespace ht {
namespace {

// x2 [N, in] contiguous, w [in, out] (x2's dtype, or fp32 masters for bf16 x2) -> [N, out] in
// x2's dtype. The bias rows are written first and the GEMM accumulates onto them (fp32 for bf16).
at::Tensor forward_2d(const at::Tensor& x2, const at::Tensor& w, const at::Tensor& b) {
  if (x2.scalar_type() == at::kFloat) {
    auto y = at::empty({x2.size(0), w.size(1)}, x2.options());  // [N, out]
    if (b.defined()) y.copy_(b.expand_as(y));
    matmul_into(y, x2, w, 1.0f, b.defined() ? 1.0f : 0.0f);
    return y;
  }
  auto acc = at::empty({x2.size(0), w.size(1)}, x2.options().dtype(at::kFloat));  // [N, out] fp32
  if (b.defined()) acc.copy_(b.expand_as(acc));
  matmul_into(acc, x2, w.scalar_type() == x2.scalar_type() ? w : to_bf16(w), 1.0f,
              b.defined() ? 1.0f : 0.0f);
  return to_bf16(acc);
}

class LinearInOut : public torch::autograd::Function<LinearInOut> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x2,
                            const at::Tensor& w, const at::Tensor& b) {
    // bf16: the rounded weight is made once and kept for dx (as large as the layer's weight in
    // bf16); the fp32 master is not needed in backward.
    const at::Tensor wc = w.scalar_type() == x2.scalar_type() ? w : to_bf16(w.contiguous());
    ctx->save_for_backward({x2, wc});
    ctx->saved_data["dx"] = x2.requires_grad();
    ctx->saved_data["dw"] = w.requires_grad();
    ctx->saved_data["db"] = b.defined() && b.requires_grad();
    ctx->saved_data["w_dtype"] = w.scalar_type();
    ctx->saved_data["b_dtype"] = b.defined() ? b.scalar_type() : w.scalar_type();
    return forward_2d(x2, wc, b);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto &x2 = saved[0], &w = saved[1];  // [N, in], [in, out] in the compute dtype
    const auto dy = grad_out[0].to(x2.scalar_type()).contiguous();  // [N, out]
    const auto w_dtype = ctx->saved_data["w_dtype"].toScalarType();
    const auto b_dtype = ctx->saved_data["b_dtype"].toScalarType();
    at::Tensor dx, dw, db;
    if (ctx->saved_data["dx"].toBool()) dx = matmul2d(dy, w.t());  // [N, in]
    // Weight and bias gradients accumulate in fp32 and stay fp32 for fp32 masters.
    if (ctx->saved_data["dw"].toBool()) dw = matmul2d_f32(x2.t(), dy).to(w_dtype);   // [in, out]
    if (ctx->saved_data["db"].toBool()) db = dy.sum(0, false, at::kFloat).to(b_dtype);  // [out]
    return {dx, dw, db};
  }
};

using LinearFn = at::Tensor (*)(const at::Tensor& x2, const at::Tensor& w, const at::Tensor& b);

at::Tensor linear_cpu(const at::Tensor& x2, const at::Tensor& w, const at::Tensor& b) {
  const bool grad = at::GradMode::is_enabled() &&
                    (x2.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad()));
  if (grad) return LinearInOut::apply(x2, w, b);
  return forward_2d(x2, w, b);
}

// ATen, differentiable by autograd: CUDA (where autocast picks the GEMM dtype), double, and mixed
// dtypes (weights cast to x's dtype).
at::Tensor linear_fallback(const at::Tensor& x2, const at::Tensor& w, const at::Tensor& b) {
  const auto dt = x2.scalar_type();
  const at::Tensor wc = w.scalar_type() == dt ? w : w.to(dt);
  if (!b.defined()) return at::mm(x2, wc);
  return at::addmm(b.scalar_type() == dt ? b : b.to(dt), x2, wc);
}

const KernelTable<LinearFn> kLinear{"linear_in_out", linear_cpu, linear_cpu, linear_fallback};

}  // namespace

at::Tensor linear_in_out(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const int64_t in = weight.size(0), out = weight.size(1);
  TORCH_CHECK(x.size(-1) == in, "linear_in_out: input has ", x.size(-1),
              " features, weight expects ", in);
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  const auto x2 = x.reshape({-1, in}).contiguous();  // [N, in], a view for contiguous x
  // The CPU kernels take fp32 weights for fp32 or bf16 inputs (or weights of x's own dtype).
  const bool params_ok = (weight.scalar_type() == x.scalar_type() || weight.scalar_type() == at::kFloat) &&
                         (!bias.defined() || bias.scalar_type() == weight.scalar_type()) &&
                         weight.device() == x.device();
  const auto y = kLinear(kernel_path(x, params_ok), x2, weight, bias);
  return y.view(sizes);
}

}  // namespace ht
