// Tensor memory under the hybrid engine: no growth over thousands of steps with predict phases
// and rollbacks, per-phase peaks in the records, and a predict step's peak against a full step's
// on a small GPT.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>

#include "hybrid/hybrid/strategy.h"
#include "hybrid/kernels/optimizers.h"
#include "hybrid/models/gpt.h"
#include "hybrid/models/gpt_objective.h"
#include "hybrid/toy_problems.h"

namespace {

// EMA updates, harmful (noise of norm 1e3) for 20 observations, then good for 20: predict
// phases that are kept and ones that are rolled back, all through the run.
std::unique_ptr<ht::UpdatePredictor> alternating_predictor() {
  return std::make_unique<toy::SabotagedPredictor>(toy::SabotagedPredictor::Mode::AlternatePhases, 1e3);
}

// Short phases, always predicting: as many phase changes and rollbacks per step as possible.
ht::HybridOptions busy_options() {
  ht::HybridOptions o;
  o.predictor = "ema";
  o.warmup_steps = 5;
  o.full_steps = 8;
  o.correct_steps = 1;
  o.min_predict_steps = 2;
  o.max_predict_steps = 8;
  o.verify = "holdout";
  o.verify_every = 2;
  o.probe_batches = 1;
  o.max_step_scale = 1.0;
  o.enter_confidence = 0.0;
  o.tolerance = 1.0;  // keeps the good phases; the bad ones are far outside
  o.pay_check = false;
  return o;
}

// Fixed random token batches, cycled: a GPT training stream without the data library.
class TokenData : public ht::DataSource {
 public:
  TokenData(int64_t batch, int64_t context, int64_t vocab) : batch_(batch) {
    auto gen = at::detail::createCPUGenerator(3);
    for (int i = 0; i < 8; ++i) {
      const at::Tensor seq = torch::randint(vocab, {batch, context + 1}, gen);  // [B, T+1]
      batches_.push_back({seq.narrow(1, 0, context).contiguous(), seq.narrow(1, 1, context).contiguous()});
    }
  }
  ht::Batch next_train_batch() override { return batches_[static_cast<size_t>(cursor_.position++ % 8)]; }
  ht::DataCursor cursor() const override { return cursor_; }
  void restore(const ht::DataCursor& c) override { cursor_ = c; }
  int64_t num_val_batches() const override { return 1; }
  ht::Batch val_batch(int64_t) const override { return batches_[0]; }
  int64_t items_per_batch() const override { return batch_; }

 private:
  std::vector<ht::Batch> batches_;
  int64_t batch_;
  ht::DataCursor cursor_;
};

}  // namespace

TEST(HybridMemory, NoGrowthOver5000StepsWithPredictPhasesAndRollbacks) {
  toy::MlpRun run(5000, 3e-3, 0, 32);
  run.trainer->set_strategy(
      ht::make_hybrid_strategy(busy_options(), alternating_predictor()));
  // Gradients are freed as a predict phase begins and come back with the next real step: a step
  // ends without them when it was a kept predicted step or a predicted one follows (a rolled-back
  // predicted step reports as the correct step that replaced it). Each kind holds its constant.
  int64_t lo[2] = {INT64_MAX, INT64_MAX}, hi[2] = {0, 0}, predicted = 0, rollbacks = 0;
  int64_t previous_bytes = -1;
  bool previous_predicted = false;
  for (int64_t i = 0; i < 5000; ++i) {
    const ht::StepRecord r = run.trainer->train_step();
    predicted += r.phase == ht::Phase::Predict;
    rollbacks += r.extra.at("rolled_back") == 1.0;
    if (r.phase == ht::Phase::Predict) {
      ASSERT_GE(r.peak_predict_bytes, 0) << i;
      ASSERT_EQ(r.peak_backward_bytes, -1) << i << ": a predict step ran a backward";
    } else {
      ASSERT_GE(r.peak_backward_bytes, 0) << i;
    }
    if (i > 100) {  // after warm-up: optimizer state, hybrid buffers, first probe batch
      const int k = previous_predicted || r.phase == ht::Phase::Predict || r.extra.at("rolled_back") == 1.0;
      lo[k] = std::min(lo[k], previous_bytes);
      hi[k] = std::max(hi[k], previous_bytes);
    }
    previous_bytes = r.tensor_bytes;
    previous_predicted = r.phase == ht::Phase::Predict;
  }
  std::printf("[ measured ] %lld predicted steps, %lld rollbacks, %lld tensor bytes\n",
              static_cast<long long>(predicted), static_cast<long long>(rollbacks), static_cast<long long>(lo[0]));
  EXPECT_GE(predicted, 400);  // 481 and 283 when written
  EXPECT_GE(rollbacks, 200);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(hi[k], lo[k]) << (k ? "without" : "with") << " gradients: tensor bytes moved between "
                            << lo[k] << " and " << hi[k];
    EXPECT_GT(lo[k], 0);
  }
  EXPECT_LT(lo[1], lo[0]) << "gradients should be gone around predicted steps";
  // The run's figures and the hybrid buffers reach the summary.
  const ht::MemorySummary s = run.trainer->memory_summary();
  EXPECT_EQ(s.steps, 5000);
  EXPECT_GE(s.strategy_bytes, 3 * s.parameter_bytes);  // snapshot, delta, prediction (+ before)
  EXPECT_GT(s.phase_peak_bytes[static_cast<int>(ht::MemoryPhase::Predict)], 0);
}

