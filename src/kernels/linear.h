// GPT-2's "Conv1D" linear map, y = x @ W + b with W stored [in, out], as one autograd Function
// whose three GEMMs (forward, dx, dW) go through matmul_into (gemm.h).
#pragma once

#include <ATen/core/Tensor.h>

namespace ht {

// x [..., in], weight [in, out], bias [out] (may be undefined) -> [..., out]. Differentiable in
// all three. Float32 only.
at::Tensor linear_in_out(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace ht
