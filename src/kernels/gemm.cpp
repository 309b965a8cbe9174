// GEMM dispatch: oneDNN's public C API (dnnl_sgemm, row-major) looked up in the running process,
// so there is no build-time dependency and nothing is loaded that LibTorch did not load itself.
#include "kernels/gemm.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>

#include <torch/torch.h>

namespace ht {
namespace {

// dnnl_status_t dnnl_sgemm(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K,
//     float alpha, const float *A, dnnl_dim_t lda, const float *B, dnnl_dim_t ldb, float beta,
//     float *C, dnnl_dim_t ldc);  -- oneDNN >= 1.0, row-major, returns 0 on success.
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);

DnnlSgemm find_dnnl_sgemm() {
  return reinterpret_cast<DnnlSgemm>(dlsym(RTLD_DEFAULT, "dnnl_sgemm"));
}

DnnlSgemm dnnl_sgemm() {
  static const DnnlSgemm fn = find_dnnl_sgemm();
  return fn;
}

std::atomic<bool>& use_onednn() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("HT_GEMM");
    return dnnl_sgemm() != nullptr && !(env && std::string(env) == "aten");
  }()};
  return on;
}

// A 2-D operand as BLAS sees it: row-major with leading dimension ld, or transposed.
struct Operand {
  bool trans;
  int64_t ld;
};

bool as_operand(const at::Tensor& t, Operand* op) {
  const int64_t rows = t.size(0), cols = t.size(1);
  if (t.stride(1) == 1 && (rows <= 1 || t.stride(0) >= std::max<int64_t>(1, cols))) {
    *op = {false, std::max<int64_t>(t.stride(0), std::max<int64_t>(1, cols))};
    return true;
  }
  if (t.stride(0) == 1 && (cols <= 1 || t.stride(1) >= std::max<int64_t>(1, rows))) {
    *op = {true, std::max<int64_t>(t.stride(1), std::max<int64_t>(1, rows))};
    return true;
  }
  return false;
}

}  // namespace

bool onednn_gemm_available() { return dnnl_sgemm() != nullptr; }

std::string gemm_backend() { return use_onednn().load() ? "onednn" : "aten"; }

void set_gemm_backend(const std::string& name) {
  if (name == "aten") {
    use_onednn().store(false);
  } else if (name == "onednn") {
    if (!onednn_gemm_available()) {
      throw std::invalid_argument("set_gemm_backend: oneDNN's dnnl_sgemm is not loaded in this "
                                  "process (LibTorch built without a shared oneDNN); use \"aten\"");
    }
    use_onednn().store(true);
  } else {
    throw std::invalid_argument("set_gemm_backend: unknown backend '" + name +
                                "'; valid: onednn, aten");
  }
}

void matmul_into(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, float alpha,
                 float beta) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && a.size(1) == b.size(0) &&
                  out.size(0) == a.size(0) && out.size(1) == b.size(1),
              "matmul_into: shapes ", out.sizes(), " = ", a.sizes(), " @ ", b.sizes());
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  Operand oa{}, ob{}, oc{};
  const bool direct = use_onednn().load() && a.scalar_type() == at::kFloat &&
                      b.scalar_type() == at::kFloat && out.scalar_type() == at::kFloat &&
                      a.device().is_cpu() && as_operand(a, &oa) && as_operand(b, &ob) &&
                      as_operand(out, &oc) && !oc.trans && M > 0 && N > 0;
  if (!direct) {
    at::addmm_out(out, out, a, b, beta, alpha);
    return;
  }
  if (K == 0) {
    if (beta == 0.0f) out.zero_(); else out.mul_(beta);
    return;
  }
  const int status = dnnl_sgemm()(oa.trans ? 'T' : 'N', ob.trans ? 'T' : 'N', M, N, K, alpha,
                                  a.data_ptr<float>(), oa.ld, b.data_ptr<float>(), ob.ld, beta,
                                  out.data_ptr<float>(), oc.ld);
  TORCH_CHECK(status == 0, "matmul_into: dnnl_sgemm failed with status ", status, " for ", M,
              "x", K, "x", N);
}

at::Tensor matmul2d(const at::Tensor& a, const at::Tensor& b) {
  auto out = at::empty({a.size(0), b.size(1)}, a.options());
  matmul_into(out, a, b);
  return out;
}

}  // namespace ht
