// Lookahead baseline: synchronises every k steps to slow += alpha (fast - slow), trains, resumes;
// with outer momentum (SNOO) lands past the fast weights and speeds up a smooth descent.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <filesystem>

#include "hybrid/hybrid/lookahead.h"
#include "hybrid/hybrid/strategy.h"
#include "support/scratch_dir.h"
#include "toy_problems.h"

TEST(Lookahead, SyncsEveryKStepsToTheInterpolatedWeights) {
  toy::BowlRun run(10);
  run.trainer->set_strategy(ht::make_lookahead_strategy(3, 0.5));
  const at::Tensor w0 = run.bowl->w.detach().clone();
  // Three SGD steps from w0 give the fast weights; the sync lands halfway back to w0.
  toy::BowlRun fast(3);
  for (int i = 0; i < 3; ++i) fast.trainer->train_step();
  for (int i = 0; i < 3; ++i) {
    const ht::StepRecord r = run.trainer->train_step();
    EXPECT_EQ(r.extra.at("lookahead_sync"), i == 2 ? 1.0 : 0.0);
  }
  EXPECT_TRUE(torch::allclose(run.bowl->w, w0 + 0.5 * (fast.bowl->w - w0)));
  EXPECT_THROW(ht::make_lookahead_strategy(0, 0.5), std::invalid_argument);
  EXPECT_THROW(ht::make_lookahead_strategy(5, 1.5), std::invalid_argument);
  EXPECT_THROW(ht::make_lookahead_strategy(5, 0.5, 1.0), std::invalid_argument);
  EXPECT_THROW(ht::make_lookahead_strategy(5, 0.5, -0.1), std::invalid_argument);
}

TEST(Lookahead, SnooFirstSyncLandsPastTheFastWeights) {
  // b starts at 0, so the first sync is slow = w0 - alpha (1 + momentum) (w0 - fast).
  toy::BowlRun run(10);
  run.trainer->set_strategy(ht::make_lookahead_strategy(3, 0.8, 0.5));
  const at::Tensor w0 = run.bowl->w.detach().clone();
  toy::BowlRun fast(3);
  for (int i = 0; i < 3; ++i) fast.trainer->train_step();
  for (int i = 0; i < 3; ++i) run.trainer->train_step();
  EXPECT_TRUE(torch::allclose(run.bowl->w, w0 + 0.8 * 1.5 * (fast.bowl->w - w0)));
}

TEST(Lookahead, SnooMomentumSpeedsUpASmoothDescent) {
  // On the bowl SGD's steps all point the same way, so the pseudo-gradients do too and their
  // momentum carries the weights further: the case where extrapolation is known to pay.
  auto loss_after = [](double momentum) {
    toy::BowlRun run(60, 0.02);
    run.trainer->set_strategy(ht::make_lookahead_strategy(5, 1.0, momentum));
    for (int i = 0; i < 60; ++i) run.trainer->train_step();
    return run.loss();
  };
  const double plain_lookahead = loss_after(0.0);  // alpha 1, no momentum: plain SGD
  const double snoo = loss_after(0.5);
  EXPECT_LT(snoo, 0.7 * plain_lookahead);  // measured: 0.98 against 2.56
}

TEST(Lookahead, TrainsTheMlpAndResumesBitExactly) {
  const ht::testing::ScratchDir scratch;
  const std::string path = scratch.file("lookahead.ht");
  toy::MlpRun a(300);
  a.trainer->set_strategy(ht::make_lookahead_strategy(5, 0.5));
  const double start = a.val_loss();
  for (int i = 0; i < 152; ++i) a.trainer->train_step();  // mid-way between two syncs
  a.trainer->save_checkpoint(path);
  for (int i = 152; i < 300; ++i) a.trainer->train_step();
  EXPECT_LT(a.val_loss(), 0.5 * start);

  toy::MlpRun b(300, 3e-3, 42);
  b.trainer->set_strategy(ht::make_lookahead_strategy(5, 0.5));
  b.trainer->load_checkpoint(path);
  for (int i = 152; i < 300; ++i) b.trainer->train_step();
  EXPECT_TRUE(toy::all_equal(a.optimizer->parameters(), b.optimizer->parameters()));
}

