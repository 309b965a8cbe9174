// Measures the memory levers on their own: flash vs naive attention, activation recompute levels
// on a GPT-2-small-shaped layer stack, 8-bit vs fp32 AdamW, and a hybrid predict step's peak
// against a full step's on GPT-2 small (`predict`, not part of `all`: minutes and ~10 GiB).
//   memory_bench [attention|recompute|optimizer|all] [threads] [reps]
//   memory_bench predict [threads] [probe_batches] [B] [T] [adamw|adamw8bit]
// Times are medians of `reps` interleaved runs; memory is the tracking allocator's peak of tensor
// bytes above what was live before the measured call.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "hybrid/core/allocator.h"
#include "hybrid/core/optimizer.h"
#include "hybrid/core/runtime.h"
#include "hybrid/core/trainer.h"
#include "hybrid/hybrid/strategy.h"
#include "hybrid/kernels/adamw8bit.h"
#include "hybrid/kernels/attention.h"
#include "hybrid/kernels/recompute.h"
#include "hybrid/kernels/optimizers.h"
#include "hybrid/models/gpt.h"
#include "hybrid/models/gpt_objective.h"

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct Sample {
  double seconds = 0;
  int64_t peak_bytes = 0;
};

// Runs fn `reps` times for each variant, interleaved, and returns the median time and max peak.
std::vector<Sample> measure(const std::vector<std::function<void()>>& variants, int reps) {
  std::vector<std::vector<double>> times(variants.size());
  std::vector<Sample> out(variants.size());
  for (int r = 0; r < reps; ++r)
    for (size_t v = 0; v < variants.size(); ++v) {
      const int64_t before = ht::allocator_stats().current_bytes;
      ht::reset_peak_bytes();
      const auto t0 = std::chrono::steady_clock::now();
      variants[v]();
      times[v].push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      out[v].peak_bytes = std::max(out[v].peak_bytes, ht::allocator_stats().peak_bytes - before);
    }
  for (size_t v = 0; v < variants.size(); ++v) {
    std::sort(times[v].begin(), times[v].end());
    out[v].seconds = times[v][times[v].size() / 2];
  }
  return out;
}

void bench_attention(int reps) {
  std::printf("\n# attention, causal, nh 12, hs 64: forward + backward\n");
  std::printf("%2s %5s | %10s %10s | %10s %10s | %6s\n", "B", "T", "flash ms", "flash MiB",
              "naive ms", "naive MiB", "speed");
  for (int64_t T : {256, 1024, 2048})
    for (int64_t B : {1, 2, 4}) {
      torch::manual_seed(0);
      auto q = torch::randn({B, 12, T, 64}, torch::requires_grad());
      auto k = torch::randn({B, 12, T, 64}, torch::requires_grad());
      auto v = torch::randn({B, 12, T, 64}, torch::requires_grad());
      auto dy = torch::randn({B, 12, T, 64});
      auto step = [&](bool flash) {
        for (auto* t : {&q, &k, &v}) t->mutable_grad() = at::Tensor();
        auto y = flash ? ht::flash_attention(q, k, v, true) : ht::naive_attention(q, k, v, true);
        y.backward(dy);
      };
      auto s = measure({[&] { step(true); }, [&] { step(false); }}, reps);
      std::printf("%2ld %5ld | %10.1f %10.1f | %10.1f %10.1f | %5.2fx\n", static_cast<long>(B),
                  static_cast<long>(T), s[0].seconds * 1e3, s[0].peak_bytes / kMiB,
                  s[1].seconds * 1e3, s[1].peak_bytes / kMiB, s[1].seconds / s[0].seconds);
    }
  std::printf("\n# flash tile shapes, B 1, T 1024, causal: forward + backward ms\n");
  torch::manual_seed(0);
  auto q = torch::randn({1, 12, 1024, 64}, torch::requires_grad());
  std::vector<std::pair<int64_t, int64_t>> tiles = {{32, 32},   {64, 64},   {64, 128},
                                                    {128, 128}, {128, 256}, {256, 256}};
  std::vector<std::function<void()>> variants;
  for (auto [bq, bk] : tiles)
    variants.push_back([&q, bq = bq, bk = bk] {
      q.mutable_grad() = at::Tensor();
      ht::flash_attention(q, q, q, true, bq, bk).sum().backward();
    });
  auto s = measure(variants, reps);
  for (size_t i = 0; i < tiles.size(); ++i)
    std::printf("  block_q %3ld block_k %3ld: %7.1f ms\n", static_cast<long>(tiles[i].first),
                static_cast<long>(tiles[i].second), s[i].seconds * 1e3);
}

