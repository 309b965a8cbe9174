// The phase state machine on its own: transitions, horizon adaptation, holds and probes, options
// validation. No tensors, so every path is cheap to drive.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <sstream>

#include "hybrid/controller.h"
#include "hybrid/hybrid/options.h"

namespace {

ht::HybridOptions small_options() {
  ht::HybridOptions o;
  o.warmup_steps = 3;
  o.full_steps = 2;
  o.correct_steps = 1;
  o.min_predict_steps = 2;
  o.max_predict_steps = 8;
  o.reprobe_min = 4;
  o.reprobe_max = 16;
  return o;
}

void run_real(ht::PhaseController& c, int n) {
  for (int i = 0; i < n; ++i) c.on_real_step(true);
}

}  // namespace

TEST(PhaseController, CyclesWarmupFullPredictCorrect) {
  ht::PhaseController c(small_options());
  EXPECT_EQ(c.phase(), ht::Phase::Warmup);
  EXPECT_FALSE(c.recording());
  run_real(c, 3);
  EXPECT_EQ(c.phase(), ht::Phase::Full);
  EXPECT_TRUE(c.recording());
  // Not ready: Full extends past full_steps.
  c.on_real_step(false);
  c.on_real_step(false);
  c.on_real_step(false);
  EXPECT_EQ(c.phase(), ht::Phase::Full);
  EXPECT_TRUE(c.decision_due(true));
  EXPECT_NE(c.on_real_step(true).find("full -> predict"), std::string::npos);
  EXPECT_EQ(c.phase(), ht::Phase::Predict);
  EXPECT_EQ(c.horizon(), 2);
  c.on_verification(true);
  EXPECT_EQ(c.on_predicted_step(), "");
  EXPECT_NE(c.on_predicted_step().find("predict -> correct"), std::string::npos);
  EXPECT_EQ(c.phase(), ht::Phase::Correct);
  EXPECT_EQ(c.horizon(), 4);  // a clean phase doubles the horizon
  EXPECT_TRUE(c.recording());
  c.on_real_step(true);
  EXPECT_EQ(c.phase(), ht::Phase::Full);
}

TEST(PhaseController, HorizonGrowsToMaxAndHalvesOnRollback) {
  ht::PhaseController c(small_options());
  run_real(c, 3);
  for (int cycle = 0; cycle < 5; ++cycle) {
    run_real(c, 2);
    ASSERT_EQ(c.phase(), ht::Phase::Predict);
    const int64_t h = c.horizon();
    for (int64_t i = 0; i < h; ++i) {
      c.on_verification(true);
      c.on_predicted_step();
    }
    run_real(c, 1);  // correct
  }
  EXPECT_EQ(c.horizon(), 8);
  run_real(c, 2);
  ASSERT_EQ(c.phase(), ht::Phase::Predict);
  c.on_predicted_step();
  c.on_verification(false);
  EXPECT_NE(c.on_rollback(0).find("rolled back"), std::string::npos);
  EXPECT_EQ(c.phase(), ht::Phase::Correct);
  EXPECT_EQ(c.horizon(), 2);  // nothing held: a quarter
  run_real(c, 1 + 2);
  ASSERT_EQ(c.phase(), ht::Phase::Predict);
  c.on_predicted_step();
  c.on_rollback(1);
  EXPECT_EQ(c.horizon(), 1);  // what held, at most half
}

TEST(PhaseController, RejectionsCloseTheGateThenHoldProbeAndBackOff) {
  ht::HybridOptions o = small_options();
  ht::PhaseController c(o);
  run_real(c, 3 + 2);
  ASSERT_EQ(c.phase(), ht::Phase::Predict);
  const double before = c.confidence();
  for (int i = 0; i < 3; ++i) c.on_verification(false);
  EXPECT_LT(c.confidence(), before);
  EXPECT_LT(c.confidence(), o.enter_confidence);
  c.on_rollback(0);
  run_real(c, 1);  // correct
  run_real(c, 1);
  std::string msg = c.on_real_step(true);  // end of full: gate closed -> hold
  EXPECT_NE(msg.find("hold 4"), std::string::npos) << msg;
  EXPECT_TRUE(c.holding());
  EXPECT_FALSE(c.recording());
  run_real(c, 3);
  EXPECT_TRUE(c.holding());
  run_real(c, 1);  // hold over
  EXPECT_FALSE(c.holding());
  EXPECT_TRUE(c.recording());
  run_real(c, 2);  // record, then probe despite the closed gate
  EXPECT_EQ(c.phase(), ht::Phase::Predict);
  EXPECT_TRUE(c.probing());
  EXPECT_EQ(c.horizon(), o.min_predict_steps);
  EXPECT_DOUBLE_EQ(c.step_scale(), 1.0);
  c.on_verification(false);
  c.on_rollback(0);
  run_real(c, 1 + 2);
  EXPECT_TRUE(c.holding());  // the failed probe doubles the next hold
  int held = 0;
  while (c.holding()) {
    c.on_real_step(true);
    ++held;
  }
  EXPECT_EQ(held, 8);
}

