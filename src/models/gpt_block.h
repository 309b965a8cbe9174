// The pieces of a GPT-2 transformer block, named as in the Hugging Face checkpoint
// (ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj). Private to ht_models.
#pragma once

#include <torch/torch.h>

#include "hybrid/kernels/attention_core.h"

namespace ht {

// GPT-2's "Conv1D": a linear layer stored as weight [in, out], so y = x @ W + b with no transpose.
class Conv1DImpl : public torch::nn::Module {
 public:
  Conv1DImpl(int64_t in, int64_t out);
  at::Tensor forward(const at::Tensor& x);  // [..., in] -> [..., out]
  at::Tensor weight;  // [in, out]
  at::Tensor bias;    // [out]
};
TORCH_MODULE(Conv1D);

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(int64_t n_embd, int64_t n_head);
  // x [B, T, C] -> [B, T, C] in x's dtype; `core` computes softmax(q k^T / sqrt(hs) + causal
  // mask) v.
  at::Tensor forward(const at::Tensor& x, const AttentionCore& core, double dropout_p);
  Conv1D c_attn{nullptr}, c_proj{nullptr};

 private:
  int64_t n_head_;
};
TORCH_MODULE(CausalSelfAttention);

class GPTMLPImpl : public torch::nn::Module {
 public:
  explicit GPTMLPImpl(int64_t n_embd);
  at::Tensor forward(const at::Tensor& x);  // [B, T, C] -> [B, T, C]
  Conv1D c_fc{nullptr}, c_proj{nullptr};
  // Selective recompute: c_proj's input (the GELU output, [B, T, 4C]) is rebuilt in backward
  // from c_fc's output, which GELU's backward keeps anyway.
  bool recompute_gelu = false;
};
TORCH_MODULE(GPTMLP);

// Pre-LN block: x + attn(ln_1(x)), then + mlp(ln_2(x)).
class GPTBlock : public torch::nn::Module {
 public:
  GPTBlock(int64_t n_embd, int64_t n_head);
  // x [B, T, C] fp32 (the residual stream) -> [B, T, C] fp32. The LayerNorms write `compute`
  // (fp32 or bf16), which the attention and MLP branches then compute in; their bf16 outputs join
  // the fp32 residual by type promotion (autograd hands them bf16 gradients).
  at::Tensor forward(const at::Tensor& x, const AttentionCore& core, double dropout_p,
                     c10::ScalarType compute = c10::kFloat);
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  GPTMLP mlp{nullptr};
};

}  // namespace ht