// A GPT-2 block (pre-norm, tanh GELU) whose attention kernel and recompute are switchable.
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t C)
      : ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C})))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C})))),
        attn(register_module("attn", torch::nn::Linear(C, 3 * C))),
        attn_proj(register_module("attn_proj", torch::nn::Linear(C, C))),
        fc(register_module("fc", torch::nn::Linear(C, 4 * C))),
        fc_proj(register_module("fc_proj", torch::nn::Linear(4 * C, C))) {}

  at::Tensor forward(const at::Tensor& x, ht::AttentionKind kernel, bool recompute_gelu) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), nh = 12;
    auto qkv = attn(ln1(x)).view({B, T, 3, nh, C / nh});  // [B, T, 3, nh, hs]
    auto q = qkv.select(2, 0).transpose(1, 2), k = qkv.select(2, 1).transpose(1, 2);
    auto v = qkv.select(2, 2).transpose(1, 2);  // [B, nh, T, hs]
    auto y = ht::attention(q, k, v, true, kernel).transpose(1, 2).reshape({B, T, C});
    auto h = x + attn_proj(y);
    auto f = fc(ln2(h));  // [B, T, 4C]
    auto m = recompute_gelu ? ht::recompute_gelu_linear(f, fc_proj->weight, fc_proj->bias)
                            : fc_proj(torch::gelu(f, "tanh"));
    return h + m;
  }
  torch::nn::LayerNorm ln1, ln2;
  torch::nn::Linear attn, attn_proj, fc, fc_proj;
};
TORCH_MODULE(Block);

void bench_recompute(int reps) {
  const int64_t B = 4, T = 256, C = 768, L = 4;
  std::printf("\n# recompute: %ld GPT-2-small blocks (C 768, 12 heads), B %ld, T %ld\n",
              static_cast<long>(L), static_cast<long>(B), static_cast<long>(T));
  std::printf("%-6s %-20s | %9s %11s\n", "attn", "recompute", "fwd+bwd ms", "peak MiB");
  torch::manual_seed(0);
  std::vector<Block> blocks;
  for (int64_t l = 0; l < L; ++l) blocks.emplace_back(C);
  auto x0 = torch::randn({B, T, C}, torch::requires_grad());
  struct Config {
    ht::AttentionKind kernel;
    ht::RecomputePolicy policy;
  };
  using K = ht::AttentionKind;
  using R = ht::RecomputeLevel;
  std::vector<Config> configs = {{K::Naive, {R::None, 1}},      {K::Flash, {R::None, 1}},
                                 {K::Flash, {R::Selective, 1}}, {K::Flash, {R::Full, 2}},
                                 {K::Flash, {R::Full, 1}},      {K::Naive, {R::Full, 1}}};
  std::vector<std::function<void()>> variants;
  for (const auto& c : configs)
    variants.push_back([&, c] {
      for (auto& b : blocks) b->zero_grad();
      x0.mutable_grad() = at::Tensor();
      at::Tensor x = x0;
      for (int64_t l = 0; l < L; ++l) {
        Block b = blocks[l];
        const bool gelu = c.policy.recompute_gelu(static_cast<int>(l));
        if (c.policy.recompute_block(static_cast<int>(l)))
          x = ht::recompute(
              [b, c, gelu](const at::Tensor& t) mutable { return b->forward(t, c.kernel, gelu); },
              x, b->parameters());
        else
          x = b->forward(x, c.kernel, gelu);
      }
      x.square().mean().backward();
    });
  measure(variants, 1);  // allocate the .grad tensors outside the measurement
  auto s = measure(variants, reps);
  for (size_t i = 0; i < configs.size(); ++i) {
    std::string r = ht::to_string(configs[i].policy.level);
    if (configs[i].policy.level == R::Full)
      r += " every " + std::to_string(configs[i].policy.every_n_layers);
    std::printf("%-6s %-20s | %9.1f %11.1f\n", ht::to_string(configs[i].kernel).c_str(), r.c_str(),
                s[i].seconds * 1e3, s[i].peak_bytes / kMiB);
  }
}

