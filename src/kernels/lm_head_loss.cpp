// Fused LM head + cross entropy. Per chunk of rows: logits = h_c @ wte^T, log-softmax, loss;
// and when gradients are wanted, dlogits = softmax - onehot turned at once into dh and dwte.
// bf16: operands of the three GEMMs in bf16, everything else (logits on) in fp32.
#include "hybrid/kernels/lm_head_loss.h"

#include <algorithm>

#include <torch/torch.h>

#include "kernels/bf16.h"
#include "kernels/dispatch.h"
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
  const bool bf16 = h.scalar_type() == at::kBFloat16;
  // The head's weight in the compute dtype: rounded once per call for bf16 ([V, C], half of wte).
  const at::Tensor w = wte.scalar_type() == h.scalar_type() ? wte : to_bf16(wte);
  if (want_dh) grads->dh = at::empty_like(h);      // [N, C], h's dtype
  if (want_dwte) grads->dwte = at::empty_like(wte);  // [V, C], fp32 for fp32 masters
  auto loss_sum = torch::zeros({}, h.options().dtype(at::kDouble));
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    const auto h_c = h.narrow(0, r0, n);                       // [n, C]
    const auto t_c = targets.narrow(0, r0, n).unsqueeze(1);    // [n, 1]
    auto logp = at::log_softmax(matmul2d_f32(h_c, w.t()), 1);  // [n, V] fp32
    loss_sum -= logp.gather(1, t_c).sum(at::kDouble);
    if (!want_dh && !want_dwte) continue;
    // d(sum of losses)/dlogits = softmax - onehot; the 1/N of the mean rides on the GEMM alpha
    // in fp32, and in bf16 on the operand before it is rounded: oneDNN's AMX GEMM takes no alpha
    // (gemm.cpp), and scaling the [V, C] fp32 dwte around each chunk's GEMM would cost two passes.
    auto dlogits = logp.exp_().scatter_add_(1, t_c, at::full({n, 1}, -1.0f, logp.options()));
    const at::Tensor dl = bf16 ? to_bf16(dlogits.mul_(inv_n)) : dlogits;  // [n, V] GEMM operand
    const float alpha = bf16 ? 1.0f : inv_n;
    if (bf16) {  // the fp32 chunk is no longer needed: free it before the GEMMs
      dlogits.reset();
      logp.reset();
    }
    if (want_dh) {
      auto dh_c = grads->dh.narrow(0, r0, n);
      matmul_into(dh_c, dl, w, alpha, /*beta=*/0.0f);  // [n, C]
    }
    if (want_dwte) {
      matmul_into(grads->dwte, dl.t(), h_c, alpha,
                  /*beta=*/r0 == 0 ? 0.0f : 1.0f);  // [V, C], accumulated in fp32
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
    return (loss_sum / static_cast<double>(h.size(0))).to(at::kFloat);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    at::Tensor dh = saved[0], dwte = saved[1];
    // The mean loss is almost always the root of backward (grad 1): hand the buffers over as is.
    const auto g = grad_out[0];
    if (g.defined() && g.item<double>() != 1.0) {
      if (dh.defined()) dh = (dh * g).to(dh.scalar_type());
      if (dwte.defined()) dwte = (dwte * g).to(dwte.scalar_type());
    }
    return {dh, dwte, at::Tensor()};
  }
};

using HeadFn = at::Tensor (*)(const at::Tensor& h, const at::Tensor& wte, const at::Tensor& targets);

// float32 h and wte, or bfloat16 h with float32 wte; both contiguous.
at::Tensor head_cpu(const at::Tensor& h, const at::Tensor& wte, const at::Tensor& targets) {
  if (at::GradMode::is_enabled() && (h.requires_grad() || wte.requires_grad())) {
    return LMHeadCrossEntropy::apply(h, wte, targets);
  }
  HeadGrads none;
  const auto loss_sum = chunked_loss(h, wte, targets, false, false, &none);
  return (loss_sum / static_cast<double>(h.size(0))).to(at::kFloat);
}

// ATen, differentiable by autograd; keeps the logits. Loss in fp32 at least.
at::Tensor head_fallback(const at::Tensor& h, const at::Tensor& wte, const at::Tensor& targets) {
  const auto w = wte.scalar_type() == h.scalar_type() ? wte : wte.to(h.scalar_type());
  auto logits = at::matmul(h, w.t());  // [N, V]
  if (logits.scalar_type() != at::kDouble) logits = logits.to(at::kFloat);
  return at::cross_entropy_loss(logits, targets);
}

const KernelTable<HeadFn> kHead{"lm_head_cross_entropy", head_cpu, head_cpu, head_fallback};

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
  const bool operands_ok =
      (wte.scalar_type() == h.scalar_type() || wte.scalar_type() == at::kFloat) &&
      wte.device() == h.device() && targets.device() == h.device();
  const KernelPath path = kernel_path(h, operands_ok);
  if (path == KernelPath::Fallback) return kHead(path, h, wte, targets);
  return kHead(path, h.contiguous(), wte.contiguous(), targets);
}

}  // namespace ht
