// The attention cores GPT runs, built from AttentionKind by one factory: "naive" as one autograd
// Function with a hand-written backward (fp32 or bf16), "flash" on head views, "fused" (ATen SDPA).
#include "hybrid/kernels/attention_core.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "kernels/bf16.h"
#include "kernels/dispatch.h"
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

// Work is split over (batch, head) pairs, each a handful of small GEMMs on strided views of qkv;
// ATen's own per-op threading is far slower at these sizes (bmm loops over heads one at a time).
// The compute dtype is qkv's (fp32 or bf16): scores, softmax and its backward are fp32 either
// way; bf16 keeps the probabilities (the saved [B, nh, T, T]) and the GEMM operands in bf16.
class NaiveCausalAttention : public torch::autograd::Function<NaiveCausalAttention> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& qkv_in,
                            const at::Tensor& mask, int64_t n_head, double dropout_p) {
    const auto qkv = qkv_in.contiguous();  // [B, T, 3C]
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, hs = C / n_head;
    const bool bf16 = qkv.scalar_type() == at::kBFloat16;
    const auto f32 = qkv.options().dtype(at::kFloat);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    const auto causal = mask.narrow(0, 0, T).narrow(1, 0, T);  // [T, T] fp32
    auto y = at::empty({B, T, C}, qkv.options());
    auto att = at::empty({B, n_head, T, T}, qkv.options());  // softmax probabilities
    at::Tensor keep;  // dropout multipliers, 0 or 1/(1-p), fp32
    if (dropout_p > 0.0) {
      keep = at::empty({B, n_head, T, T}, f32).bernoulli_(1.0 - dropout_p).div_(1.0 - dropout_p);
    }

    at::parallel_for(0, B * n_head, 1, [&](int64_t begin, int64_t end) {
      // Worker threads do not inherit the caller's grad mode; these are plain kernels anyway.
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      auto scores = at::empty({T, T}, f32);
      auto p32 = bf16 ? at::empty({T, T}, f32) : at::Tensor();  // fp32 softmax before rounding
      auto dropped = keep.defined() ? at::empty({T, T}, qkv.options()) : at::Tensor();
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / n_head, h = i % n_head;
        const auto q = head(qkv, b, 0, h, C, hs), k = head(qkv, b, 1, h, C, hs);
        const auto v = head(qkv, b, 2, h, C, hs);
        auto p = att.select(0, b).select(0, h);  // [T, T]
        scores.copy_(causal);
        matmul_into(scores, q, k.t(), scale, /*beta=*/1.0f);  // mask + q k^T / sqrt(hs), fp32
        if (bf16) {
          at::softmax_out(p32, scores, -1);
          round_into(p, p32);  // p: a contiguous [T, T] slice of att
        } else {
          at::softmax_out(p, scores, -1);
        }
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
    const auto dy = grad_out[0].to(qkv.scalar_type()).contiguous();  // [B, T, C]
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, hs = C / n_head;
    const bool bf16 = qkv.scalar_type() == at::kBFloat16;
    const auto f32 = qkv.options().dtype(at::kFloat);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    auto dqkv = at::empty_like(qkv);  // [B, T, 3C]

    at::parallel_for(0, B * n_head, 1, [&](int64_t begin, int64_t end) {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      auto dp = at::empty({T, T}, f32);
      auto ds = at::empty({T, T}, f32);
      auto p32 = bf16 ? at::empty({T, T}, f32) : at::Tensor();
      auto ds_c = bf16 ? at::empty({T, T}, qkv.options()) : ds;  // ds as the GEMMs read it
      auto dropped = keep.defined() ? at::empty({T, T}, qkv.options()) : at::Tensor();
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / n_head, h = i % n_head;
        const auto q = head(qkv, b, 0, h, C, hs), k = head(qkv, b, 1, h, C, hs);
        const auto v = head(qkv, b, 2, h, C, hs);
        const auto dy_bh = head(dy, b, 0, h, C, hs);  // [T, hs]
        const auto p = att.select(0, b).select(0, h);  // [T, T]
        auto dq = head(dqkv, b, 0, h, C, hs), dk = head(dqkv, b, 1, h, C, hs);
        auto dv = head(dqkv, b, 2, h, C, hs);
        matmul_into(dp, dy_bh, v.t());  // d(probabilities after dropout), fp32
        if (keep.defined()) {
          const auto keep_bh = keep.select(0, b).select(0, h);
          at::mul_out(dropped, p, keep_bh);
          matmul_into(dv, dropped.t(), dy_bh);
          dp.mul_(keep_bh);
        } else {
          matmul_into(dv, p.t(), dy_bh);
        }
        if (bf16) widen_into(p32, p);
        const at::Tensor& p_f = bf16 ? p32 : p;
        at::_softmax_backward_data_out(ds, dp, p_f, -1, at::kFloat);  // d(scores), fp32
        if (bf16) round_into(ds_c, ds);
        matmul_into(dq, ds_c, k, scale);
        matmul_into(dk, ds_c.t(), q, scale);
      }
    });
    return {dqkv, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void check_qkv(const at::Tensor& qkv, int64_t n_head, int64_t block_size) {
  TORCH_CHECK(qkv.dim() == 3 && qkv.size(2) % (3 * n_head) == 0,
              "attention: expected qkv [B, T, 3C] with C divisible by n_head = ", n_head,
              ", got ", qkv.sizes());
  TORCH_CHECK(qkv.size(1) <= block_size, "attention: sequence length ", qkv.size(1),
              " exceeds the block size ", block_size);
}

// q, k, v [B, nh, T, hs] as views of packed qkv [B, T, 3C].
std::tuple<at::Tensor, at::Tensor, at::Tensor> head_views(const at::Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, n_head, C / n_head}).transpose(1, 2); };
  const auto parts = qkv.split(C, 2);  // 3 x [B, T, C]
  return {heads(parts[0]), heads(parts[1]), heads(parts[2])};
}

