// Single-precision matrix multiply for the models' hot paths. Uses oneDNN's sgemm when the
// process already has it loaded (Debian's LibTorch links it), else ATen's addmm (OpenBLAS).
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

namespace ht {

// out = beta * out + alpha * a @ b for 2-D float32 CPU tensors; a and b may be transposed or
// strided views (unit stride in one dimension), out must have unit column stride. With beta == 0
// out's old contents are ignored (NaN in out does not propagate). Not differentiable: autograd
// Functions call it on saved tensors.
void matmul_into(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, float alpha = 1.0f,
                 float beta = 0.0f);
at::Tensor matmul2d(const at::Tensor& a, const at::Tensor& b);  // [M, K] @ [K, N] -> [M, N]

// Why oneDNN: Debian sets OPENBLAS_CORETYPE=Haswell on these machines, which holds OpenBLAS to
// AVX2 (~115 GFLOP/s per core measured); oneDNN picks AVX-512 itself (~230 GFLOP/s). Without
// that variable the two are within ~10 %.
// "onednn" or "aten": the backend matmul_into uses now.
std::string gemm_backend();
// Chooses "onednn" (throws std::invalid_argument if unavailable) or "aten". The environment
// variable HT_GEMM=aten selects ATen at start-up.
void set_gemm_backend(const std::string& name);
bool onednn_gemm_available();

}  // namespace ht
