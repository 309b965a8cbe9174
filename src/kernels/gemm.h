// Matrix multiply for the models' hot paths, float32 and bfloat16: oneDNN's dnnl_sgemm and
// dnnl_gemm_bf16bf16f32 when the process has them loaded (Debian's LibTorch links oneDNN), else ATen.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

namespace ht {

// out = beta * out + alpha * a @ b for 2-D tensors; a and b may be transposed or strided views
// (unit stride in one dimension), out must have unit column stride. With beta == 0 out's old
// contents are ignored (NaN in out does not propagate). Not differentiable: autograd Functions
// call it on saved tensors. Dtypes: a, b and out float32; or a and b bfloat16 with out float32
// (products accumulated in fp32 and kept so) or bfloat16 (accumulated in fp32, rounded once).
// One table (gemm.cpp): CPU float32 -> dnnl_sgemm, CPU bfloat16 -> dnnl_gemm_bf16bf16f32, and
// anything else (another device or dtype, a layout BLAS cannot read) -> ATen's addmm.
void matmul_into(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, float alpha = 1.0f,
                 float beta = 0.0f);
// [M, K] @ [K, N] -> [M, N] in a's dtype (float32 accumulation for bfloat16).
at::Tensor matmul2d(const at::Tensor& a, const at::Tensor& b);
// [M, K] @ [K, N] -> [M, N] float32, for bfloat16 or float32 a and b.
at::Tensor matmul2d_f32(const at::Tensor& a, const at::Tensor& b);

// Why oneDNN: Debian sets OPENBLAS_CORETYPE=Haswell on these machines, which holds OpenBLAS to
// AVX2 (~115 GFLOP/s per core measured); oneDNN picks AVX-512 itself (~230 GFLOP/s). Without
// that variable the two are within ~10 %. For bf16, OpenBLAS 0.3.21 has no bf16 GEMM in its
// CBLAS interface that ATen uses; oneDNN's runs on AVX512-BF16 and AMX where the CPU has them.
// "onednn" or "aten": the backend matmul_into uses now for float32.
std::string gemm_backend();
// Chooses "onednn" (throws std::invalid_argument if unavailable) or "aten". The environment
// variable HT_GEMM=aten selects ATen at start-up. bfloat16 always uses oneDNN when it is loaded.
void set_gemm_backend(const std::string& name);
bool onednn_gemm_available();
bool onednn_bf16_gemm_available();
// How bf16 products run: "onednn" (dnnl_gemm_bf16bf16f32) where the CPU has bf16 instructions and
// ONEDNN_MAX_CPU_ISA does not hold oneDNN below them, else "widen" (operands widened to fp32 for
// sgemm: oneDNN's emulation is ~2.9x slower). HT_BF16_GEMM=onednn|widen overrides at start-up.
std::string bf16_gemm_path();
void set_bf16_gemm_path(const std::string& name);  // "onednn" | "widen"; std::invalid_argument

}  // namespace ht
