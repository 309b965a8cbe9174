// The core of causal self-attention (packed q|k|v -> y) behind one function type: the seam where
// a memory-efficient (tiled, FlashAttention-style) kernel replaces the naive one without touching
// GPT.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ht {

// qkv [B, T, 3C]: the c_attn output, q | k | v along the last dimension, each split into n_head
// heads of hs = C / n_head contiguous columns (GPT-2's layout). Returns y [B, T, C], contiguous,
// with head h in columns [h*hs, (h+1)*hs): y[b, t] attends to positions <= t only, softmax scale
// 1/sqrt(hs). dropout_p applies to the attention probabilities (callers pass 0 in evaluation).
// Must be differentiable with respect to qkv. Taking the packed tensor (as FlashAttention's
// qkvpacked entry point does) lets backward write one [B, T, 3C] gradient with no unpacking.
using AttentionCore =
    std::function<at::Tensor(const at::Tensor& qkv, int64_t n_head, double dropout_p)>;

// "naive": exact attention that materialises each head's [T, T] probabilities (kept for
// backward, so memory grows with B * n_head * T^2). Heads run in parallel, each with
// single-threaded GEMMs on strided views of qkv: no head split/merge copies. block_size
// bounds T. Throws std::invalid_argument for an unknown name, listing the valid ones.
AttentionCore make_attention_core(const std::string& name, int64_t block_size);
std::vector<std::string> attention_core_names();

}  // namespace ht