void bench_optimizer(int reps) {
  // GPT-2 small's parameter shapes (124M): embeddings, 12 blocks, final norm.
  std::vector<std::vector<int64_t>> shapes = {{50257, 768}, {1024, 768}};
  for (int l = 0; l < 12; ++l)
    for (auto s : std::vector<std::vector<int64_t>>{{768},
                                                    {768},
                                                    {2304, 768},
                                                    {2304},
                                                    {768, 768},
                                                    {768},
                                                    {768},
                                                    {768},
                                                    {3072, 768},
                                                    {3072},
                                                    {768, 3072},
                                                    {768}})
      shapes.push_back(s);
  shapes.push_back({768});
  shapes.push_back({768});
  torch::manual_seed(0);
  std::vector<at::Tensor> params;
  int64_t n = 0;
  for (const auto& s : shapes) {
    params.push_back(torch::randn(s) * 0.02);
    params.back().mutable_grad() = torch::randn(s) * 1e-3;
    n += params.back().numel();
  }
  std::printf("\n# optimizer step on GPT-2 small's %ld parameters\n", static_cast<long>(n));
  ht::AdamWOptions o;
  ht::AdamW8bitOptions nearest;
  nearest.rounding = ht::AdamW8bitOptions::Rounding::Nearest;
  std::vector<std::unique_ptr<ht::Optimizer>> opts;
  opts.push_back(ht::make_adamw(params, o));
  opts.push_back(ht::make_adamw8bit(params, o));
  opts.push_back(ht::make_adamw8bit(params, o, nearest));
  const char* names[] = {"adamw (fp32)", "adamw8bit stochastic", "adamw8bit nearest"};
  std::vector<std::function<void()>> variants;
  for (auto& opt : opts) variants.push_back([&opt] { opt->step(); });
  auto s = measure(variants, reps);
  for (size_t i = 0; i < opts.size(); ++i)
    std::printf("  %-22s step %7.1f ms   state %7.1f MiB = %.3f bytes/param\n", names[i],
                s[i].seconds * 1e3, opts[i]->state_bytes() / kMiB,
                double(opts[i]->state_bytes()) / n);
}

// One fixed batch of random tokens: the step's memory does not depend on the text.
class FixedTokens : public ht::DataSource {
 public:
  FixedTokens(int64_t B, int64_t T, int64_t vocab) {
    const at::Tensor seq = torch::randint(vocab, {B, T + 1});  // [B, T+1]
    batch_ = {seq.narrow(1, 0, T).contiguous(), seq.narrow(1, 1, T).contiguous()};
  }
  ht::Batch next_train_batch() override { return batch_; }
  ht::DataCursor cursor() const override { return {}; }
  void restore(const ht::DataCursor&) override {}
  int64_t num_val_batches() const override { return 1; }
  ht::Batch val_batch(int64_t) const override { return batch_; }
  int64_t items_per_batch() const override { return batch_.input.numel(); }

 private:
  ht::Batch batch_;
};

