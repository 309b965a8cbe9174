// GPT-2's GELU (tanh approximation) as one vectorised pass forward and one backward. LibTorch
// 1.13's gelu(approximate="tanh") runs a scalar tanh per element and costs ~40x the erf GELU.
#pragma once

#include <ATen/core/Tensor.h>

namespace ht {

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), differentiable; agrees with
// at::gelu(x, "tanh") to ~1e-6 relative. Contiguous float32 or bfloat16 CPU tensors take the
// vectorised kernels (bf16: computed in fp32, rounded once); anything else (another device or
// dtype, a non-contiguous view) takes at::gelu, which is ~40x slower on the CPU in LibTorch 1.13.
at::Tensor gelu_tanh(const at::Tensor& x);

}  // namespace ht
