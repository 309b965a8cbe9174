// The core of causal self-attention (packed q|k|v -> y) behind one function type, built from the
// one AttentionKind choice by one factory: the seam where GPT's attention kernel is chosen.
#pragma once

#include <cstdint>
#include <functional>

#include <ATen/core/Tensor.h>

#include "hybrid/kernels/attention.h"

namespace ht {

// qkv [B, T, 3C]: the c_attn output, q | k | v along the last dimension, each split into n_head
// heads of hs = C / n_head contiguous columns (GPT-2's layout). Returns y [B, T, C] in qkv's
// dtype, with head h in columns [h*hs, (h+1)*hs): y[b, t] attends to positions <= t only, softmax
// scale 1/sqrt(hs). dropout_p applies to the attention probabilities (callers pass 0 in
// evaluation). Must be differentiable with respect to qkv. Taking the packed tensor (as
// FlashAttention's qkvpacked entry point does) lets backward write one [B, T, 3C] gradient.
using AttentionCore =
    std::function<at::Tensor(const at::Tensor& qkv, int64_t n_head, double dropout_p)>;

// The one factory from the choice to a core; block_size bounds T.
//   Naive: exact attention that materialises each head's [T, T] probabilities (kept for backward,
//     so memory grows with B * n_head * T^2; bf16 inputs keep them in bf16, softmax in fp32).
//     On the CPU (fp32, bf16) heads run in parallel, each with single-threaded GEMMs on strided
//     views of qkv: no head split/merge copies. Other devices or dtypes: the same maths in ATen ops.
//   Flash: flash_attention on head views of qkv (no dropout: dropout_p > 0 throws
//     std::invalid_argument); memory linear in T.
//   Fused: at::scaled_dot_product_attention (LibTorch >= 2.0); on 1.x this factory throws
//     std::invalid_argument naming the version.
AttentionCore make_attention_core(AttentionKind kind, int64_t block_size);

}  // namespace ht
