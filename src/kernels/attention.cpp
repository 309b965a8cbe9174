// The attention choice (AttentionKind), the reference attention, ATen's SDPA where LibTorch has it,
// and the switch for unpacked q, k, v. flash_attention's tiled kernels live in flash_attention.cpp.
#include "hybrid/kernels/attention.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <torch/torch.h>
#include <torch/version.h>

namespace ht {

at::Tensor naive_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           bool causal) {
  const int64_t T = q.size(-2), S = k.size(-2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor att = at::matmul(q, k.transpose(-2, -1)) * scale;  // [B, nh, T, S]
  if (causal) {
    at::Tensor hidden = at::ones({T, S}, q.options().dtype(at::kBool)).triu(1);  // key > query
    att = att.masked_fill(hidden, -std::numeric_limits<float>::infinity());
  }
  // Softmax in fp32 whatever the input's dtype (a no-op cast for fp32).
  return at::matmul(at::softmax(att, -1, at::kFloat).to(q.scalar_type()), v);  // [B, nh, T, hs]
}

AttentionKind parse_attention_kind(const std::string& name) {
  if (name == "naive") return AttentionKind::Naive;
  if (name == "flash") return AttentionKind::Flash;
  if (name == "fused") return AttentionKind::Fused;
  throw std::invalid_argument("unknown attention '" + name + "': expected naive, flash or fused");
}

std::string to_string(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::Naive:
      return "naive";
    case AttentionKind::Flash:
      return "flash";
    case AttentionKind::Fused:
      return "fused";
  }
  return "unknown";
}

bool fused_attention_available() { return TORCH_VERSION_MAJOR >= 2; }

std::string attention_unavailable_reason(AttentionKind kind) {
  if (kind != AttentionKind::Fused || fused_attention_available()) return "";
  return "attention 'fused' is ATen's scaled_dot_product_attention, which needs LibTorch >= 2.0 "
         "(this build has LibTorch " + std::string(TORCH_VERSION) + "); use 'flash' or 'naive'";
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                     AttentionKind kind) {
  switch (kind) {
    case AttentionKind::Naive:
      return naive_attention(q, k, v, causal);
    case AttentionKind::Flash:
      return flash_attention(q, k, v, causal);
    case AttentionKind::Fused:
#if TORCH_VERSION_MAJOR >= 2
      return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal);
#else
      throw std::invalid_argument(attention_unavailable_reason(kind));
#endif
  }
  throw std::invalid_argument("attention: unknown kind");
}

}  // namespace ht
