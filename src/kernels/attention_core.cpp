// The "naive" attention core as one autograd Function with a hand-written backward. Work is
// split over (batch, head) pairs, each a handful of small GEMMs on strided views of qkv; ATen's
// own per-op threading is far slower at these sizes (bmm loops over heads one at a time).
#include "hybrid/kernels/attention_core.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "kernels/gemm.h"

namespace ht {
namespace {

// 0 on and below the diagonal, -inf above: added to the scores it hides the future.
at::Tensor additive_causal_mask(int64_t block_size) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  return torch::full({block_size, block_size}, neg_inf).triu_(1);  // [ctx, ctx]
}

// Head h of part (0 = q, 1 = k, 2 = v) of batch row b in a packed [B, T, parts*C] tensor.
at::Tensor head(const at::Tensor& packed, int64_t b, int64_t part, int64_t h, int64_t C,
                int64_t hs) {
  return packed.select(0, b).narrow(1, part * C + h * hs, hs);  // [T, hs], row stride parts*C
}

class NaiveCausalAttention : public torch::autograd::Function<NaiveCausalAttention> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& qkv_in,
                            const at::Tensor& mask, int64_t n_head, double dropout_p) {
    const auto qkv = qkv_in.contiguous();  // [B, T, 3C]
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, hs = C / n_head;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    const auto causal = mask.narrow(0, 0, T).narrow(1, 0, T);  // [T, T]
    auto y = at::empty({B, T, C}, qkv.options());
    auto att = at::empty({B, n_head, T, T}, qkv.options());  // softmax probabilities
    at::Tensor keep;  // dropout multipliers, 0 or 1/(1-p)
    if (dropout_p > 0.0) {
      keep = at::empty_like(att).bernoulli_(1.0 - dropout_p).div_(1.0 - dropout_p);
    }

    at::parallel_for(0, B * n_head, 1, [&](int64_t begin, int64_t end) {
      // Worker threads do not inherit the caller's grad mode; these are plain kernels anyway.
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      auto scores = at::empty({T, T}, qkv.options());
      auto dropped = keep.defined() ? at::empty({T, T}, qkv.options()) : at::Tensor();
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / n_head, h = i % n_head;
        const auto q = head(qkv, b, 0, h, C, hs), k = head(qkv, b, 1, h, C, hs);
        const auto v = head(qkv, b, 2, h, C, hs);
        auto p = att.select(0, b).select(0, h);  // [T, T]
        scores.copy_(causal);
        matmul_into(scores, q, k.t(), scale, /*beta=*/1.0f);  // mask + q k^T / sqrt(hs)
        at::softmax_out(p, scores, -1);
        auto y_bh = head(y, b, 0, h, C, hs);  // [T, hs], row stride C
        if (keep.defined()) {
          at::mul_out(dropped, p, keep.select(0, b).select(0, h));
          matmul_into(y_bh, dropped, v);
        } else {
          matmul_into(y_bh, p, v);
        }
      }
    });
    ctx->save_for_backward({qkv, att, keep});
    ctx->saved_data["n_head"] = n_head;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto &qkv = saved[0], &att = saved[1], &keep = saved[2];
    const int64_t n_head = ctx->saved_data["n_head"].toInt();
    const auto dy = grad_out[0].contiguous();  // [B, T, C]
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, hs = C / n_head;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    auto dqkv = at::empty_like(qkv);  // [B, T, 3C]

    at::parallel_for(0, B * n_head, 1, [&](int64_t begin, int64_t end) {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      auto dp = at::empty({T, T}, qkv.options());
      auto ds = at::empty({T, T}, qkv.options());
      auto dropped = keep.defined() ? at::empty({T, T}, qkv.options()) : at::Tensor();
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / n_head, h = i % n_head;
        const auto q = head(qkv, b, 0, h, C, hs), k = head(qkv, b, 1, h, C, hs);
        const auto v = head(qkv, b, 2, h, C, hs);
        const auto dy_bh = head(dy, b, 0, h, C, hs);  // [T, hs]
        const auto p = att.select(0, b).select(0, h);  // [T, T]
        auto dq = head(dqkv, b, 0, h, C, hs), dk = head(dqkv, b, 1, h, C, hs);
        auto dv = head(dqkv, b, 2, h, C, hs);
        matmul_into(dp, dy_bh, v.t());  // d(probabilities after dropout)
        if (keep.defined()) {
          const auto keep_bh = keep.select(0, b).select(0, h);
          at::mul_out(dropped, p, keep_bh);
          matmul_into(dv, dropped.t(), dy_bh);
          dp.mul_(keep_bh);
        } else {
          matmul_into(dv, p.t(), dy_bh);
        }
        at::_softmax_backward_data_out(ds, dp, p, -1, p.scalar_type());  // d(scores)
        matmul_into(dq, ds, k, scale);
        matmul_into(dk, ds.t(), q, scale);
      }
    });
    return {dqkv, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor naive_attention(const at::Tensor& mask, const at::Tensor& qkv, int64_t n_head,
                           double dropout_p) {
  TORCH_CHECK(qkv.dim() == 3 && qkv.size(2) % (3 * n_head) == 0,
              "attention: expected qkv [B, T, 3C] with C divisible by n_head = ", n_head,
              ", got ", qkv.sizes());
  TORCH_CHECK(qkv.size(1) <= mask.size(0), "attention: sequence length ", qkv.size(1),
              " exceeds the block size ", mask.size(0));
  TORCH_CHECK(qkv.scalar_type() == at::kFloat, "attention: expected float32 qkv, got ",
              qkv.scalar_type());
  return NaiveCausalAttention::apply(qkv, mask, n_head, dropout_p);
}

}  // namespace

std::vector<std::string> attention_core_names() { return {"naive"}; }

AttentionCore make_attention_core(const std::string& name, int64_t block_size) {
  if (name == "naive") {
    at::Tensor mask = additive_causal_mask(block_size);
    return [mask](const at::Tensor& qkv, int64_t n_head, double dropout_p) {
      return naive_attention(mask, qkv, n_head, dropout_p);
    };
  }
  std::string valid;
  for (const auto& n : attention_core_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown attention core '" + name + "'; valid: " + valid);
}

}  // namespace ht
