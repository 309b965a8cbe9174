// The core of causal self-attention (q, k, v -> y) behind one function type: the seam where a
// memory-efficient (tiled, FlashAttention-style) kernel replaces the naive one without touching GPT.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ht {

// q, k, v [B, nh, T, hs]: strided views into the c_attn output, not necessarily contiguous.
// Returns y [B, T, nh * hs], contiguous, where y[b, t] attends to positions <= t only, with
// softmax scale 1/sqrt(hs). dropout_p applies to the attention probabilities (0 in evaluation).
// The result must be differentiable with respect to q, k and v.
using AttentionCore = std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& v, double dropout_p)>;

// "naive": materialises the [B, nh, T, T] scores with batched matmuls and a cached additive
// causal mask; memory grows with T^2. block_size bounds T. Throws std::invalid_argument for an
// unknown name, listing the valid ones.
AttentionCore make_attention_core(const std::string& name, int64_t block_size);
std::vector<std::string> attention_core_names();

}  // namespace ht
