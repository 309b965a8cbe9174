// The hybrid strategy driven by the real ht::Trainer on toy problems: phase order, predictors that
// must be accepted where their prediction is known, bad predictors that must always be rolled
// back (bit-exactly, without slowing training), flat tensor memory, and mid-phase resume.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "hybrid/core/allocator.h"
#include "hybrid/hybrid/strategy.h"
#include "toy_problems.h"

namespace {

ht::HybridOptions toy_options(const std::string& predictor) {
  ht::HybridOptions o;
  o.predictor = predictor;
  o.warmup_steps = 5;
  o.full_steps = 8;
  o.correct_steps = 1;
  o.min_predict_steps = 2;
  o.max_predict_steps = 8;
  o.verify = "holdout";
  o.verify_every = 2;
  o.pay_check = false;  // decisions independent of wall-clock: runs are reproducible
  return o;
}

// Wraps a real predictor and turns its output into something harmful.
class SabotagedPredictor : public ht::UpdatePredictor {
 public:
  enum class Mode { Negate, Noise, AlternatePhases };
  SabotagedPredictor(Mode mode, double noise = 1.0)
      : inner_(ht::make_ema_predictor(0.9)), mode_(mode), noise_(noise) {}
  std::string name() const override { return "sabotaged"; }
  void observe(const std::vector<at::Tensor>& d, const ht::TrainingFeatures& f) override {
    inner_->observe(d, f);
  }
  void reset_history() override {
    inner_->reset_history();
    ++phases_;
  }
  bool ready() const override { return inner_->ready(); }
  void predict_into(std::vector<at::Tensor>& out, int64_t k) override {
    inner_->predict_into(out, k);
    torch::NoGradGuard g;
    const bool bad = mode_ != Mode::AlternatePhases || phases_ % 2 == 0;
    if (!bad) return;
    for (auto& t : out) {
      if (mode_ == Mode::Noise) {
        t.normal_(0.0, noise_);
      } else {
        t.neg_();
      }
    }
  }
  int64_t state_bytes() const override { return inner_->state_bytes(); }
  void save(torch::serialize::OutputArchive& a) const override { inner_->save(a); }
  void load(torch::serialize::InputArchive& a) override { inner_->load(a); }

 private:
  std::unique_ptr<ht::UpdatePredictor> inner_;
  Mode mode_;
  double noise_;
  int64_t phases_ = 0;
};

std::vector<ht::StepRecord> run_steps(ht::Trainer& trainer, int64_t n) {
  std::vector<ht::StepRecord> recs;
  for (int64_t i = 0; i < n; ++i) recs.push_back(trainer.train_step());
  return recs;
}

int64_t count_phase(const std::vector<ht::StepRecord>& recs, const std::string& phase) {
  return std::count_if(recs.begin(), recs.end(), [&](const ht::StepRecord& r) { return r.phase == phase; });
}

bool has_message(const toy::RecordingLogger& log, const std::string& what) {
  return std::any_of(log.messages.begin(), log.messages.end(),
                     [&](const std::string& m) { return m.find(what) != std::string::npos; });
}

double plain_bowl_loss(int64_t steps) {
  toy::BowlRun plain(steps);
  run_steps(*plain.trainer, steps);
  return plain.loss();
}

}  // namespace

TEST(HybridStrategy, PhasesGoWarmupFullPredictCorrect) {
  toy::BowlRun run(60);
  auto strategy = std::make_unique<ht::HybridStrategy>(toy_options("ema"));
  ht::HybridStrategy* hybrid = strategy.get();
  run.trainer->set_strategy(std::move(strategy));
  const auto recs = run_steps(*run.trainer, 60);

  for (int i = 0; i < 5; ++i) EXPECT_EQ(recs[i].phase, "warmup") << i;
  for (int i = 5; i < 13; ++i) EXPECT_EQ(recs[i].phase, "full") << i;
  EXPECT_EQ(recs[13].phase, "predict");
  EXPECT_EQ(recs[14].phase, "predict");
  EXPECT_EQ(recs[15].phase, "correct");
  EXPECT_EQ(recs[16].phase, "full");
  // The order always holds: predict is entered only from full, correct only after predict.
  for (size_t i = 1; i < recs.size(); ++i) {
    if (recs[i].phase == "predict") EXPECT_TRUE(recs[i - 1].phase == "full" || recs[i - 1].phase == "predict");
    if (recs[i].phase == "correct") EXPECT_EQ(recs[i - 1].phase, "predict");
  }
  EXPECT_TRUE(has_message(run.logger, "warmup -> full"));
  EXPECT_TRUE(has_message(run.logger, "full -> predict"));
  EXPECT_TRUE(has_message(run.logger, "predict -> correct"));
  for (const auto& r : recs) {
    EXPECT_EQ(r.step, &r - &recs[0] + 1);
    ASSERT_TRUE(r.extra.count("confidence"));
    if (r.phase == "predict") {
      EXPECT_TRUE(std::isnan(r.grad_norm));  // no backward
      EXPECT_TRUE(r.extra.count("predicted_loss"));
    }
  }
  EXPECT_EQ(hybrid->summary().steps, 60);
  EXPECT_EQ(hybrid->summary().rollbacks, 0);
  EXPECT_GT(hybrid->summary().share_predicted(), 0.2);
}

