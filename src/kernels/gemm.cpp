// GEMM dispatch: oneDNN's public C API (dnnl_sgemm, dnnl_gemm_bf16bf16f32, row-major) looked up in
// the running process, so there is no build-time dependency and nothing LibTorch did not load.
#include "kernels/gemm.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>

#include <torch/torch.h>

#include "kernels/bf16.h"
#include "hybrid/kernels/precision.h"
#include "kernels/dispatch.h"

namespace ht {
namespace {

// dnnl_status_t dnnl_sgemm(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K,
//     float alpha, const float *A, dnnl_dim_t lda, const float *B, dnnl_dim_t ldb, float beta,
//     float *C, dnnl_dim_t ldc);  -- oneDNN >= 1.0, row-major, returns 0 on success.
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
// dnnl_gemm_bf16bf16f32: the same with bfloat16 (uint16_t bits) A and B, float C; products are
// accumulated in fp32 (oneDNN >= 1.2).
constexpr int kDnnlUnimplemented = 3;  // dnnl_status_t dnnl_unimplemented
using DnnlGemmBf16 = int (*)(char, char, int64_t, int64_t, int64_t, float, const uint16_t*,
                             int64_t, const uint16_t*, int64_t, float, float*, int64_t);

DnnlSgemm dnnl_sgemm() {
  static const auto fn = reinterpret_cast<DnnlSgemm>(dlsym(RTLD_DEFAULT, "dnnl_sgemm"));
  return fn;
}

DnnlGemmBf16 dnnl_gemm_bf16() {
  static const auto fn =
      reinterpret_cast<DnnlGemmBf16>(dlsym(RTLD_DEFAULT, "dnnl_gemm_bf16bf16f32"));
  return fn;
}

// bf16 products: oneDNN's bf16 GEMM where its bf16 instructions are in use; elsewhere the bf16
// operands are widened to fp32 for sgemm. Measured (bench/bf16_kernels, BENCHMARKS.md): with
// oneDNN held below AVX512_CORE_BF16 its bf16 GEMM emulates and runs ~2.9x slower than sgemm, and
// below AVX-512 it has none; widening costs one pass over the operands. Products of bf16 values
// are exact in fp32 and both accumulate in fp32, so the two paths agree to summation order.
std::atomic<bool>& bf16_widen() {
  static std::atomic<bool> widen{[] {
    const char* env = std::getenv("HT_BF16_GEMM");
    if (env && std::string(env) == "onednn") return false;
    if (env && std::string(env) == "widen") return true;
    return !bf16_instructions_in_use();
  }()};
  return widen;
}

// Whether bf16 GEMMs with alpha != 1 run as alpha = 1 and a scaling pass (see gemm_cpu_bf16):
// where oneDNN uses AMX. HT_BF16_ALPHA=onednn hands alpha to oneDNN (to measure the difference).
bool amx_alpha_in_epilogue() {
  static const bool on = [] {
    const char* env = std::getenv("HT_BF16_ALPHA");
    return amx_in_use() && !(env && std::string(env) == "onednn");
  }();
  return on;
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

// The operands as BLAS reads them; false when one of them has a layout it cannot take.
struct Layout {
  Operand a, b, c;
};
bool blas_layout(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, Layout* l) {
  return as_operand(a, &l->a) && as_operand(b, &l->b) && as_operand(out, &l->c) && !l->c.trans &&
         out.size(0) > 0 && out.size(1) > 0;
}

void zero_k(at::Tensor& out, float beta) {  // K == 0: only the beta term is left
  if (beta == 0.0f) out.zero_(); else out.mul_(beta);
}

using GemmFn = void (*)(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, float alpha,
                        float beta);

// ATen: any device, any dtype. Mixed operands (bf16 a, b into a float out) are multiplied in
// out's dtype.
void gemm_fallback(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, float alpha,
                   float beta) {
  if (a.scalar_type() == out.scalar_type() && b.scalar_type() == out.scalar_type()) {
    at::addmm_out(out, out, a, b, beta, alpha);
    return;
  }
  out.copy_(at::addmm(out.to(a.scalar_type()), a, b, beta, alpha));
}

void gemm_cpu_f32(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, float alpha,
                  float beta) {
  Layout l{};
  if (!use_onednn().load() || !blas_layout(out, a, b, &l)) {
    at::addmm_out(out, out, a, b, beta, alpha);
    return;
  }
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (K == 0) return zero_k(out, beta);
  const int status = dnnl_sgemm()(l.a.trans ? 'T' : 'N', l.b.trans ? 'T' : 'N', M, N, K, alpha,
                                  a.data_ptr<float>(), l.a.ld, b.data_ptr<float>(), l.b.ld, beta,
                                  out.data_ptr<float>(), l.c.ld);
  TORCH_CHECK(status == 0, "matmul_into: dnnl_sgemm failed with status ", status, " for ", M,
              "x", K, "x", N);
}

// bf16 a and b; out float32 (written directly) or bf16 (an fp32 result rounded once).
void gemm_cpu_bf16(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, float alpha,
                   float beta) {
  if (out.scalar_type() == at::kBFloat16) {
    at::Tensor acc = beta == 0.0f ? at::empty(out.sizes(), out.options().dtype(at::kFloat))
                                  : out.to(at::kFloat).contiguous();  // [M, N]
    gemm_cpu_bf16(acc, a, b, alpha, beta);
    if (out.is_contiguous()) {
      round_into(out, acc);
    } else {
      out.copy_(acc);
    }
    return;
  }
  if (bf16_widen().load()) {
    note_kernel_once("matmul_into", "this CPU (or ONEDNN_MAX_CPU_ISA) has no bf16 instructions; bf16 "
                                    "GEMM operands are widened to fp32 (no speed gain over fp32, the "
                                    "activation memory is still halved)");
    gemm_cpu_f32(out, a.to(at::kFloat), b.to(at::kFloat), alpha, beta);
    return;
  }
  Layout l{};
  if (!dnnl_gemm_bf16() || !blas_layout(out, a, b, &l)) {
    note_kernel_once("matmul_into", "oneDNN's dnnl_gemm_bf16bf16f32 is not loaded or cannot read "
                                    "these strides; bf16 products ran through ATen in fp32");
    out.copy_(at::addmm(out, a.to(at::kFloat), b.to(at::kFloat), beta, alpha));
    return;
  }
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (K == 0) return zero_k(out, beta);
  if (alpha != 1.0f && amx_alpha_in_epilogue()) {
    // oneDNN's AMX kernels take no alpha: its GEMM driver then finishes C in a scalar loop,
    // measured 2-4x slower than alpha = 1 and slower than sgemm (BENCHMARKS.md 7). Multiply with
    // alpha = 1 and scale C here, vectorised: C = alpha * (A B + (beta / alpha) C).
    if (alpha == 0.0f) return zero_k(out, beta);  // BLAS: A and B are not read
    if (beta != 0.0f) out.mul_(beta / alpha);
    gemm_cpu_bf16(out, a, b, 1.0f, beta != 0.0f ? 1.0f : 0.0f);
    out.mul_(alpha);
    return;
  }
  const auto* ap = reinterpret_cast<const uint16_t*>(a.data_ptr<at::BFloat16>());
  const auto* bp = reinterpret_cast<const uint16_t*>(b.data_ptr<at::BFloat16>());
  const int status = dnnl_gemm_bf16()(l.a.trans ? 'T' : 'N', l.b.trans ? 'T' : 'N', M, N, K, alpha,
                                      ap, l.a.ld, bp, l.b.ld, beta, out.data_ptr<float>(), l.c.ld);
  if (status == kDnnlUnimplemented) {
    // oneDNN has no bf16 GEMM below AVX-512 (measured with ONEDNN_MAX_CPU_ISA=AVX2): multiply the
    // bf16 values in fp32 instead. Correct, but slower than plain fp32.
    note_kernel_once("matmul_into", "oneDNN has no bf16 GEMM on this CPU (it needs AVX-512); bf16 "
                                    "products ran in fp32 through ATen, slower than train.precision = fp32");
    out.copy_(at::addmm(out, a.to(at::kFloat), b.to(at::kFloat), beta, alpha));
    return;
  }
  TORCH_CHECK(status == 0, "matmul_into: dnnl_gemm_bf16bf16f32 failed with status ", status,
              " for ", M, "x", K, "x", N);
}

const KernelTable<GemmFn> kGemm{"matmul_into", gemm_cpu_f32, gemm_cpu_bf16, gemm_fallback};

}  // namespace

bool onednn_gemm_available() { return dnnl_sgemm() != nullptr; }

std::string bf16_gemm_path() { return bf16_widen().load() ? "widen" : "onednn"; }

void set_bf16_gemm_path(const std::string& name) {
  if (name != "onednn" && name != "widen")
    throw std::invalid_argument("set_bf16_gemm_path: unknown path '" + name + "'; valid: onednn, widen");
  bf16_widen().store(name == "widen");
}
bool onednn_bf16_gemm_available() { return dnnl_gemm_bf16() != nullptr; }

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
  // The CPU kernels take a and b of one dtype, and out of that dtype or float32.
  const bool dtypes_ok = a.scalar_type() == b.scalar_type() &&
                         (out.scalar_type() == a.scalar_type() || out.scalar_type() == at::kFloat);
  const bool same_device = a.device() == out.device() && b.device() == out.device();
  kGemm(kernel_path(a, dtypes_ok && same_device), out, a, b, alpha, beta);
}

at::Tensor matmul2d(const at::Tensor& a, const at::Tensor& b) {
  auto out = at::empty({a.size(0), b.size(1)}, a.options());
  matmul_into(out, a, b);
  return out;
}

at::Tensor matmul2d_f32(const at::Tensor& a, const at::Tensor& b) {
  auto out = at::empty({a.size(0), b.size(1)}, a.options().dtype(at::kFloat));
  matmul_into(out, a, b);
  return out;
}

}  // namespace ht
