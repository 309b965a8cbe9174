// Fused LM head + cross entropy. Per chunk of rows: logits = h_c @ wte^T, log-softmax, loss;
// and when gradients are wanted, dlogits = softmax - onehot turned at once into dh and dwte.
#include "hybrid/kernels/lm_head_loss.h"

#include <algorithm>

#include <torch/torch.h>

#include "kernels/gemm.h"

namespace ht {
namespace {

// Rows per chunk: keeps a chunk's logits near 64 MiB whatever the vocabulary.
constexpr int64_t kChunkElements = int64_t{1} << 24;

struct HeadGrads {
  at::Tensor dh;    // [N, C] or undefined
  at::Tensor dwte;  // [V, C] or undefined
};

// Returns the summed loss; fills grads (already divided by N) when asked for.
at::Tensor chunked_loss(const at::Tensor& h, const at::Tensor& wte, const at::Tensor& targets,
                        bool want_dh, bool want_dwte, HeadGrads* grads) {
  const int64_t N = h.size(0), V = wte.size(0);
  const int64_t rows = std::clamp<int64_t>(kChunkElements / V, 1, N);
  const float inv_n = 1.0f / static_cast<float>(N);
  if (want_dh) grads->dh = at::empty_like(h);
  if (want_dwte) grads->dwte = at::empty_like(wte);
  auto loss_sum = torch::zeros({}, h.options().dtype(at::kDouble));
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    const auto h_c = h.narrow(0, r0, n);                     // [n, C]
    const auto t_c = targets.narrow(0, r0, n).unsqueeze(1);  // [n, 1]
    auto logp = at::log_softmax(matmul2d(h_c, wte.t()), 1);  // [n, V]
    loss_sum -= logp.gather(1, t_c).sum(at::kDouble);
    if (!want_dh && !want_dwte) continue;
    // d(sum of losses)/dlogits = softmax - onehot; the 1/N of the mean rides on the GEMM alpha.
    auto dlogits = logp.exp_().scatter_add_(1, t_c, at::full({n, 1}, -1.0f, logp.options()));
    if (want_dh) {
      auto dh_c = grads->dh.narrow(0, r0, n);
      matmul_into(dh_c, dlogits, wte, /*alpha=*/inv_n, /*beta=*/0.0f);  // [n, C]
    }
    if (want_dwte) {
      matmul_into(grads->dwte, dlogits.t(), h_c, /*alpha=*/inv_n,
                  /*beta=*/r0 == 0 ? 0.0f : 1.0f);  // [V, C]
    }
  }
  return loss_sum;
}

class LMHeadCrossEntropy : public torch::autograd::Function<LMHeadCrossEntropy> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& h,
                            const at::Tensor& wte, const at::Tensor& targets) {
    HeadGrads grads;
    const auto loss_sum =
        chunked_loss(h, wte, targets, h.requires_grad(), wte.requires_grad(), &grads);
    ctx->save_for_backward({grads.dh, grads.dwte});
    return (loss_sum / static_cast<double>(h.size(0))).to(h.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    at::Tensor dh = saved[0], dwte = saved[1];
    // The mean loss is almost always the root of backward (grad 1): hand the buffers over as is.
    const auto g = grad_out[0];
    if (g.defined() && g.item<double>() != 1.0) {
      if (dh.defined()) dh = dh * g;
      if (dwte.defined()) dwte = dwte * g;
    }
    return {dh, dwte, at::Tensor()};
  }
};

}  // namespace

at::Tensor lm_head_cross_entropy(const at::Tensor& h, const at::Tensor& wte,
                                 const at::Tensor& targets) {
  TORCH_CHECK(h.dim() == 2 && wte.dim() == 2 && h.size(1) == wte.size(1),
              "lm_head_cross_entropy: expected h [N, C] and wte [V, C], got h ", h.sizes(),
              " and wte ", wte.sizes());
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == h.size(0) &&
                  targets.scalar_type() == at::kLong,
              "lm_head_cross_entropy: expected int64 targets [", h.size(0), "], got ",
              targets.scalar_type(), " ", targets.sizes());
  TORCH_CHECK(h.size(0) > 0, "lm_head_cross_entropy: empty batch");
  const int64_t lo = targets.min().item<int64_t>(), hi = targets.max().item<int64_t>();
  TORCH_CHECK(lo >= 0 && hi < wte.size(0), "lm_head_cross_entropy: targets must lie in [0, ",
              wte.size(0), "), found values in [", lo, ", ", hi, "]");
  const auto hc = h.contiguous();
  const auto wc = wte.contiguous();
  if (at::GradMode::is_enabled() && (h.requires_grad() || wte.requires_grad())) {
    return LMHeadCrossEntropy::apply(hc, wc, targets);
  }
  HeadGrads none;
  const auto loss_sum = chunked_loss(hc, wc, targets, false, false, &none);
  return (loss_sum / static_cast<double>(h.size(0))).to(h.scalar_type());
}

}  // namespace ht