TEST(Lookahead, SnooResumesBitExactlyWithItsMomentum) {
  const ht::testing::ScratchDir scratch;
  const std::string path = scratch.file("snoo.ht");
  toy::MlpRun a(200);
  a.trainer->set_strategy(ht::make_lookahead_strategy(5, 0.7, 0.5));
  const double start = a.val_loss();
  for (int i = 0; i < 52; ++i) a.trainer->train_step();  // 10 syncs: the momentum buffer is live
  a.trainer->save_checkpoint(path);
  for (int i = 52; i < 200; ++i) a.trainer->train_step();
  EXPECT_LT(a.val_loss(), 0.5 * start);

  toy::MlpRun b(200, 3e-3, 42);
  b.trainer->set_strategy(ht::make_lookahead_strategy(5, 0.7, 0.5));
  b.trainer->load_checkpoint(path);
  for (int i = 52; i < 200; ++i) b.trainer->train_step();
  EXPECT_TRUE(toy::all_equal(a.optimizer->parameters(), b.optimizer->parameters()));

  // Resuming SNOO state as plain Lookahead would drop the momentum: refused, naming the momentum
  // (the CLI adds its key, lookahead.momentum, for the strategy part).
  toy::MlpRun c(200, 3e-3, 42);
  c.trainer->set_strategy(ht::make_lookahead_strategy(5, 0.7));
  try {
    c.trainer->load_checkpoint(path);
    ADD_FAILURE() << "loading SNOO state into plain Lookahead did not throw";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("saved with momentum 0.5"), std::string::npos) << e.what();
  }
}

// until_step: SNOO for the early phase only. After the hand-over the steps are the optimizer's
// own (exactly as a run without a strategy from the same weights), the buffers are freed, and a
// checkpoint written after it resumes as plain steps.
TEST(Lookahead, SnooHandsOverToPlainStepsAtUntilStep) {
  const ht::testing::ScratchDir scratch;
  const std::string path = scratch.file("handover.ht");
  toy::BowlRun a(40, 0.02);
  auto strategy = std::make_unique<ht::LookaheadStrategy>(5, 0.3, 0.7, 12);
  const ht::LookaheadStrategy* snoo = strategy.get();
  a.trainer->set_strategy(std::move(strategy));
  for (int i = 0; i < 15; ++i) {
    a.trainer->train_step();
    EXPECT_EQ(snoo->stopped(), i >= 14) << "step " << i + 1;  // the first sync at or after 12 is 15
  }
  EXPECT_EQ(snoo->state_bytes(), 0);
  a.trainer->save_checkpoint(path);
  // From the hand-over on, the same SGD steps as a run without any strategy from these weights.
  toy::BowlRun plain(40, 0.02);
  {
    torch::NoGradGuard g;
    plain.bowl->w.copy_(a.bowl->w);
  }
  for (int i = 15; i < 30; ++i) {
    const ht::StepRecord r = a.trainer->train_step();
    EXPECT_EQ(r.extra.at("lookahead_sync"), 0.0);
    plain.trainer->train_step();
  }
  EXPECT_TRUE(torch::equal(a.bowl->w, plain.bowl->w));

  toy::BowlRun b(40, 0.02);
  b.trainer->set_strategy(ht::make_lookahead_strategy(5, 0.3, 0.7, 12));
  b.trainer->load_checkpoint(path);
  for (int i = 15; i < 30; ++i) b.trainer->train_step();
  EXPECT_TRUE(torch::equal(a.bowl->w, b.bowl->w));
  EXPECT_THROW(ht::make_lookahead_strategy(5, 0.3, 0.7, -1), std::invalid_argument);
}

// A hybrid checkpoint resumed in Lookahead mode: the error is Lookahead's own, and says what to do
// (it called itself "hybrid state" before).
TEST(Lookahead, AHybridCheckpointIsRefusedInLookaheadTerms) {
  const ht::testing::ScratchDir scratch;
  const std::string path = scratch.file("hybrid.ht");
  toy::MlpRun a(20);
  a.trainer->set_strategy(ht::make_hybrid_strategy(ht::HybridOptions{}));
  for (int i = 0; i < 3; ++i) a.trainer->train_step();
  a.trainer->save_checkpoint(path);

  toy::MlpRun b(20, 3e-3, 42);
  b.trainer->set_strategy(ht::make_lookahead_strategy(5, 0.5));
  try {
    b.trainer->load_checkpoint(path);
    ADD_FAILURE() << "a hybrid checkpoint loaded as Lookahead";
  } catch (const std::exception& e) {
    // Names both strategies; the library's words (the CLI adds its run.mode key).
    const std::string what = e.what();
    EXPECT_NE(what.find("holds hybrid state"), std::string::npos) << what;
    EXPECT_NE(what.find("this run uses lookahead"), std::string::npos) << what;
    const auto* mismatch = dynamic_cast<const ht::CheckpointMismatch*>(&e);
    ASSERT_NE(mismatch, nullptr) << what;
    EXPECT_EQ(mismatch->part, "strategy");
  }
}

// late_step: SNOO's momentum changes at the first sync at or after it, alpha and the buffer
// rescaled so the steady outer step alpha / (1 - momentum) stays 1. Checked against the
// recurrence written out here, with the fast weights from k plain SGD steps on the bowl (SGD on
// the bowl has no state, so k steps from given weights are a function of those weights).
// The weights after k plain steps of `fast` from `from`: the fast weights a sync starts with.
static at::Tensor sgd_steps_from(toy::BowlRun& fast, const at::Tensor& from, int64_t k) {
  {
    torch::NoGradGuard g;
    fast.bowl->w.copy_(from);
  }
  for (int64_t i = 0; i < k; ++i) fast.trainer->train_step();
  return fast.bowl->w.detach().clone();
}