TEST(PhaseController, PayCheckKeepsFullWhenPredictionIsSlower) {
  ht::HybridOptions o = small_options();
  ht::PhaseController c(o);
  EXPECT_TRUE(c.pays());  // untested: optimistic
  c.on_rates(0.1, 1.0);   // predict phases lower the loss 10x slower per second
  EXPECT_FALSE(c.pays());
  run_real(c, 3 + 2);
  EXPECT_EQ(c.phase(), ht::Phase::Full);
  EXPECT_TRUE(c.holding());
  o.pay_check = false;
  ht::PhaseController d(o);
  d.on_rates(0.1, 1.0);
  run_real(d, 3 + 2);
  EXPECT_EQ(d.phase(), ht::Phase::Predict);
}

TEST(PhaseController, StepScaleFollowsConfidence) {
  ht::HybridOptions o = small_options();
  o.max_step_scale = 3.0;
  ht::PhaseController c(o);
  const double low = c.step_scale();
  for (int i = 0; i < 20; ++i) c.on_verification(true);
  c.on_direction_error(1.0);
  c.on_direction_error(1.0);
  const double high = c.step_scale();
  EXPECT_GT(high, low);
  EXPECT_LE(high, 3.0);
  EXPECT_GE(low, 1.0);
}

TEST(PhaseController, SaveLoadRestoresEveryDecisionInput) {
  ht::PhaseController a(small_options());
  run_real(a, 5);
  a.on_verification(true);
  a.on_verification(false);
  a.on_loss_error(3.0);
  a.on_direction_error(0.7);
  a.on_rates(2.0, 1.0);
  a.on_predicted_step();
  torch::serialize::OutputArchive out;
  a.save(out);
  std::ostringstream os;
  out.save_to(os);
  torch::serialize::InputArchive in;
  std::istringstream is(os.str());
  in.load_from(is);
  ht::PhaseController b(small_options());
  b.load(in);
  EXPECT_EQ(b.phase(), a.phase());
  EXPECT_EQ(b.steps_in_phase(), a.steps_in_phase());
  EXPECT_EQ(b.horizon(), a.horizon());
  EXPECT_DOUBLE_EQ(b.confidence(), a.confidence());
  EXPECT_DOUBLE_EQ(b.predict_rate(), a.predict_rate());
  EXPECT_EQ(b.on_predicted_step(), a.on_predicted_step());
}

TEST(HybridOptions, ValidateNamesTheField) {
  auto expect_field = [](ht::HybridOptions o, const std::string& field) {
    try {
      o.validate();
      FAIL() << "no exception for " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("HybridOptions." + field), std::string::npos) << e.what();
    }
  };
  ht::HybridOptions o;
  EXPECT_NO_THROW(o.validate());
  o.predictor = "magic";
  expect_field(o, "predictor");
  o = {};
  o.verify = "never";
  expect_field(o, "verify");
  o = {};
  o.max_predict_steps = 1;
  o.min_predict_steps = 2;
  expect_field(o, "max_predict_steps");
  o = {};
  o.dmd_rank = 8;
  expect_field(o, "dmd_rank");
  o = {};
  o.full_steps = 0;
  expect_field(o, "full_steps");
  o = {};
  o.max_step_scale = 0.5;
  expect_field(o, "max_step_scale");
}

namespace {

std::string validation_error(const ht::HybridOptions& o) {
  try {
    o.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(HybridOptions, RejectsWindowsTooShortForTheirTests) {
  // The rssm trains on windows of at least 4 recorded steps: with fewer it never becomes ready.
  ht::HybridOptions o;
  o.rssm_window = 3;
  EXPECT_NE(validation_error(o).find("HybridOptions.rssm_window"), std::string::npos) << validation_error(o);
  o.rssm_window = 4;
  EXPECT_EQ(validation_error(o), "");
  // The spike test needs 8 real-step losses in the window.
  o = {};
  o.loss_window = 7;
  EXPECT_NE(validation_error(o).find("HybridOptions.loss_window"), std::string::npos) << validation_error(o);
  o.loss_window = 8;
  EXPECT_EQ(validation_error(o), "");
}

TEST(HybridOptions, DriftNeedsFourRecordedStepsAStretch) {
  // Its line fit throws mid-run on a stretch of fewer than 4 weights: refuse the options instead.
  ht::HybridOptions o;
  o.predictor = "drift";
  o.full_steps = 3;
  const std::string why = validation_error(o);
  EXPECT_NE(why.find("HybridOptions.full_steps"), std::string::npos) << why;
  EXPECT_NE(why.find("drift"), std::string::npos) << why;
  o.full_steps = 4;
  EXPECT_EQ(validation_error(o), "");
  o.predictor = "mean";  // the other trajectory predictors need 2, which Full waits for anyway
  o.full_steps = 1;
  EXPECT_EQ(validation_error(o), "");
}
