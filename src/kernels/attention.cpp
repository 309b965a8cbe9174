// The reference attention, the SDPA path of LibTorch >= 2.0, and the kernel switch the models use.
// flash_attention's tiled kernels live in flash_attention.cpp.
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
  return at::matmul(at::softmax(att, -1), v);  // [B, nh, T, hs]
}

AttentionKernel parse_attention_kernel(const std::string& name) {
  if (name == "naive") return AttentionKernel::Naive;
  if (name == "flash") return AttentionKernel::Flash;
  if (name == "sdpa") return AttentionKernel::Sdpa;
  throw std::invalid_argument("unknown attention kernel '" + name +
                              "': expected naive, flash or sdpa");
}

std::string to_string(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::Naive:
      return "naive";
    case AttentionKernel::Flash:
      return "flash";
    case AttentionKernel::Sdpa:
      return "sdpa";
  }
  return "unknown";
}

bool sdpa_available() { return TORCH_VERSION_MAJOR >= 2; }

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                     AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::Naive:
      return naive_attention(q, k, v, causal);
    case AttentionKernel::Flash:
      return flash_attention(q, k, v, causal);
    case AttentionKernel::Sdpa:
#if TORCH_VERSION_MAJOR >= 2
      return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal);
#else
      throw std::invalid_argument("attention kernel 'sdpa' needs LibTorch >= 2.0 (this build has " +
                                  std::string(TORCH_VERSION) + "); use 'flash'");
#endif
  }
  throw std::invalid_argument("attention: unknown kernel");
}

}  // namespace ht
