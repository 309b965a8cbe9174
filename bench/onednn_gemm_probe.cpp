// oneDNN's own GEMM entry points timed at the tiny GPT's and GPT-2 small's shapes, with and without
// alpha = 1 and beta = 0: shows the AMX kernels' scalar epilogue for alpha != 1 (BENCHMARKS.md 7).
// No LibTorch: libdnnl.so.2 is opened at run time. Threads: OMP_NUM_THREADS.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

// dnnl_gemm_bf16bf16f32 and dnnl_sgemm, row-major (oneDNN >= 1.2); uint16_t holds bf16 bits.
using GemmBf16 = int (*)(char, char, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                         const uint16_t*, int64_t, float, float*, int64_t);
using Sgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                      const float*, int64_t, float, float*, int64_t);

template <typename F>
double median_ms(F&& call) {
  call();  // warm-up: JIT kernels are generated on first use
  std::vector<double> ms;
  for (int i = 0; i < 15; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main() {
  void* lib = dlopen("libdnnl.so.2", RTLD_NOW);
  if (!lib) {
    std::fprintf(stderr, "onednn_gemm_probe: cannot open libdnnl.so.2 (%s); install libdnnl2\n", dlerror());
    return 1;
  }
  const auto bf16 = reinterpret_cast<GemmBf16>(dlsym(lib, "dnnl_gemm_bf16bf16f32"));
  const auto sgemm = reinterpret_cast<Sgemm>(dlsym(lib, "dnnl_sgemm"));
  if (!bf16 || !sgemm) {
    std::fprintf(stderr, "onednn_gemm_probe: libdnnl.so.2 lacks dnnl_sgemm or dnnl_gemm_bf16bf16f32\n");
    return 1;
  }
  struct Shape { int64_t M, K, N; };
  // The tiny GPT's linear layers (B 16, T 128, C 128: 2048 rows), then GPT-2 small's c_fc at T 64 and 1024.
  const Shape shapes[] = {{2048, 128, 384}, {2048, 128, 512}, {2048, 512, 128},
                          {128, 2048, 512}, {256, 768, 3072}, {4096, 768, 3072}};
  std::printf("%-22s %9s %11s %11s %13s %13s  (ms)\n", "shape", "sgemm", "bf16 a1 b0", "bf16 a1 b1",
              "bf16 a.5 b0", "bf16 a1 b0 TN");
  for (const Shape& s : shapes) {
    const std::vector<uint16_t> a(s.M * s.K, 0x3f80), b(s.K * s.N, 0x3f80);  // bf16 ones
    const std::vector<float> af(s.M * s.K, 1.0f), bf(s.K * s.N, 1.0f);
    std::vector<float> c(s.M * s.N, 0.0f);
    const auto run = [&](char ta, float alpha, float beta) {
      return median_ms([&] {
        bf16(ta, 'N', s.M, s.N, s.K, alpha, a.data(), ta == 'N' ? s.K : s.M, b.data(), s.N, beta,
             c.data(), s.N);
      });
    };
    const double f32 = median_ms([&] {
      sgemm('N', 'N', s.M, s.N, s.K, 1.0f, af.data(), s.K, bf.data(), s.N, 0.0f, c.data(), s.N);
    });
    std::printf("M %4ld K %4ld N %4ld %9.3f %11.3f %11.3f %13.3f %13.3f\n", static_cast<long>(s.M),
                static_cast<long>(s.K), static_cast<long>(s.N), f32, run('N', 1.0f, 0.0f),
                run('N', 1.0f, 1.0f), run('N', 0.5f, 0.0f), run('T', 1.0f, 0.0f));
  }
  return 0;
}