// y [B, nh, T, hs] -> [B, T, C]; free when y is laid out [B, T, nh, hs] (flash's output is).
at::Tensor merge_heads(const at::Tensor& y) {
  return y.transpose(1, 2).reshape({y.size(0), y.size(2), y.size(1) * y.size(3)});
}

using NaiveFn = at::Tensor (*)(const at::Tensor& mask, const at::Tensor& qkv, int64_t n_head,
                               double dropout_p);

at::Tensor naive_cpu(const at::Tensor& mask, const at::Tensor& qkv, int64_t n_head,
                     double dropout_p) {
  return NaiveCausalAttention::apply(qkv, mask, n_head, dropout_p);
}

// ATen ops (autograd does the backward): CUDA, double, or any other dtype; softmax in fp32.
at::Tensor naive_fallback(const at::Tensor& /*mask*/, const at::Tensor& qkv, int64_t n_head,
                          double dropout_p) {
  const auto [q, k, v] = head_views(qkv, n_head);
  const int64_t T = qkv.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto att = at::matmul(q, k.transpose(-2, -1)) * scale;  // [B, nh, T, T]
  att = att.masked_fill(at::ones({T, T}, qkv.options().dtype(at::kBool)).triu(1),
                        -std::numeric_limits<double>::infinity());
  att = at::softmax(att, -1, at::kFloat).to(qkv.scalar_type());
  if (dropout_p > 0.0) att = at::dropout(att, dropout_p, /*train=*/true);
  return merge_heads(at::matmul(att, v));
}

const KernelTable<NaiveFn> kNaive{"attention (naive)", naive_cpu, naive_cpu, naive_fallback};

at::Tensor flash_core(const at::Tensor& qkv, int64_t n_head) {
  const auto [q, k, v] = head_views(qkv, n_head);
  return merge_heads(flash_attention(q, k, v, /*causal=*/true));  // [B, T, C], no copy
}

#if TORCH_VERSION_MAJOR >= 2
at::Tensor fused_core(const at::Tensor& qkv, int64_t n_head, double dropout_p) {
  const auto [q, k, v] = head_views(qkv, n_head);
  return merge_heads(
      at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p, /*is_causal=*/true));
}
#endif

}  // namespace

AttentionCore make_attention_core(AttentionKind kind, int64_t block_size) {
  switch (kind) {
    case AttentionKind::Naive: {
      const at::Tensor mask = additive_causal_mask(block_size);  // [ctx, ctx] fp32, CPU
      return [mask, block_size](const at::Tensor& qkv, int64_t n_head, double dropout_p) {
        check_qkv(qkv, n_head, block_size);
        return kNaive(kernel_path(qkv), mask, qkv, n_head, dropout_p);
      };
    }
    case AttentionKind::Flash:
      return [block_size](const at::Tensor& qkv, int64_t n_head, double dropout_p) {
        if (dropout_p > 0.0)
          throw std::invalid_argument("attention 'flash' has no attention dropout (dropout_p = " +
                                      std::to_string(dropout_p) + "); use 'naive' or 'fused'");
        check_qkv(qkv, n_head, block_size);
        return flash_core(qkv, n_head);
      };
    case AttentionKind::Fused:
#if TORCH_VERSION_MAJOR >= 2
      return [block_size](const at::Tensor& qkv, int64_t n_head, double dropout_p) {
        check_qkv(qkv, n_head, block_size);
        return fused_core(qkv, n_head, dropout_p);
      };
#else
      throw std::invalid_argument(attention_unavailable_reason(kind));
#endif
  }
  throw std::invalid_argument("make_attention_core: unknown AttentionKind");
}

}  // namespace ht
