// bf16 kernel benchmark: GEMM at GPT-2-small shapes in fp32 (dnnl_sgemm) and bf16
// (dnnl_gemm_bf16bf16f32 with fp32 or bf16 output, and ATen's own bf16 mm), plus casts.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "hybrid/core/allocator.h"
#include "hybrid/core/runtime.h"
#include "hybrid/kernels/attention_core.h"
#include "hybrid/kernels/lm_head_loss.h"
#include "hybrid/kernels/precision.h"
#include "kernels/bf16.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/layer_norm.h"
#include "kernels/linear.h"

namespace {

// Median milliseconds of `repeats` calls after one warm-up call.
double median_ms(const std::function<void()>& fn, int repeats) {
  fn();
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 5;
  int64_t seq = 64;
  CLI::App app{"Times fp32 and bf16 GEMMs and casts"};
  app.add_option("--threads", threads);
  app.add_option("--repeats", repeats);
  app.add_option("--seq", seq, "T of the per-op section");
  CLI11_PARSE(app, argc, argv);
  ht::install_tracking_allocator();  // the caching allocator, as in training
  ht::set_threads(threads);
  torch::manual_seed(0);
  std::printf("cpu: %s; oneDNN sgemm %s, bf16 gemm %s; %d threads\n",
              ht::cpu_bf16_features().describe().c_str(), ht::onednn_gemm_available() ? "yes" : "no",
              ht::onednn_bf16_gemm_available() ? "yes" : "no", threads);
  struct Shape { const char* what; int64_t M, K, N; };
  const std::vector<Shape> shapes = {
      {"c_attn B4 T64", 256, 768, 2304}, {"c_fc B4 T64", 256, 768, 3072},
      {"c_fc B4 T1024", 4096, 768, 3072}, {"lm head B4 T64 (chunk)", 256, 768, 50257},
      {"square 1024", 1024, 1024, 1024}};
  std::printf("%-24s %10s %10s %12s %12s %12s %8s\n", "shape", "fp32 ms", "GFLOP/s", "bf16->f32 ms",
              "bf16->bf16", "aten bf16", "f32/bf16");
  for (const auto& s : shapes) {
    const auto a = torch::randn({s.M, s.K}), b = torch::randn({s.K, s.N});
    const auto ab = a.to(torch::kBFloat16), bb = b.to(torch::kBFloat16);
    auto c = torch::empty({s.M, s.N});
    auto cb = torch::empty({s.M, s.N}, torch::kBFloat16);
    const double f32 = median_ms([&] { ht::matmul_into(c, a, b); }, repeats);
    const double bf = median_ms([&] { ht::matmul_into(c, ab, bb); }, repeats);
    const double bfb = median_ms([&] { ht::matmul_into(cb, ab, bb); }, repeats);
    double aten = NAN;  // ATen's oneDNN matmul throws when ONEDNN_MAX_CPU_ISA is below its own check
    try {
      aten = median_ms([&] { at::mm_out(cb, ab, bb); }, repeats);
    } catch (const std::exception&) {
    }
    const double gflop = 2.0 * s.M * s.K * s.N / 1e9;
    std::printf("%-24s %10.2f %10.0f %12.2f %12.2f %12.2f %8.2f\n", s.what, f32, gflop / f32 * 1e3, bf,
                bfb, aten, f32 / bf);
  }
  // The ops of a GPT-2-small step, forward + backward, fp32 against bf16 (ours).
  std::printf("\nop (GPT-2 small, B 4, T %lld)       fp32 ms   bf16 ms  fp32/bf16\n", static_cast<long long>(seq));
  {
    const int64_t B = 4, T = seq, C = 768, nh = 12, V = 50257;
    auto time_op = [&](const char* name, const std::function<at::Tensor(at::ScalarType)>& fwd) {
      auto run = [&](at::ScalarType dt) {
        return median_ms([&] { fwd(dt).backward(); }, repeats);
      };
      const double a = run(at::kFloat), b = run(at::kBFloat16);
      std::printf("%-34s %9.2f %9.2f %9.2f\n", name, a, b, a / b);
    };
    const auto w_fc = (torch::randn({C, 4 * C}) * 0.02).requires_grad_();
    const auto b_fc = torch::zeros({4 * C}).requires_grad_();
    const auto x = torch::randn({B, T, C});
    time_op("linear c_fc [N,768]x[768,3072]", [&](at::ScalarType dt) {
      return ht::linear_in_out(x.to(dt).requires_grad_(), w_fc, b_fc).sum();
    });
    const auto u = torch::randn({B, T, 4 * C});
    time_op("gelu [N,3072]", [&](at::ScalarType dt) { return ht::gelu_tanh(u.to(dt).requires_grad_()).sum(); });
    const auto qkv = torch::randn({B, T, 3 * C});
    for (auto kind : {ht::AttentionKind::Naive, ht::AttentionKind::Flash}) {
      const auto core = ht::make_attention_core(kind, T);
      time_op(kind == ht::AttentionKind::Naive ? "attention naive" : "attention flash",
              [&](at::ScalarType dt) { return core(qkv.to(dt).requires_grad_(), nh, 0.0).sum(); });
    }
    const auto ln_w = torch::ones({C}).requires_grad_(), ln_b = torch::zeros({C}).requires_grad_();
    time_op("layer norm -> compute dtype", [&](at::ScalarType dt) {
      return ht::layer_norm_to(x.clone().requires_grad_(), ln_w, ln_b, 1e-5, dt).sum();
    });
    const auto wte = (torch::randn({V, C}) * 0.02).requires_grad_();
    const auto tgt = torch::randint(V, {B * T}, torch::kLong);
    time_op("fused LM head + loss", [&](at::ScalarType dt) {
      return ht::lm_head_cross_entropy(x.view({B * T, C}).to(dt).requires_grad_(), wte, tgt);
    });
  }

  // Casting GPT-2 small's 124M weights (the bf16 forward casts each weight once per step):
  // ATen's .to() against ours (kernels/bf16.h).
  const auto w = torch::randn({124 * 1000 * 1000});
  const double cast = median_ms([&] { auto wb = w.to(torch::kBFloat16); }, repeats);
  const double ours = median_ms([&] { auto wb = ht::to_bf16(w); }, repeats);
  auto wb = ht::to_bf16(w);
  const double back = median_ms([&] { auto wf = wb.to(torch::kFloat); }, repeats);
  const double back_ours = median_ms([&] { auto wf = ht::to_f32(wb); }, repeats);
  std::printf("cast 124M fp32->bf16: ATen %.1f ms, ours %.1f ms; bf16->fp32: ATen %.1f ms, ours %.1f ms\n",
              cast, ours, back, back_ours);
  return 0;
}
