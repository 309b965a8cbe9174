// Conv1D-layout linear layer with a hand-written backward: dx = dy W^T, dW = x^T dy, db = sum dy.
// Written out (rather than at::addmm) so every GEMM uses the faster backend of gemm.h.
#include "kernels/linear.h"

#include <torch/torch.h>

#include "kernels/gemm.h"

namespace ht {
namespace {

// x2 [N, in] contiguous -> [N, out].
at::Tensor forward_2d(const at::Tensor& x2, const at::Tensor& w, const at::Tensor& b) {
  auto y = at::empty({x2.size(0), w.size(1)}, x2.options());
  if (b.defined()) y.copy_(b.expand_as(y));  // the GEMM then accumulates onto the bias rows
  matmul_into(y, x2, w, 1.0f, b.defined() ? 1.0f : 0.0f);
  return y;
}

class LinearInOut : public torch::autograd::Function<LinearInOut> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x2,
                            const at::Tensor& w, const at::Tensor& b) {
    ctx->save_for_backward({x2, w});
    ctx->saved_data["dx"] = x2.requires_grad();
    ctx->saved_data["dw"] = w.requires_grad();
    ctx->saved_data["db"] = b.defined() && b.requires_grad();
    return forward_2d(x2, w, b);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto &x2 = saved[0], &w = saved[1];
    const auto dy = grad_out[0].contiguous();  // [N, out]
    at::Tensor dx, dw, db;
    if (ctx->saved_data["dx"].toBool()) dx = matmul2d(dy, w.t());   // [N, in]
    if (ctx->saved_data["dw"].toBool()) dw = matmul2d(x2.t(), dy);  // [in, out]
    if (ctx->saved_data["db"].toBool()) db = dy.sum(0);              // [out]
    return {dx, dw, db};
  }
};

}  // namespace

at::Tensor linear_in_out(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const int64_t in = weight.size(0), out = weight.size(1);
  TORCH_CHECK(x.size(-1) == in, "linear_in_out: input has ", x.size(-1),
              " features, weight expects ", in);
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  const auto x2 = x.reshape({-1, in}).contiguous();  // [N, in], a view for contiguous x
  const bool grad = at::GradMode::is_enabled() &&
                    (x.requires_grad() || weight.requires_grad() ||
                     (bias.defined() && bias.requires_grad()));
  const auto y = grad ? LinearInOut::apply(x2, weight, bias) : forward_2d(x2, weight, bias);
  return y.view(sizes);
}

}  // namespace ht
