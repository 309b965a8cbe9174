// Block-wise 8-bit quantization in ATen ops: the fallback of quantize8.cpp's CPU kernels for other
// devices and dtypes, and of 8-bit AdamW's step. Same code, same nearest rounding, same bits.
#pragma once

#include <ATen/core/Tensor.h>

#include "hybrid/kernels/quantize8.h"

namespace ht {

// x: any dtype and device, read flattened in fp32. u: uniform [0, 1) numbers of x's size for
// stochastic rounding (quantize_stochastic's rule), or undefined for nearest (quantize's rule).
BlockQuantized quantize_blockwise_aten(const at::Tensor& x, const DynamicCode& code,
                                       int64_t block_size, const at::Tensor& u = {});
// codes [n] uint8, absmax [ceil(n / block_size)] float -> float [n] on their device.
at::Tensor dequantize_blockwise_aten(const BlockQuantized& q, const DynamicCode& code);

}  // namespace ht