// GPT-2 small with AdamW under the real hybrid engine (mean predictor), phases shortened so a
// predict phase comes after three full steps. Peaks are the trainer's per-step records: absolute
// tensor bytes, resident state included.
void bench_predict(int64_t B, int64_t T, int64_t probe_batches, const std::string& optimizer_name) {
  std::printf("\n# GPT-2 small, B %ld, T %ld, %s, probe of %ld batch(es): full step vs hybrid predict step\n",
              static_cast<long>(B), static_cast<long>(T), optimizer_name.c_str(), static_cast<long>(probe_batches));
  torch::manual_seed(0);
  ht::GPTConfig cfg = ht::gpt_preset("gpt2");
  auto gpt = std::make_shared<ht::GPT>(cfg);
  auto objective = ht::make_gpt_objective(gpt);
  std::unique_ptr<ht::Optimizer> optimizer;
  if (optimizer_name == "adamw8bit") {
    optimizer = std::make_unique<ht::AdamW8bit>(gpt->parameters(), ht::AdamWOptions{});
  } else if (optimizer_name == "adamw") {
    optimizer = ht::make_adamw(gpt->parameters(), ht::AdamWOptions{});
  } else {
    std::fprintf(stderr, "memory_bench predict: unknown optimizer '%s' (adamw | adamw8bit)\n", optimizer_name.c_str());
    std::exit(2);
  }
  FixedTokens data(B, T, cfg.vocab_size);
  ht::TrainerOptions options;
  options.max_steps = 12;
  ht::Trainer trainer(*objective, *optimizer, data, options);
  ht::HybridOptions h;
  h.warmup_steps = 1;
  h.full_steps = 2;
  h.correct_steps = 1;
  h.min_predict_steps = 2;
  h.max_predict_steps = 2;
  h.verify_every = 1;
  h.probe_batches = probe_batches;
  h.enter_confidence = 0.0;
  h.pay_check = false;
  trainer.set_strategy(ht::make_hybrid_strategy(h));

  ht::StepRecord full, predict;
  int64_t predicted = 0;
  for (int64_t i = 0; i < options.max_steps && predicted < 2; ++i) {
    const ht::StepRecord r = trainer.train_step();
    std::printf("  step %2ld %-8s peak %8.1f MiB  live after %8.1f MiB  %7.0f ms\n", static_cast<long>(r.step),
                ht::phase_name(r.phase), r.peak_bytes / kMiB, r.tensor_bytes / kMiB, r.ms);
    if (r.phase == ht::Phase::Predict) {
      predict = r.peak_bytes > predict.peak_bytes ? r : predict;
      ++predicted;
    } else if (i > 0 && r.peak_backward_bytes >= 0) {
      full = r.peak_bytes > full.peak_bytes ? r : full;  // step 1 also allocates grads and moments
    }
  }
  if (predicted == 0) {
    std::printf("  no predict step within %ld steps\n", static_cast<long>(options.max_steps));
    return;
  }
  const ht::MemorySummary m = trainer.memory_summary();
  const int64_t resident = predict.tensor_bytes;
  std::printf("  resident: params %.1f, grads %.1f, optimizer %.1f, hybrid %.1f (snapshot, buffers, predictor) MiB\n",
              m.parameter_bytes / kMiB, m.gradient_bytes / kMiB, m.optimizer_bytes / kMiB, m.strategy_bytes / kMiB);
  std::printf("  full step    peak %8.1f MiB (forward %.1f, backward %.1f, optimizer %.1f)\n", full.peak_bytes / kMiB,
              full.peak_forward_bytes / kMiB, full.peak_backward_bytes / kMiB, full.peak_optimizer_bytes / kMiB);
  std::printf("  predict step peak %8.1f MiB\n", predict.peak_bytes / kMiB);
  std::printf("  predict / full peak: %.3f absolute, %.3f above the %.1f MiB live between steps\n",
              double(predict.peak_bytes) / full.peak_bytes,
              double(predict.peak_bytes - resident) / double(full.peak_bytes - resident), resident / kMiB);
}

}  // namespace

int main(int argc, char** argv) {
  ht::install_tracking_allocator();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line, also when redirected
  const std::string what = argc > 1 ? argv[1] : "all";
  const int threads = ht::set_threads(argc > 2 ? std::atoi(argv[2]) : 2);
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  std::printf("memory_bench: %d threads, median of %d runs\n", threads, reps);
  if (what == "attention" || what == "all") bench_attention(reps);
  if (what == "recompute" || what == "all") bench_recompute(reps);
  if (what == "optimizer" || what == "all") bench_optimizer(reps);
  if (what == "predict")  // reps stands for the probe's batches here
    bench_predict(argc > 4 ? std::atoll(argv[4]) : 4, argc > 5 ? std::atoll(argv[5]) : 1024, reps,
                  argc > 6 ? argv[6] : "adamw");
  return 0;
}