TEST(HybridStrategy, ExtrapolationIsAcceptedAndWorthRealStepsOnTheBowl) {
  // SGD at constant lr on a quadratic: the update trajectory is geometric, so repeating the last
  // update (or its EMA) keeps lowering the loss. Predicted steps must be accepted and count.
  for (const std::string name : {"last", "ema", "dmd"}) {
    toy::BowlRun run(200);
    auto strategy = std::make_unique<ht::HybridStrategy>(toy_options(name));
    ht::HybridStrategy* hybrid = strategy.get();
    run.trainer->set_strategy(std::move(strategy));
    const double start = run.loss();
    const auto recs = run_steps(*run.trainer, 200);
    const auto& s = hybrid->summary();
    const int64_t real = 200 - s.steps_by_phase[2];
    EXPECT_EQ(s.rollbacks, 0) << name;
    EXPECT_EQ(s.accepted, s.verifications) << name;
    EXPECT_GT(s.share_predicted(), 0.3) << name;
    EXPECT_LT(run.loss(), start) << name;
    // Better than the same number of real steps alone.
    EXPECT_LT(run.loss(), plain_bowl_loss(real)) << name;
    // Verified losses never rise: each accepted probe loss is at or below the predicted band.
    for (const auto& r : recs) {
      if (r.phase == "predict" && r.extra.at("verified") == 1.0) EXPECT_EQ(r.extra.at("accepted"), 1.0);
    }
  }
}

TEST(HybridStrategy, DmdPredictsTheBowlsTrueUpdates) {
  toy::BowlRun run(150);
  auto strategy = std::make_unique<ht::HybridStrategy>(toy_options("dmd"));
  ht::HybridStrategy* hybrid = strategy.get();
  run.trainer->set_strategy(std::move(strategy));
  const auto recs = run_steps(*run.trainer, 150);
  int measured = 0;
  for (const auto& r : recs) {
    if (!r.extra.count("pred_cosine")) continue;
    ++measured;
    // The update after H predicted steps, as predicted before them, against the true one.
    EXPECT_GT(r.extra.at("pred_cosine"), 0.9999) << "step " << r.step;
    EXPECT_LT(r.extra.at("pred_rel_error"), 1e-2) << "step " << r.step;
  }
  EXPECT_GE(measured, 5);
  // Exact predictions make predicted steps as good as real ones: same loss as plain at the same
  // step count, with a share of the backward passes skipped.
  EXPECT_NEAR(run.loss() / plain_bowl_loss(150), 1.0, 1e-3);
  EXPECT_GT(hybrid->summary().share_predicted(), 0.3);
}

TEST(HybridStrategy, RollbackIsBitExact) {
  // Every prediction is harmful and rolled back; SGD on the bowl is deterministic and batch-free,
  // so the weights must equal plain training's after the same number of real steps, bit for bit.
  toy::BowlRun run(120);
  run.trainer->set_strategy(std::make_unique<ht::HybridStrategy>(
      toy_options("ema"), std::make_unique<SabotagedPredictor>(SabotagedPredictor::Mode::Negate)));
  const auto recs = run_steps(*run.trainer, 120);
  const int64_t real = 120 - count_phase(recs, "predict");
  const int64_t rolled = std::count_if(recs.begin(), recs.end(), [](const ht::StepRecord& r) {
    return r.extra.at("rolled_back") == 1.0;
  });
  EXPECT_GE(rolled, 2);
  toy::BowlRun plain(real);
  run_steps(*plain.trainer, real);
  EXPECT_TRUE(torch::equal(run.bowl->w, plain.bowl->w));
}

