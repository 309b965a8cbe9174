// Step-time benchmark, C++ side: full training steps (forward, backward, clip, AdamW) of the GPT
// at a given shape and precision, timed after warmup. Prints one JSON line; bench/step_time.sh and
// bench/bf16_bench.sh compare with Python.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "hybrid/core/allocator.h"
#include "hybrid/core/optimizer.h"
#include "hybrid/core/runtime.h"
#include "kernels/gemm.h"
#include "hybrid/kernels/attention.h"
#include "hybrid/kernels/optimizers.h"
#include "hybrid/kernels/precision.h"
#include "hybrid/models/gpt.h"

int main(int argc, char** argv) {
  std::string preset = "tiny", optimizer = "fused", attention = "naive", precision = "fp32";
  int64_t batch = 16, seq = 128, steps = 10, warmup = 2, vocab = 0;
  int threads = 2;
  bool caching = true;
  CLI::App app{"Times full GPT training steps"};
  app.add_option("--preset", preset);
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--steps", steps);
  app.add_option("--warmup", warmup);
  app.add_option("--threads", threads);
  app.add_option("--vocab", vocab, "override the preset's vocabulary");
  app.add_option("--optimizer", optimizer, "fused (ours) | torch (torch::optim::AdamW)");
  app.add_option("--attention", attention, "naive | flash | fused");
  app.add_option("--precision", precision, "fp32 | bf16");
  app.add_option("--caching", caching, "keep freed blocks in the allocator's cache");
  CLI11_PARSE(app, argc, argv);

  ht::install_tracking_allocator();
  ht::set_allocator_caching(caching);
  ht::set_threads(threads);
  torch::manual_seed(0);
  ht::GPTConfig cfg = ht::gpt_preset(preset);
  if (vocab > 0) cfg.vocab_size = vocab;
  cfg.attention = ht::parse_attention_kind(attention);
  cfg.precision = ht::parse_precision(precision);
  auto model = std::make_shared<ht::GPT>(cfg);

  std::unique_ptr<ht::Optimizer> opt;
  if (optimizer == "torch") {
    auto adamw = std::make_shared<torch::optim::AdamW>(model->parameters(),
                                                       torch::optim::AdamWOptions(3e-4).weight_decay(0.1));
    opt = ht::wrap_torch_optimizer(adamw, "torch-adamw");
  } else {
    ht::AdamWOptions o;
    o.lr = 3e-4;
    o.weight_decay = 0.1;
    opt = ht::make_adamw(model->parameters(), o);
  }
  auto idx = torch::randint(cfg.vocab_size, {batch, seq}, torch::kLong);  // [B, T]
  auto tgt = torch::randint(cfg.vocab_size, {batch, seq}, torch::kLong);  // [B, T]

  std::vector<double> ms, cpu_ms;  // wall-clock, and CPU time of all threads (robust to a busy machine)
  double loss_value = 0;
  // Resident state (parameters, then gradients and AdamW's moments after the first step) is
  // measured apart from the step's peak.
  int64_t resident = 0;
  for (int64_t i = 0; i < warmup + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    opt->zero_grad();
    auto loss = model->loss(idx, tgt);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt->step();
    loss_value = loss.item<double>();
    if (i == 0) resident = ht::allocator_stats().current_bytes;
    if (i >= warmup) {
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      cpu_ms.push_back(1000.0 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
    }
  }
  std::sort(ms.begin(), ms.end());
  std::sort(cpu_ms.begin(), cpu_ms.end());
  const auto mem = ht::allocator_stats();
  std::printf(
      "{\"impl\": \"cpp\", \"preset\": \"%s\", \"batch\": %lld, \"seq\": %lld, \"threads\": %d, "
      "\"optimizer\": \"%s\", \"gemm\": \"%s\", \"caching\": %s, \"median_ms\": %.2f, \"min_ms\": %.2f, \"max_ms\": %.2f, "
      "\"loss\": %.5f, \"peak_mib\": %.1f, \"resident_mib\": %.1f, \"precision\": \"%s\", \"attention\": \"%s\", "
      "\"cpu_ms\": %.2f}\n",
      preset.c_str(), static_cast<long long>(batch), static_cast<long long>(seq), threads, optimizer.c_str(),
      ht::gemm_backend().c_str(), caching ? "true" : "false", ms[ms.size() / 2], ms.front(), ms.back(), loss_value,
      mem.peak_bytes / 1048576.0, resident / 1048576.0, precision.c_str(), attention.c_str(), cpu_ms[cpu_ms.size() / 2]);
  return 0;
}