TEST(HybridMemory, PhaseChangesReportMemory) {
  toy::MlpRun run(60, 3e-3, 0, 32);
  run.trainer->set_strategy(
      ht::make_hybrid_strategy(busy_options(), alternating_predictor()));
  for (int i = 0; i < 60; ++i) run.trainer->train_step();
  int64_t with_memory = 0;
  for (const auto& m : run.logger.messages)
    with_memory += m.rfind("hybrid: step", 0) == 0 && m.find(" MiB, step peak ") != std::string::npos;
  EXPECT_GE(with_memory, 5);
}

// A predicted step applies an update and runs one forward without a graph; a full step keeps
// every activation for backward. Peaks are absolute tensor bytes, including all resident state.
TEST(HybridMemory, PredictStepPeakIsWellBelowFullStepPeakOnASmallGpt) {
  torch::manual_seed(0);
  ht::GPTConfig cfg;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 32;
  cfg.block_size = 128;
  auto gpt = std::make_shared<ht::GPT>(cfg);
  auto objective = ht::make_gpt_objective(gpt);
  auto optimizer = ht::make_adamw(gpt->parameters(), ht::AdamWOptions{});
  TokenData data(16, 128, cfg.vocab_size);
  ht::TrainerOptions to;
  to.max_steps = 30;
  ht::Trainer trainer(*objective, *optimizer, data, to);
  trainer.set_strategy(ht::make_hybrid_strategy(busy_options()));

  int64_t full_peak = INT64_MAX, predict_peak = 0, predicted = 0, resident = 0;
  for (int i = 0; i < 30; ++i) {
    const ht::StepRecord r = trainer.train_step();
    if (i < 10) continue;  // every buffer is in place by now
    if (r.phase == ht::Phase::Full) full_peak = std::min(full_peak, r.peak_bytes);
    if (r.phase == ht::Phase::Predict) {
      predict_peak = std::max(predict_peak, r.peak_bytes);
      ++predicted;
    }
    resident = r.tensor_bytes;
  }
  ASSERT_GE(predicted, 5);
  const double ratio = static_cast<double>(predict_peak) / static_cast<double>(full_peak);
  const double above = static_cast<double>(predict_peak - resident) / static_cast<double>(full_peak - resident);
  std::printf("[ measured ] GPT 2x32, B 16, T 128: resident %.1f MiB, full-step peak %.1f MiB, predict-step "
              "peak %.1f MiB: ratio %.3f (above resident: %.3f)\n",
              resident / 1048576.0, full_peak / 1048576.0, predict_peak / 1048576.0, ratio, above);
  EXPECT_LT(ratio, 0.5);
}