TEST(HybridStrategy, BadPredictorsAreAlwaysRolledBackAndTrainingMatchesPlain) {
  const int64_t steps = 800;
  toy::MlpRun plain(steps);
  std::vector<double> plain_curve;
  for (int64_t i = 0; i < steps; i += 50) {
    run_steps(*plain.trainer, 50);
    plain_curve.push_back(plain.val_loss());
  }
  // Target: the loss plain training reaches at 80 % of its steps.
  const double target = plain_curve[plain_curve.size() * 8 / 10 - 1];
  auto steps_to_target = [&](const std::vector<double>& curve) {
    for (size_t i = 0; i < curve.size(); ++i)
      if (curve[i] <= target) return static_cast<int64_t>(50 * (i + 1));
    return int64_t{1} << 40;
  };
  const int64_t plain_steps = steps_to_target(plain_curve);

  for (auto mode : {SabotagedPredictor::Mode::Negate, SabotagedPredictor::Mode::Noise}) {
    toy::MlpRun run(steps);
    ht::HybridOptions o = toy_options("ema");
    o.pay_check = true;
    auto strategy = std::make_unique<ht::HybridStrategy>(o, std::make_unique<SabotagedPredictor>(mode, 0.05));
    ht::HybridStrategy* hybrid = strategy.get();
    run.trainer->set_strategy(std::move(strategy));
    std::vector<double> curve;
    for (int64_t i = 0; i < steps; i += 50) {
      run_steps(*run.trainer, 50);
      curve.push_back(run.val_loss());
    }
    const auto& s = hybrid->summary();
    EXPECT_EQ(s.accepted, 0);
    EXPECT_EQ(s.rollbacks, s.phases_predict);
    EXPECT_LE(s.phases_predict, 8);  // holds back off: few probes
    EXPECT_NEAR(curve.back() / plain_curve.back(), 1.0, 0.05);
    EXPECT_LE(steps_to_target(curve), plain_steps * 105 / 100 + 50);
  }
}

TEST(HybridStrategy, TensorMemoryStaysFlatAcrossPredictAndRollbackCycles) {
  toy::MlpRun run(700);
  run.trainer->set_strategy(std::make_unique<ht::HybridStrategy>(
      toy_options("ema"), std::make_unique<SabotagedPredictor>(SabotagedPredictor::Mode::AlternatePhases)));
  const auto recs = run_steps(*run.trainer, 700);
  int64_t lo = INT64_MAX, hi = 0;
  for (size_t i = 100; i < recs.size(); ++i) {
    lo = std::min(lo, recs[i].tensor_bytes);
    hi = std::max(hi, recs[i].tensor_bytes);
  }
  int64_t rollbacks = 0, kept = 0;
  for (const auto& r : recs) {
    rollbacks += r.extra.at("rolled_back") == 1.0;
    kept += r.phase == "predict";
  }
  EXPECT_GE(rollbacks, 10);
  EXPECT_GE(kept, 50);
  EXPECT_EQ(hi, lo) << "tensor bytes moved between " << lo << " and " << hi;
  EXPECT_GT(lo, 0);
}

TEST(HybridStrategy, BatchVerificationAcceptsGoodAndRejectsBadPredictions) {
  ht::HybridOptions o = toy_options("ema");
  o.verify = "batch";
  {
    toy::BowlRun run(100);
    auto strategy = std::make_unique<ht::HybridStrategy>(o);
    ht::HybridStrategy* hybrid = strategy.get();
    run.trainer->set_strategy(std::move(strategy));
    const auto recs = run_steps(*run.trainer, 100);
    EXPECT_GT(hybrid->summary().share_predicted(), 0.3);
    EXPECT_EQ(hybrid->summary().rollbacks, 0);
    for (const auto& r : recs)
      if (r.phase == "predict") EXPECT_TRUE(std::isfinite(r.loss));  // its own batch's loss
  }
  {
    toy::BowlRun run(100);
    auto strategy = std::make_unique<ht::HybridStrategy>(
        o, std::make_unique<SabotagedPredictor>(SabotagedPredictor::Mode::Noise, 1e3));
    ht::HybridStrategy* hybrid = strategy.get();
    run.trainer->set_strategy(std::move(strategy));
    run_steps(*run.trainer, 100);
    EXPECT_EQ(hybrid->summary().accepted, 0);
    EXPECT_GE(hybrid->summary().rollbacks, 2);
    EXPECT_TRUE(std::isfinite(run.loss()));
  }
}

