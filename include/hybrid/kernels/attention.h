// Scaled dot-product attention: the one AttentionKind choice (naive, flash, fused), the
// quadratic-memory reference, and an exact tiled FlashAttention-2 whose memory is linear in T.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

#include <ATen/core/Tensor.h>

namespace ht {

// How GPT computes attention; GPTConfig::attention, the CLI's model.attention and the memory
// planner all take this one enum, and make_attention_core (attention_core.h) turns it into a core.
enum class AttentionKind {
  Naive,  // exact, keeps each head's [T, T] probabilities for backward (hand-written kernel)
  Flash,  // exact, tiled with an online softmax: memory linear in T (flash_attention below)
  Fused,  // ATen's scaled_dot_product_attention (LibTorch >= 2.0): the path for CUDA
};
AttentionKind parse_attention_kind(const std::string& name);  // "naive" | "flash" | "fused"
std::string to_string(AttentionKind kind);
// true when built against LibTorch >= 2.0, which has at::scaled_dot_product_attention.
bool fused_attention_available();
// "" when `kind` can run in this build; else why not (e.g. fused on LibTorch 1.13).
std::string attention_unavailable_reason(AttentionKind kind);

// All functions: q [B, nh, T, hs], k and v [B, nh, S, hs]; they return y [B, nh, T, hs] =
// softmax(q k^T / sqrt(hs) + mask) v in q's dtype. causal: query t sees keys 0..t (mask aligned
// top-left, as at::scaled_dot_product_attention does; GPT uses S == T).

// Differentiable, exact up to rounding. Forward visits (block_q x block_k) score tiles with an
// online softmax and keeps only y and the row logsumexp [B, nh, T] for backward, which recomputes
// the tiles (so the op is its own activation recompute: no T x T tensor ever exists). In causal
// mode tiles entirely above the diagonal are skipped (about half the work). Parallel over
// (batch*head, query block) in forward and over batch*head in backward.
// Default tiles: 128 x 128 ran 10-35 % faster than 64 x 64 here at T = 1024-2048 (fewer ATen
// calls per FLOP) and the same at T = 256; two such fp32 tiles per thread are 128 KiB.
// float32 CPU tensors: the tiled kernels in fp32. bfloat16 CPU tensors: the same kernels with
// bf16 tile GEMMs accumulating in fp32 (scores, softmax, logsumexp and the output and gradient
// accumulators are fp32; y and the gradients are rounded to bf16 once). Anything else (another
// device or dtype): at::scaled_dot_product_attention on LibTorch >= 2.0, naive_attention before.
at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           bool causal, int64_t block_q = 128, int64_t block_k = 128);

// Plain autograd ops (softmax in fp32 for bf16 inputs); saves the [B, nh, T, S] probabilities.
// The reference in tests and benchmarks, and the fallback of the kernels above.
at::Tensor naive_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           bool causal);

// The raw kernels behind flash_attention, without autograd (they never build a graph); float32
// or bfloat16 CPU tensors only (std::invalid_argument otherwise).
// Forward returns (y [B, nh, T, hs], lse [B, nh, T] float32) with lse = logsumexp of the scaled,
// masked scores of each row. Backward takes dy = dL/dy and returns (dq, dk, dv).
std::tuple<at::Tensor, at::Tensor> flash_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, bool causal,
                                                           int64_t block_q, int64_t block_k);
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(
    const at::Tensor& dy, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& y, const at::Tensor& lse, bool causal, int64_t block_q, int64_t block_k);

// Unpacked q, k, v through the chosen kind: naive_attention, flash_attention (default tiles) or
// ATen's SDPA (Fused; std::invalid_argument naming the version on LibTorch 1.x).
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                     AttentionKind kind);

}  // namespace ht
