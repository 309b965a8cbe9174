// Language-model head fused with cross entropy: the loss of logits = h @ wte^T without keeping
// the [N, V] logits for backward, which for GPT-2's 50257-word vocabulary dominate activations.
#pragma once

#include <ATen/core/Tensor.h>

namespace ht {

// h [N, C], wte [V, C], targets [N] int64 in [0, V) -> scalar mean cross entropy. Differentiable
// in h and wte. With grad enabled the gradients are computed during the forward pass, a row chunk
// at a time (llm.c and Liger do the same), so backward is only a scale; that work is wasted if no
// backward follows, so evaluate under torch::NoGradGuard.
// Dtypes: float32 h and wte; or bfloat16 h with float32 wte (mixed precision): the GEMMs run in
// bf16 with fp32 accumulation, the logits, log-softmax, loss and its sum are fp32, dh is bf16 and
// dwte fp32 (accumulated over chunks in fp32). The loss is float32 then. Other devices or dtypes:
// ATen's matmul + cross_entropy (which keeps the logits).
at::Tensor lm_head_cross_entropy(const at::Tensor& h, const at::Tensor& wte,
                                 const at::Tensor& targets);

}  // namespace ht
