// The memory monitor and what the trainer does with it: exact per-phase peaks, phases in the step
// records and the JSON lines, budget warnings once per crossing, early action above the critical
// level, and the end-of-run breakdown.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>

#include "hybrid/core/allocator.h"
#include "hybrid/core/memory_monitor.h"
#include "hybrid/core/trainer.h"
#include "support/reference_optimizers.h"
#include "support/toy_problem.h"

namespace ht {
namespace {

constexpr int64_t kMiB = 1 << 20;

at::Tensor mib_tensor(int64_t n) { return torch::empty({n * kMiB / 4}); }  // exactly n MiB of floats

struct Messages : Logger {
  void on_message(Level level, const std::string& m) override {
    if (level == Level::Warning) warnings.push_back(m);
  }
  int64_t count(const std::string& what) const {
    return std::count_if(warnings.begin(), warnings.end(),
                         [&](const std::string& m) { return m.find(what) != std::string::npos; });
  }
  std::vector<std::string> warnings;
};

struct ToyRun {
  std::shared_ptr<testing::ToyNet> net = std::make_shared<testing::ToyNet>();
  std::unique_ptr<Objective> objective = testing::toy_objective(net);
  std::unique_ptr<Optimizer> optimizer = testing::reference_adamw(net->parameters());
  testing::ToyData data{256};
  Messages log;
  std::unique_ptr<Trainer> trainer;
  explicit ToyRun(TrainerOptions o = {}) {
    trainer = std::make_unique<Trainer>(*objective, *optimizer, data, std::move(o), &log);
  }
  int64_t param_bytes() const {
    int64_t b = 0;
    for (const auto& p : net->parameters()) b += p.numel() * 4;
    return b;
  }
};

}  // namespace

TEST(MemoryMonitor, PhasePeaksAreExactAndNest) {
  MemoryMonitor mon;
  const int64_t base = allocator_stats().current_bytes;
  mon.begin_step();
  at::Tensor kept;
  {
    const auto forward = mon.phase(MemoryPhase::Forward);
    kept = mib_tensor(1);
    {
      const auto backward = mon.phase(MemoryPhase::Backward);  // nested: counts for both
      at::Tensor t = mib_tensor(2);
    }
  }
  {
    const auto optimizer = mon.phase(MemoryPhase::Optimizer);
    at::Tensor t = mib_tensor(1);
  }
  StepRecord rec;
  mon.end_step(rec);
  EXPECT_EQ(rec.peak_forward_bytes, base + 3 * kMiB);
  EXPECT_EQ(rec.peak_backward_bytes, base + 3 * kMiB);
  EXPECT_EQ(rec.peak_optimizer_bytes, base + 2 * kMiB);  // `kept` plus its own 1 MiB
  EXPECT_EQ(rec.peak_predict_bytes, -1);                 // did not run
  EXPECT_EQ(rec.peak_bytes, base + 3 * kMiB);
  EXPECT_EQ(rec.tensor_bytes, base + kMiB);

  // The next step starts from what is live now; run figures keep the maxima.
  kept = at::Tensor();
  mon.begin_step();
  {
    const auto predict = mon.phase(MemoryPhase::Predict);
    at::Tensor t = mib_tensor(1);
  }
  StepRecord next;
  mon.end_step(next);
  EXPECT_EQ(next.peak_bytes, base + kMiB);
  EXPECT_EQ(next.peak_predict_bytes, base + kMiB);
  EXPECT_EQ(next.peak_forward_bytes, -1);
  EXPECT_EQ(mon.steps(), 2);
  EXPECT_EQ(mon.run_peak_bytes(), base + 3 * kMiB);
  EXPECT_EQ(mon.run_peak_resident_bytes(), base + kMiB);
  EXPECT_EQ(mon.run_phase_peak_bytes(MemoryPhase::Backward), base + 3 * kMiB);
  EXPECT_EQ(mon.run_phase_peak_bytes(MemoryPhase::Predict), base + kMiB);
}

TEST(MemoryMonitor, FullStepsReportForwardBackwardAndOptimizerPeaks) {
  ToyRun run;
  for (int i = 0; i < 3; ++i) {
    const StepRecord r = run.trainer->train_step();
    // The forward holds the parameters plus the batch's activations, the backward also gradients.
    EXPECT_GT(r.peak_forward_bytes, run.param_bytes() + 256 * 32 * 4) << i;
    EXPECT_GT(r.peak_backward_bytes, 0) << i;
    EXPECT_GT(r.peak_optimizer_bytes, 0) << i;
    EXPECT_EQ(r.peak_predict_bytes, -1) << i;
    EXPECT_EQ(r.peak_bytes, std::max({r.peak_forward_bytes, r.peak_backward_bytes, r.peak_optimizer_bytes})) << i;
    EXPECT_LE(r.tensor_bytes, r.peak_bytes) << i;
    const std::string json = to_json(r);
    EXPECT_NE(json.find("\"peak_backward_bytes\":" + std::to_string(r.peak_backward_bytes)), std::string::npos) << json;
    EXPECT_EQ(json.find("peak_predict_bytes"), std::string::npos) << json;
  }
}

TEST(MemoryMonitor, SummaryBreaksThePeakDown) {
  TrainerOptions o;
  o.max_steps = 5;
  ToyRun run(o);
  run.trainer->fit();
  const MemorySummary s = run.trainer->memory_summary();
  EXPECT_EQ(s.parameter_bytes, run.param_bytes());
  EXPECT_EQ(s.gradient_bytes, run.param_bytes());
  EXPECT_EQ(s.optimizer_bytes, 2 * run.param_bytes());  // Adam's two moments
  EXPECT_EQ(s.strategy_bytes, 0);
  EXPECT_EQ(s.steps, 5);
  EXPECT_GT(s.activation_bytes, 256 * 32 * 4);  // at least the hidden layer of one batch
  EXPECT_GE(s.peak_bytes, s.parameter_bytes + s.gradient_bytes + s.optimizer_bytes + s.activation_bytes);
  EXPECT_GT(s.phase_peak_bytes[static_cast<int>(MemoryPhase::Backward)], 0);
  EXPECT_EQ(s.phase_peak_bytes[static_cast<int>(MemoryPhase::Predict)], -1);
  const std::string text = s.to_string();
  EXPECT_NE(text.find("optimizer state"), std::string::npos) << text;
  EXPECT_NE(text.find("predict -"), std::string::npos) << text;
}

TEST(MemoryMonitor, WarnsOncePerCrossingAndActsEarlyAboveCritical) {
  int recompute_calls = 0;
  TrainerOptions o;
  o.memory.enable_recompute = [&] { return ++recompute_calls, true; };
  ToyRun run(o);
  int64_t peak = 0;
  for (int i = 0; i < 3; ++i) peak = std::max(peak, run.trainer->train_step().peak_bytes);
  // Always above the peak: the allocator enforces the budget, and these steps must not fail.
  auto budget_at = [&](double share) { run.trainer->memory().set_budget(int64_t(peak / share)); };
  auto steps = [&](int n) {
    for (int i = 0; i < n; ++i) run.trainer->train_step();
  };

  budget_at(0.90);  // between warn (0.85) and critical (0.95)
  steps(20);
  EXPECT_EQ(run.log.warnings.size(), 1u);
  EXPECT_EQ(run.log.count("warn_fraction"), 1);

  budget_at(0.97);  // critical: release the cache, then recompute on a later critical step
  steps(20);
  EXPECT_EQ(run.log.count("released"), 1);
  EXPECT_EQ(run.log.count("activation recompute turned on"), 1);
  EXPECT_EQ(recompute_calls, 1);
  EXPECT_EQ(run.log.warnings.size(), 3u) << "silent while nothing changes";

  budget_at(0.5);  // well below: re-armed only after a long quiet stretch
  steps(120);
  budget_at(0.90);
  steps(5);
  EXPECT_EQ(run.log.count("warn_fraction"), 2);
  EXPECT_EQ(run.log.warnings.size(), 4u);
  run.trainer->memory().set_budget(0);  // the allocator is the process's: later tests run without one
}

TEST(MemoryMonitor, ThresholdsAreValidated) {
  TrainerOptions o;
  o.memory.warn_fraction = 0.9;
  o.memory.critical_fraction = 0.8;
  EXPECT_THROW(ToyRun{o}, std::invalid_argument);
  o.memory.warn_fraction = 0.0;
  o.memory.critical_fraction = 0.9;
  EXPECT_THROW(ToyRun{o}, std::invalid_argument);
  o.memory.warn_fraction = 0.9;
  o.memory.critical_fraction = 1.5;
  EXPECT_THROW(ToyRun{o}, std::invalid_argument);
}

TEST(MemoryMonitor, NoBudgetMeansNoThresholdMessages) {
  ToyRun run;
  for (int i = 0; i < 10; ++i) run.trainer->train_step();
  EXPECT_TRUE(run.log.warnings.empty());
}

}  // namespace ht
