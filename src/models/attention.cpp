// Attention cores for GPT. "naive" is the reference: scores [B*nh, T, T] from one baddbmm that
// also adds the causal mask and the 1/sqrt(hs) scale, then softmax and a second bmm.
#include "hybrid/models/attention.h"

#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>

#include <torch/torch.h>

namespace ht {
namespace {

// 0 on and below the diagonal, -inf above: adding it before softmax hides the future.
at::Tensor additive_causal_mask(int64_t block_size) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  return torch::full({block_size, block_size}, neg_inf).triu_(1);  // [ctx, ctx]
}

at::Tensor naive_attention(const at::Tensor& mask, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, double dropout_p) {
  const int64_t B = q.size(0), nh = q.size(1), T = q.size(2), hs = q.size(3);
  TORCH_CHECK(T <= mask.size(0), "attention: sequence length ", T,
              " exceeds the block size ", mask.size(0));
  // bmm wants [B*nh, T, hs]; the head split leaves q, k, v strided, so these reshapes copy.
  const auto q3 = q.reshape({B * nh, T, hs});
  const auto k3 = k.reshape({B * nh, T, hs});
  const auto v3 = v.reshape({B * nh, T, hs});
  const auto causal = mask.slice(0, 0, T).slice(1, 0, T).expand({B * nh, T, T});
  auto att = at::baddbmm(causal, q3, k3.transpose(1, 2), /*beta=*/1.0,
                         /*alpha=*/1.0 / std::sqrt(static_cast<double>(hs)));  // [B*nh, T, T]
  att = at::softmax(att, -1);
  if (dropout_p > 0.0) att = at::dropout(att, dropout_p, /*train=*/true);
  const auto y = at::bmm(att, v3);  // [B*nh, T, hs]
  return y.view({B, nh, T, hs}).transpose(1, 2).reshape({B, T, nh * hs});  // [B, T, C]
}

}  // namespace

std::vector<std::string> attention_core_names() { return {"naive"}; }

AttentionCore make_attention_core(const std::string& name, int64_t block_size) {
  if (name == "naive") {
    at::Tensor mask = additive_causal_mask(block_size);
    return [mask](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double p) {
      return naive_attention(mask, q, k, v, p);
    };
  }
  std::string valid;
  for (const auto& n : attention_core_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown attention core '" + name + "'; valid: " + valid);
}

}  // namespace ht
