// LayerNorm of the fp32 residual stream that hands its output to the next GEMM in the compute
// dtype: statistics and normalisation in fp32, the output and the input kept for backward in bf16.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

namespace ht {

// x [..., C] (fp32), weight and bias [C] (fp32) -> [..., C] in out_dtype. float32: exactly
// at::layer_norm. bfloat16 on the CPU: one autograd Function that keeps x rounded to bf16 (half
// of at::layer_norm's fp32 copy) with the fp32 mean and rstd, and backward normalises that x again
// in fp32; dx, dweight, dbias are fp32. Elsewhere (CUDA): at::layer_norm then a cast.
at::Tensor layer_norm_to(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                         double eps, c10::ScalarType out_dtype);

}  // namespace ht
