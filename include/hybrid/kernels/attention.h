// Scaled dot-product attention three ways: the quadratic-memory reference, an exact tiled
// FlashAttention-2 whose memory is linear in T, and (LibTorch >= 2.0) ATen's own SDPA.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

#include <ATen/core/Tensor.h>

namespace ht {

// All functions: q [B, nh, T, hs], k and v [B, nh, S, hs], float32 on the CPU; they return
// y [B, nh, T, hs] = softmax(q k^T / sqrt(hs) + mask) v. causal: query t sees keys 0..t (mask
// aligned top-left, as at::scaled_dot_product_attention does; GPT uses S == T).

// Differentiable, exact up to fp32 rounding. Forward visits (block_q x block_k) score tiles with an
// online softmax and keeps only y and the row logsumexp [B, nh, T] for backward, which recomputes
// the tiles (so the op is its own activation recompute: no T x T tensor ever exists). In causal
// mode tiles entirely above the diagonal are skipped (about half the work). Parallel over
// (batch*head, query block) in forward and over batch*head in backward.
// Default tiles: 128 x 128 ran 10-35 % faster than 64 x 64 here at T = 1024-2048 (fewer ATen
// calls per FLOP) and the same at T = 256; two such fp32 tiles per thread are 128 KiB.
at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           bool causal, int64_t block_q = 128, int64_t block_k = 128);

// Plain autograd ops; saves the [B, nh, T, S] probabilities. The reference in tests and benchmarks.
at::Tensor naive_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           bool causal);

// The raw kernels behind flash_attention, without autograd (they never build a graph).
// Forward returns (y [B, nh, T, hs], lse [B, nh, T]) with lse = logsumexp of the scaled, masked
// scores of each row. Backward takes dy = dL/dy and returns (dq, dk, dv).
std::tuple<at::Tensor, at::Tensor> flash_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, bool causal,
                                                           int64_t block_q, int64_t block_k);
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(
    const at::Tensor& dy, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& y, const at::Tensor& lse, bool causal, int64_t block_q, int64_t block_k);

enum class AttentionKernel {
  Naive,  // naive_attention
  Flash,  // flash_attention with its default tiles
  Sdpa,   // at::scaled_dot_product_attention; LibTorch >= 2.0 only
};
AttentionKernel parse_attention_kernel(const std::string& name);  // "naive", "flash", "sdpa"
std::string to_string(AttentionKernel kernel);
bool sdpa_available();  // true when built against LibTorch >= 2.0

// Dispatches to one of the above; Sdpa on LibTorch 1.x throws std::invalid_argument.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                     AttentionKernel kernel);

}  // namespace ht