TEST(HybridStrategy, ResumeInTheMiddleOfAPredictPhaseIsBitExact) {
  const auto path = std::filesystem::temp_directory_path() / "ht_hybrid_resume_test.ht";
  for (const std::string name : {"ema", "dmd", "rssm"}) {
    ht::HybridOptions o = toy_options(name);
    o.verify_every = 3;
    o.max_predict_steps = 16;
    const int64_t total = 160;
    toy::MlpRun a(total, 3e-3, 1);
    auto sa = std::make_unique<ht::HybridStrategy>(o);
    ht::HybridStrategy* ha = sa.get();
    a.trainer->set_strategy(std::move(sa));
    // Train until a predict phase is under way with a verified point behind it.
    int64_t saved_at = 0;
    while (a.trainer->step() < total) {
      a.trainer->train_step();
      const auto& c = ha->controller();
      if (a.trainer->step() > 60 && c.phase() == ht::Phase::Predict && c.steps_in_phase() >= 4 &&
          c.steps_in_phase() + 1 < c.horizon()) {
        a.trainer->save_checkpoint(path.string());
        saved_at = a.trainer->step();
        break;
      }
    }
    ASSERT_GT(saved_at, 0) << name << ": no predict phase long enough";
    run_steps(*a.trainer, total - saved_at);

    toy::MlpRun b(total, 3e-3, 99);  // another init: everything must come from the checkpoint
    auto sb = std::make_unique<ht::HybridStrategy>(o);
    ht::HybridStrategy* hb = sb.get();
    b.trainer->set_strategy(std::move(sb));
    b.trainer->load_checkpoint(path.string());
    EXPECT_EQ(hb->controller().phase(), ht::Phase::Predict) << name;
    run_steps(*b.trainer, total - saved_at);

    EXPECT_TRUE(toy::all_equal(a.optimizer->parameters(), b.optimizer->parameters())) << name;
    EXPECT_EQ(ha->summary().predicted_applied, hb->summary().predicted_applied) << name;
    EXPECT_EQ(ha->summary().rollbacks, hb->summary().rollbacks) << name;
    EXPECT_DOUBLE_EQ(ha->controller().confidence(), hb->controller().confidence()) << name;
  }
  std::filesystem::remove(path);
}

TEST(HybridStrategy, RssmRunsEndToEndAndReportsItsForecasts) {
  toy::MlpRun run(300);
  ht::HybridOptions o = toy_options("rssm");
  auto strategy = std::make_unique<ht::HybridStrategy>(o);
  ht::HybridStrategy* hybrid = strategy.get();
  run.trainer->set_strategy(std::move(strategy));
  const double start = run.val_loss();
  const auto recs = run_steps(*run.trainer, 300);
  EXPECT_LT(run.val_loss(), 0.5 * start);
  EXPECT_GT(hybrid->summary().phases_predict, 0);
  for (const auto& r : recs) {
    if (r.phase != "predict") continue;
    EXPECT_TRUE(std::isfinite(r.extra.at("predicted_loss")));
  }
  EXPECT_GT(hybrid->predictor().state_bytes(), 0);
}

TEST(HybridStrategy, FitReportsTheSummaryOnFinish) {
  toy::BowlRun run(80);
  auto strategy = std::make_unique<ht::HybridStrategy>(toy_options("ema"));
  ht::HybridStrategy* hybrid = strategy.get();
  run.trainer->set_strategy(std::move(strategy));
  run.trainer->fit();
  EXPECT_TRUE(has_message(run.logger, "hybrid summary (ema)"));
  const auto& s = hybrid->summary();
  EXPECT_EQ(s.steps, 80);
  EXPECT_EQ(s.steps_by_phase[0] + s.steps_by_phase[1] + s.steps_by_phase[2] + s.steps_by_phase[3], 80);
  EXPECT_EQ(s.predicted_applied, s.steps_by_phase[2]);
  EXPECT_GT(s.snapshot_bytes, 0);
  EXPECT_GE(s.snapshot_bytes_copied, s.snapshot_bytes * s.phases_predict);
  EXPECT_GT(s.final_horizon, 0);
}

TEST(HybridStrategy, RejectsInvalidOptionsAtConstruction) {
  ht::HybridOptions o;
  o.verify_every = 0;
  EXPECT_THROW(ht::make_hybrid_strategy(o), std::invalid_argument);
}