// Saves `run` at its current step to `path`, resumes a fresh bowl from it with the same options,
// steps both to `last_step` and expects the same weights: the strategy's state is all in the file.
static void expect_resume_is_bit_exact(toy::BowlRun& run, const ht::LookaheadOptions& o,
                                       const std::string& path, int64_t last_step) {
  run.trainer->save_checkpoint(path);
  toy::BowlRun resumed(60, 0.02);
  resumed.trainer->set_strategy(ht::make_lookahead_strategy(o));
  resumed.trainer->load_checkpoint(path);
  while (run.trainer->step() < last_step) {
    run.trainer->train_step();
    resumed.trainer->train_step();
  }
  EXPECT_TRUE(torch::equal(run.bowl->w, resumed.bowl->w));
}

TEST(Lookahead, SnooSwitchesToItsLateMomentumAtLateStep) {
  const int64_t k = 5, late_step = 23;  // syncs end steps 5, 10, ..., the first late one is 25
  const double alpha = 0.3, momentum = 0.7, late_momentum = 0.4;
  ht::LookaheadOptions o;
  o.k = k;
  o.alpha = alpha;
  o.momentum = momentum;
  o.late_step = late_step;
  o.late_momentum = late_momentum;
  toy::BowlRun run(60, 0.02);
  auto strategy = std::make_unique<ht::LookaheadStrategy>(o);
  const ht::LookaheadStrategy* snoo = strategy.get();
  run.trainer->set_strategy(std::move(strategy));

  toy::BowlRun fast(1000, 0.02);
  auto k_sgd_steps = [&](const at::Tensor& from) { return sgd_steps_from(fast, from, k); };
  at::Tensor slow = run.bowl->w.detach().clone();
  at::Tensor b = torch::zeros_like(slow);
  bool late = false;
  for (int64_t sync_step = k; sync_step <= 50; sync_step += k) {
    const at::Tensor s = slow - k_sgd_steps(slow);
    double m = momentum, a = alpha;
    if (sync_step >= late_step) {
      if (!late) b = b * ((1.0 - momentum) / (1.0 - late_momentum));
      late = true;
      m = late_momentum;
      a = alpha * (1.0 - late_momentum) / (1.0 - momentum);  // 0.6: steady step still 1
    }
    b = m * b + s;
    slow = slow - a * (m * b + s);
    for (int64_t i = 0; i < k; ++i) run.trainer->train_step();
    EXPECT_EQ(snoo->late(), sync_step >= late_step) << "step " << sync_step;
    EXPECT_TRUE(torch::allclose(run.bowl->w, slow, 1e-5, 1e-6)) << "step " << sync_step;
  }

  // Resumed after the switch, the run goes on with the late momentum and its buffer.
  const ht::testing::ScratchDir scratch;
  expect_resume_is_bit_exact(run, o, scratch.file("late.ht"), 60);

  // Settings that cannot mean anything are refused, naming the fix.
  auto refused = [](ht::LookaheadOptions bad, const std::string& words) {
    try {
      ht::LookaheadStrategy s(bad);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  ht::LookaheadOptions no_momentum = o;
  no_momentum.momentum = 0.0;
  refused(no_momentum, "late_step needs LookaheadOptions.momentum > 0");
  ht::LookaheadOptions too_big_alpha = o;
  too_big_alpha.alpha = 0.9;  // 0.9 * 0.6 / 0.3 = 1.8
  refused(too_big_alpha, "raise late_momentum or lower alpha");
  ht::LookaheadOptions bad_late = o;
  bad_late.late_momentum = 1.0;
  refused(bad_late, "late_momentum must be in [0, 1)");
}

// start_step: plain steps until it (no buffers), then SNOO from the weights there, exactly as a
// SNOO run started from those weights; a checkpoint before the start and one after it resume.
TEST(Lookahead, SnooStartsFromTheWeightsAtStartStep) {
  const ht::testing::ScratchDir scratch;
  const std::string before = scratch.file("before_start.ht");
  ht::LookaheadOptions o;
  o.k = 5;
  o.alpha = 0.3;
  o.momentum = 0.7;
  o.start_step = 12;
  toy::BowlRun a(60, 0.02);
  auto strategy = std::make_unique<ht::LookaheadStrategy>(o);
  const ht::LookaheadStrategy* snoo = strategy.get();
  a.trainer->set_strategy(std::move(strategy));
  toy::BowlRun plain(60, 0.02);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(a.trainer->train_step().extra.at("lookahead_sync"), 0.0) << "step " << i + 1;
    plain.trainer->train_step();
  }
  EXPECT_FALSE(snoo->started());
  EXPECT_EQ(snoo->state_bytes(), 0);
  EXPECT_TRUE(torch::equal(a.bowl->w, plain.bowl->w));
  a.trainer->save_checkpoint(before);

  // From step 12 on: SNOO from these weights, its first sync ending step 17 (not 15).
  toy::BowlRun fresh(60, 0.02);
  {
    torch::NoGradGuard g;
    fresh.bowl->w.copy_(a.bowl->w);
  }
  ht::LookaheadOptions from_zero = o;
  from_zero.start_step = 0;
  fresh.trainer->set_strategy(ht::make_lookahead_strategy(from_zero));
  for (int i = 12; i < 32; ++i) {
    const ht::StepRecord r = a.trainer->train_step();
    EXPECT_EQ(r.extra.at("lookahead_sync"), (i + 1 - 12) % 5 == 0 ? 1.0 : 0.0) << "step " << i + 1;
    fresh.trainer->train_step();
  }
  EXPECT_TRUE(snoo->started());
  EXPECT_GT(snoo->state_bytes(), 0);
  EXPECT_TRUE(torch::equal(a.bowl->w, fresh.bowl->w));
  EXPECT_FALSE(torch::equal(a.bowl->w, plain.bowl->w));

  // Resumed from before the start: plain until it, then the same SNOO.
  toy::BowlRun b(60, 0.02);
  b.trainer->set_strategy(ht::make_lookahead_strategy(o));
  b.trainer->load_checkpoint(before);
  for (int i = 12; i < 32; ++i) b.trainer->train_step();
  EXPECT_TRUE(torch::equal(a.bowl->w, b.bowl->w));
  // And from after it, mid-period (step 32: two steps into the period ending 37).
  expect_resume_is_bit_exact(a, o, scratch.file("after_start.ht"), 45);

  ht::LookaheadOptions hand_over_first = o;
  hand_over_first.until_step = 10;  // before the start: nothing would run
  EXPECT_THROW(ht::LookaheadStrategy{hand_over_first}, std::invalid_argument);
  ht::LookaheadOptions negative = o;
  negative.start_step = -1;
  EXPECT_THROW(ht::LookaheadStrategy{negative}, std::invalid_argument);
}

TEST(Lookahead, SnooBiasCorrectionMakesTheFirstOuterStepsTheSteadyOne) {
  const int64_t k = 5;
  const double alpha = 0.3, momentum = 0.7;
  ht::LookaheadOptions o;
  o.k = k;
  o.alpha = alpha;
  o.momentum = momentum;
  o.bias_correction = true;
  toy::BowlRun run(60, 0.02);
  run.trainer->set_strategy(ht::make_lookahead_strategy(o));

  toy::BowlRun fast(1000, 0.02);
  auto k_sgd_steps = [&](const at::Tensor& from) { return sgd_steps_from(fast, from, k); };
  at::Tensor slow = run.bowl->w.detach().clone();
  at::Tensor b = torch::zeros_like(slow);
  int64_t t = 0;
  for (int64_t sync_step = k; sync_step <= 30; sync_step += k) {
    const at::Tensor fast_weights = k_sgd_steps(slow);
    const at::Tensor s = slow - fast_weights;
    ++t;
    b = momentum * b + s;
    const double corrected = alpha / (1.0 - std::pow(momentum, static_cast<double>(t + 1)));
    slow = slow - corrected * (momentum * b + s);
    // The first sync lands exactly on the fast weights: the steady step of a steady drift, 1.
    if (t == 1) EXPECT_TRUE(torch::allclose(slow, fast_weights, 1e-5, 1e-6));
    for (int64_t i = 0; i < k; ++i) run.trainer->train_step();
    EXPECT_TRUE(torch::allclose(run.bowl->w, slow, 1e-5, 1e-6)) << "step " << sync_step;
  }

  // The sync count is state: a resume between syncs goes on bit-exactly.
  for (int i = 0; i < 2; ++i) run.trainer->train_step();
  const ht::testing::ScratchDir scratch;
  const std::string path = scratch.file("corrected.ht");
  expect_resume_is_bit_exact(run, o, path, 45);

  // Resuming with the correction switched off would change every later step: refused.
  ht::LookaheadOptions uncorrected = o;
  uncorrected.bias_correction = false;
  toy::BowlRun other(60, 0.02);
  other.trainer->set_strategy(ht::make_lookahead_strategy(uncorrected));
  EXPECT_THROW(other.trainer->load_checkpoint(path), std::runtime_error);

  ht::LookaheadOptions no_momentum = o;
  no_momentum.momentum = 0.0;
  EXPECT_THROW(ht::LookaheadStrategy{no_momentum}, std::invalid_argument);
}
