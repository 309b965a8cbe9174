// Language-model head fused with cross entropy: the loss of logits = h @ wte^T without keeping
// the [N, V] logits for backward, which for GPT-2's 50257-word vocabulary dominate activations.
#pragma once

#include <ATen/core/Tensor.h>

namespace ht {

// h [N, C] float, wte [V, C] float, targets [N] int64 in [0, V) -> scalar mean cross entropy.
// Differentiable in h and wte. With grad enabled the gradients are computed during the forward
// pass, a row chunk at a time (llm.c and Liger do the same), so backward is only a scale; that
// work is wasted if no backward follows, so evaluate under torch::NoGradGuard.
at::Tensor lm_head_cross_entropy(const at::Tensor& h, const at::Tensor& wte,
                                 const at::Tensor& targets);

}  // namespace ht
