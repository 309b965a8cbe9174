// bf16 against fp32 on the default run (configs/tiny-gpt-kjv.toml): final validation loss and
// wall-clock to fp32's target, several seeds, the two precisions of a seed stepped side by side.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "core/eval_schedule.h"
#include "hybrid-train/config.h"
#include "hybrid-train/session.h"
#include "hybrid/core/allocator.h"
#include "hybrid/core/runtime.h"
#include "hybrid/kernels/precision.h"

namespace {

struct Point {
  int64_t step;
  double seconds;  // training wall-clock only (evaluation excluded: the same work in both)
  double val_loss;
};

// One training run; advance() steps it a chunk at a time so two runs share the machine's moods.
class Run {
 public:
  Run(const std::string& config, const std::vector<std::string>& overrides, int64_t steps,
      int64_t eval_every)
      : steps_(steps), evals_(eval_every, steps) {
    std::vector<std::string> args = {config};
    args.insert(args.end(), overrides.begin(), overrides.end());
    args.push_back("train.steps=" + std::to_string(steps));
    const ht::cli::Config c = ht::cli::load_config(args);
    session_ = ht::cli::build_session(c, /*with_data=*/true);
    ht::TrainerOptions o = ht::cli::trainer_options(c);
    o.checkpoint.dir.clear();  // no disk I/O in the timed region
    trainer_ = std::make_unique<ht::Trainer>(*session_.objective, *session_.optimizer, *session_.data, o);
    curve_.push_back({0, 0.0, trainer_->evaluate().val_loss});
  }
  bool done() const { return trainer_->step() >= steps_; }
  void advance(int64_t n) {
    for (int64_t i = 0; i < n && !done(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      trainer_->train_step();
      seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (evals_.evaluate_now(trainer_->step(), true))
        curve_.push_back({trainer_->step(), seconds_, trainer_->evaluate().val_loss});
    }
  }
  const std::vector<Point>& curve() const { return curve_; }
  double seconds() const { return seconds_; }

 private:
  int64_t steps_;
  ht::EvalSchedule evals_;
  ht::cli::Session session_;
  std::unique_ptr<ht::Trainer> trainer_;
  std::vector<Point> curve_;
  double seconds_ = 0;
};

// First point at or below the target, linearly interpolated between evaluations; NaN if never.
double seconds_to(const std::vector<Point>& curve, double target) {
  for (size_t i = 1; i < curve.size(); ++i) {
    if (curve[i].val_loss > target) continue;
    const Point &a = curve[i - 1], &b = curve[i];
    const double f = a.val_loss == b.val_loss ? 1.0 : (a.val_loss - target) / (a.val_loss - b.val_loss);
    return a.seconds + f * (b.seconds - a.seconds);
  }
  return NAN;
}

double median(std::vector<double> v) {
  for (double& x : v)
    if (std::isnan(x)) x = 0.0;  // never reached: counts as infinitely slow (speedup 0)
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  std::string config = "configs/tiny-gpt-kjv.toml";
  int64_t seeds = 3, first_seed = 1, steps = 2000, eval_every = 100, chunk = 20;
  int threads = 2;
  std::vector<std::string> overrides;
  CLI::App app{"bf16 vs fp32: final validation loss and wall-clock to fp32's target"};
  app.add_option("--config", config);
  app.add_option("--seeds", seeds);
  app.add_option("--first-seed", first_seed);
  app.add_option("--steps", steps, "the default run has 2000");
  app.add_option("--eval-every", eval_every);
  app.add_option("--chunk", chunk, "steps of one precision before the other takes its turn");
  app.add_option("--threads", threads);
  app.add_option("--set", overrides, "extra config overrides, e.g. model.attention=flash");
  CLI11_PARSE(app, argc, argv);
  ht::install_tracking_allocator();
  ht::set_threads(threads);
  std::printf("cpu: %s; %d threads; %s, %lld steps, eval every %lld\n", ht::cpu_bf16_features().describe().c_str(),
              threads, config.c_str(), static_cast<long long>(steps), static_cast<long long>(eval_every));
  std::vector<double> final32, final16, ratio, loss_rel;
  for (int64_t s = first_seed; s < first_seed + seeds; ++s) {
    std::vector<std::string> o = overrides;
    o.push_back("run.seed=" + std::to_string(s));
    o.push_back("run.threads=" + std::to_string(threads));
    auto o32 = o, o16 = o;
    o32.push_back("train.precision=fp32");
    o16.push_back("train.precision=bf16");
    Run a(config, o32, steps, eval_every), b(config, o16, steps, eval_every);
    while (!a.done() || !b.done()) {
      a.advance(chunk);
      b.advance(chunk);
    }
    // Target: fp32's validation loss at about 80 % of its steps.
    double target = a.curve().back().val_loss;
    for (const auto& p : a.curve())
      if (p.step <= static_cast<int64_t>(0.8 * steps)) target = p.val_loss;
    const double t32 = seconds_to(a.curve(), target), t16 = seconds_to(b.curve(), target);
    const double l32 = a.curve().back().val_loss, l16 = b.curve().back().val_loss;
    std::printf("seed %lld: target %.4f; fp32 final %.4f in %.1f s, %.1f s to target; bf16 final %.4f "
                "(%+.2f %%) in %.1f s, %.1f s to target (%.2fx fp32)\n",
                static_cast<long long>(s), target, l32, a.seconds(), t32, l16, 100.0 * (l16 - l32) / l32, b.seconds(),
                t16, t32 / t16);
    for (size_t i = 0; i < b.curve().size(); ++i)
      std::printf("  step %5lld  fp32 %.4f (%.1f s)  bf16 %.4f (%.1f s)\n", static_cast<long long>(b.curve()[i].step),
                  a.curve()[i].val_loss, a.curve()[i].seconds, b.curve()[i].val_loss, b.curve()[i].seconds);
    final32.push_back(l32);
    final16.push_back(l16);
    ratio.push_back(t32 / t16);
    loss_rel.push_back(100.0 * (l16 - l32) / l32);
    std::fflush(stdout);
  }
  std::printf("== median over %lld seeds: final val loss fp32 %.4f, bf16 %.4f (median difference %+.2f %%, "
              "range %+.2f..%+.2f %%); bf16 reaches fp32's target %.2fx as fast (range %.2f-%.2f)\n",
              static_cast<long long>(seeds), median(final32), median(final16), median(loss_rel),
              *std::min_element(loss_rel.begin(), loss_rel.end()), *std::max_element(loss_rel.begin(), loss_rel.end()),
              median(ratio), *std::min_element(ratio.begin(), ratio.end()), *std::max_element(ratio.begin(), ratio.end()));
  return 0;
}
