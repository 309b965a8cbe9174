// GPT-2 block arithmetic. Linear layers run on [B*T, in] views with the [in, out] weights as they
// are: no weight is ever transposed or copied.
#include "gpt_block.h"

#include "kernels/gelu.h"
#include "kernels/layer_norm.h"
#include "kernels/linear.h"
#include "hybrid/kernels/recompute.h"

namespace ht {

Conv1DImpl::Conv1DImpl(int64_t in, int64_t out) {
  weight = register_parameter("weight", torch::empty({in, out}));
  bias = register_parameter("bias", torch::zeros({out}));
}

at::Tensor Conv1DImpl::forward(const at::Tensor& x) {
  return linear_in_out(x, weight, bias);  // [..., out]
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(int64_t n_embd, int64_t n_head)
    : n_head_(n_head) {
  TORCH_CHECK(n_embd % n_head == 0, "GPT: n_embd ", n_embd, " is not divisible by n_head ",
              n_head);
  c_attn = register_module("c_attn", Conv1D(n_embd, 3 * n_embd));
  c_proj = register_module("c_proj", Conv1D(n_embd, n_embd));
}

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x, const AttentionCore& core,
                                            double dropout_p) {
  const auto qkv = c_attn(x);                    // [B, T, 3C]
  return c_proj(core(qkv, n_head_, dropout_p));  // [B, T, C]
}

GPTMLPImpl::GPTMLPImpl(int64_t n_embd) {
  c_fc = register_module("c_fc", Conv1D(n_embd, 4 * n_embd));
  c_proj = register_module("c_proj", Conv1D(4 * n_embd, n_embd));
}

at::Tensor GPTMLPImpl::forward(const at::Tensor& x) {
  const auto u = c_fc(x);  // [B, T, 4C]
  if (!recompute_gelu) return c_proj(gelu_tanh(u));
  return recompute([this](const at::Tensor& v) { return c_proj(gelu_tanh(v)); }, u,
                   {c_proj->weight, c_proj->bias});
}

GPTBlock::GPTBlock(int64_t n_embd, int64_t n_head) {
  ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd})));
  attn = register_module("attn", CausalSelfAttention(n_embd, n_head));
  ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd})));
  mlp = register_module("mlp", GPTMLP(n_embd));
}

at::Tensor GPTBlock::forward(const at::Tensor& x, const AttentionCore& core, double dropout_p,
                            c10::ScalarType compute) {
  auto norm = [compute](const torch::nn::LayerNorm& ln, const at::Tensor& in) {
    return layer_norm_to(in, ln->weight, ln->bias, ln->options.eps(), compute);  // [B, T, C]
  };
  auto a = attn(norm(ln_1, x), core, dropout_p);
  if (dropout_p > 0.0) a = at::dropout(a, dropout_p, /*train=*/true);
  const auto h = x + a;  // fp32 residual
  auto m = mlp(norm(ln_2, h));
  if (dropout_p > 0.0) m = at::dropout(m, dropout_p, /*train=*/true);
  return h + m;
}

}  // namespace ht
