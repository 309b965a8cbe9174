// GPT-2's "Conv1D" linear map, y = x @ W + b with W stored [in, out], as one autograd Function
// whose three GEMMs (forward, dx, dW) go through matmul_into (gemm.h), in float32 or bfloat16.
#pragma once

#include <ATen/core/Tensor.h>

namespace ht {

// x [..., in], weight [in, out], bias [out] (may be undefined) -> [..., out] in x's dtype.
// Differentiable in all three. float32 x: float32 throughout. bfloat16 x with float32 weight and
// bias (mixed precision: fp32 master weights): the weight is rounded to bf16 for the GEMMs, the
// products accumulate in fp32 with the fp32 bias, and the output is rounded to bf16 once; the
// weight and bias gradients come out of fp32 accumulation as fp32 (never rounded to bf16), dx in
// bf16. Other devices or dtypes: ATen's addmm (which CUDA autocast handles).
at::Tensor linear_in_out(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace ht
