// Nowcast mode on toy problems with nowcasters known to be good or bad: the schedule, jumps kept
// and undone bit-exactly, a run whose jumps all fail equal to plain, resume mid-period, bad options.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <filesystem>
#include <sstream>

#include "hybrid/core/errors.h"
#include "hybrid/hybrid/nowcast_strategy.h"
#include "hybrid/hybrid/nowcaster_registry.h"
#include "hybrid/hybrid/predictor_registry.h"
#include "hybrid/nowcast_cost.h"
#include "hybrid/plain_trend.h"
#include "support/scratch_dir.h"
#include "toy_problems.h"

namespace {

// A nowcaster whose prediction the test writes: out[i] = rule(states[i], k), and which keeps what
// it was given (horizons and, optionally, copies of the states) for the test to check.
class ScriptedNowcaster : public ht::NowcastModel {
 public:
  using Rule = std::function<at::Tensor(const std::vector<at::Tensor>& states, int64_t k)>;
  ScriptedNowcaster(ht::NowcastSpec spec, Rule rule, std::vector<int64_t>* horizons,
                    std::vector<std::vector<at::Tensor>>* seen)
      : NowcastModel(std::move(spec)), rule_(std::move(rule)), horizons_(horizons), seen_(seen) {}
  std::string name() const override { return "scripted"; }
  int64_t max_horizon() const override { return 40; }

 protected:
  void predict_checked(const std::vector<std::vector<at::Tensor>>& states, int64_t k,
                       const std::vector<at::Tensor>& out) override {
    if (horizons_) horizons_->push_back(k);
    if (seen_) {
      std::vector<at::Tensor> copy;
      for (const auto& s : states[0]) copy.push_back(s.clone());
      seen_->push_back(copy);  // the first parameter's 5 states
    }
    for (size_t i = 0; i < out.size(); ++i) out[i].copy_(rule_(states[i], k));
  }

 private:
  Rule rule_;
  std::vector<int64_t>* horizons_;
  std::vector<std::vector<at::Tensor>>* seen_;
};

ht::NowcasterFactory scripted(ScriptedNowcaster::Rule rule, std::vector<int64_t>* horizons = nullptr,
                              std::vector<std::vector<at::Tensor>>* seen = nullptr) {
  return [=](const ht::NowcastSpec& spec) {
    return std::make_unique<ScriptedNowcaster>(spec, rule, horizons, seen);
  };
}

// Known good on the bowl (minimum at w = 1): halfway from the current weights to the minimum.
at::Tensor halfway_to_one(const std::vector<at::Tensor>& s, int64_t) { return s[4] + 0.5 * (1.0 - s[4]); }
// Gains nothing: the weights where they are (the jump's step is lost, nothing else).
at::Tensor stay(const std::vector<at::Tensor>& s, int64_t) { return s[4].clone(); }
// Known bad anywhere: every weight pushed by +3.
at::Tensor push_away(const std::vector<at::Tensor>& s, int64_t) { return s[4] + 3.0; }
// Plausible on a descent: the drift over the 4 recorded intervals, continued k / 8 of the way.
at::Tensor continue_drift(const std::vector<at::Tensor>& s, int64_t k) {
  return s[4] + (s[4] - s[0]) * (static_cast<double>(k) / 8.0);
}

ht::NowcastStrategyOptions options(int64_t period, int64_t horizon_max) {
  ht::NowcastStrategyOptions o;
  o.period = period;
  o.horizon_max = horizon_max;
  o.prediction_ms_per_scalar = 0.0;  // the scripted predictions are free: budgets count windows only
  return o;
}

std::vector<at::Tensor> params_of(toy::MlpRun& run) { return run.optimizer->parameters(); }

// The bowl at a small rate (plain's loss falls ~1.6 % a step early on) with delayed verification:
// period 20 (a state every 4 steps), each jump judged 3 real steps after it, `change` the rest.
std::unique_ptr<toy::BowlRun> slow_bowl(int64_t steps, ScriptedNowcaster::Rule rule,
                                        const std::function<void(ht::NowcastStrategyOptions&)>& change) {
  ht::NowcastStrategyOptions o = options(20, 8);
  o.verify_after = 3;
  o.redo_budget = 0;
  change(o);
  auto run = std::make_unique<toy::BowlRun>(steps, 0.01);
  run->trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(std::move(rule))));
  return run;
}

const ht::NowcastSummary& summary_of(toy::BowlRun& run) {
  return dynamic_cast<ht::NowcastStrategy*>(run.trainer->strategy())->summary();
}

// A strategy's saved state as an older version wrote it: the same scalars and tensors, less the
// keys `dropped` says a later version added.
void save_as_older(const ht::StepStrategy& strategy, const std::function<bool(const std::string&)>& dropped,
                   torch::serialize::InputArchive& older_in) {
  torch::serialize::OutputArchive full;
  strategy.save(full);
  std::ostringstream bytes;
  full.save_to(bytes);
  torch::serialize::InputArchive saved;
  std::istringstream in(bytes.str());
  saved.load_from(in);
  torch::serialize::OutputArchive older;
  int64_t copied = 0;
  for (const std::string& key : saved.keys()) {
    if (dropped(key)) continue;
    c10::IValue v;
    at::Tensor t;
    if (saved.try_read(key, v)) {
      older.write(key, v);
    } else {
      ASSERT_TRUE(saved.try_read(key, t, true)) << key;
      older.write(key, t, true);
    }
    ++copied;
  }
  ASSERT_GT(copied, 10);
  std::ostringstream older_bytes;
  older.save_to(older_bytes);
  std::istringstream older_stream(older_bytes.str());
  older_in.load_from(older_stream);
}

}  // namespace

TEST(NowcastStrategy, ScheduleIsNiNosDecayingHorizon) {
  // optim/nino.py: np.linspace(40 ** 0.5, 1, 10) ** 2, rounded (half to even).
  EXPECT_EQ(ht::nowcast_horizons(options(1000, 40), 10000), (std::vector<int64_t>{40, 33, 26, 21, 16, 11, 8, 5, 3, 1}));
  EXPECT_EQ(ht::nowcast_horizons(options(1000, 40), 6000), (std::vector<int64_t>{40, 28, 18, 10, 4, 1}));
  EXPECT_EQ(ht::nowcast_horizons(options(20, 8), 100), (std::vector<int64_t>{8, 6, 4, 2, 1}));
  ht::NowcastStrategyOptions constant = options(1000, 5);
  constant.horizon_min = 5;
  EXPECT_EQ(ht::nowcast_horizons(constant, 3000), (std::vector<int64_t>{5, 5, 5}));
  EXPECT_EQ(ht::nowcast_horizons(options(1000, 40), 500), (std::vector<int64_t>{40}));  // shorter than a period
}

TEST(NowcastStrategy, HorizonsBySchedulePayForTheRatePlainWillHaveAhead) {
  // Warmup 100 + cosine to 0.1 over 10k steps, NiNo's k: each k x 200 steps of plain ahead, in
  // intervals of the pace the five states before the jump were recorded at (computed
  // independently, in Python, from the schedule's formula).
  ht::LrSchedule cosine;
  cosine.kind = ht::LrSchedule::Kind::Cosine;
  cosine.warmup_steps = 100;
  cosine.total_steps = 10000;
  const std::vector<int64_t> nino = ht::nowcast_horizons(options(1000, 40), 10000);
  EXPECT_EQ(ht::schedule_horizons(nino, cosine, 1000), (std::vector<int64_t>{22, 18, 14, 12, 9, 7, 5, 3, 2, 1}));
  ht::LrSchedule constant;
  constant.total_steps = 10000;
  EXPECT_EQ(ht::schedule_horizons(nino, constant, 1000), nino);
  // Warmup to step 500: the first jump's states were recorded partly below the rate ahead (k x
  // 1.2), but a jump never goes further than k.
  constant.warmup_steps = 500;
  EXPECT_EQ(ht::schedule_horizons(nino, constant, 1000)[0], 40);
}

TEST(NowcastStrategy, AJumpUnderADecayingRateIsAskedForThePaceAhead) {
  // The bowl over 20 steps under cosine: the first jump's k = 8 (16 steps of plain ahead) is
  // 2 intervals at the pace of steps 2-9 (Python: 2.29); the second's k = 1 stays 1.
  std::vector<int64_t> horizons;
  toy::BowlRun run(20, 0.1, false, ht::LrSchedule::Kind::Cosine);
  ht::NowcastStrategyOptions o = options(10, 8);
  o.horizon_by_schedule = true;
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(halfway_to_one, &horizons)));
  for (int i = 0; i < 20; ++i) run.trainer->train_step();
  EXPECT_EQ(horizons, (std::vector<int64_t>{2, 1}));
  const auto& s = dynamic_cast<ht::NowcastStrategy*>(run.trainer->strategy())->summary();
  ASSERT_FALSE(s.jump_log.empty());
  EXPECT_NE(s.jump_log[0].find("k 2 (4 steps ahead at the states' pace)"), std::string::npos) << s.jump_log[0];
  // Off, the same run asks for NiNo's k.
  horizons.clear();
  toy::BowlRun nino(20, 0.1, false, ht::LrSchedule::Kind::Cosine);
  nino.trainer->set_strategy(ht::make_nowcast_strategy(options(10, 8), scripted(halfway_to_one, &horizons)));
  for (int i = 0; i < 20; ++i) nino.trainer->train_step();
  EXPECT_EQ(horizons, (std::vector<int64_t>{8, 1}));
}

TEST(NowcastStrategy, RecordsEveryFifthOfAPeriodAndKeepsAGoodJump) {
  // Period 10: states after 1, 3, 5, 7, 9 updates (recorded before steps 2, 4, 6, 8, 10), and
  // step 10 is the jump instead of an update.
  std::vector<int64_t> horizons;
  std::vector<std::vector<at::Tensor>> seen;
  toy::BowlRun run(20, 0.1);
  run.trainer->set_strategy(ht::make_nowcast_strategy(options(10, 4), scripted(halfway_to_one, &horizons, &seen)));
  toy::BowlRun plain(9, 0.1);
  std::vector<at::Tensor> trajectory = {plain.bowl->w.detach().clone()};
  for (int i = 0; i < 9; ++i) {
    plain.trainer->train_step();
    trajectory.push_back(plain.bowl->w.detach().clone());
  }
  for (int i = 0; i < 9; ++i) EXPECT_EQ(run.trainer->train_step().phase, ht::Phase::Full);
  const double loss_before = run.loss();
  const ht::StepRecord jump = run.trainer->train_step();
  EXPECT_EQ(jump.phase, ht::Phase::Predict);
  EXPECT_EQ(jump.step, 10);
  EXPECT_EQ(jump.extra.at("accepted"), 1.0);
  EXPECT_EQ(jump.extra.at("horizon"), 4.0);
  ASSERT_EQ(seen.size(), 1u);
  for (int t = 0; t < 5; ++t) EXPECT_TRUE(torch::equal(seen[0][t], trajectory[2 * t + 1])) << "state " << t;
  EXPECT_TRUE(torch::equal(run.bowl->w, trajectory[9] + 0.5 * (1.0 - trajectory[9])));  // exactly the prediction
  EXPECT_NEAR(run.loss(), 0.25 * loss_before, 1e-6 * loss_before);
  for (int i = 0; i < 10; ++i) run.trainer->train_step();
  auto* s = dynamic_cast<ht::NowcastStrategy*>(run.trainer->strategy());
  EXPECT_EQ(s->summary().jumps, 2);
  EXPECT_EQ(s->summary().kept, 2);
  EXPECT_EQ(s->summary().recorded_states, 10);
  EXPECT_EQ(horizons, (std::vector<int64_t>{4, 1}));  // 2 jumps over 20 steps: 4 -> 1
}

TEST(NowcastStrategy, HorizonSearchKeepsTheBestHorizonOnTheProbe) {
  // One jump over 10 steps: the schedule's k is horizon_max, 8. This nowcaster is best at k 4
  // (it lands on the bowl's minimum), useless at 8: of the tried 8, 4 and 2 the probe picks 4,
  // and the weights are predicted again for it (it was not the last tried).
  std::vector<int64_t> horizons;
  auto best_at_four = [](const std::vector<at::Tensor>& s, int64_t k) {
    return s[4] + (1.0 - s[4]) * (1.0 - std::abs(static_cast<double>(k) - 4.0) / 4.0);
  };
  ht::NowcastStrategyOptions o = options(10, 8);
  o.horizon_search = 3;
  toy::BowlRun run(10, 0.1);
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(best_at_four, &horizons)));
  run.trainer->fit();
  EXPECT_EQ(horizons, (std::vector<int64_t>{8, 4, 2, 4}));
  EXPECT_TRUE(torch::allclose(run.bowl->w, torch::ones_like(run.bowl->w)));
  EXPECT_EQ(run.logger.steps.back().extra.at("horizon"), 4.0);
  o.verify = false;
  EXPECT_THROW(ht::make_nowcast_strategy(o, scripted(best_at_four)), ht::OptionsError);
}

TEST(NowcastStrategy, BadJumpsAreUndoneAndTheRunIsPlainBitForBit) {
  // Every jump raises the probe loss: each is undone, its step becomes the real step plain
  // takes there (the probe is peeked, so the data order is plain's), the horizon cap halves and
  // after two failures in a row jumps are skipped, 1, 3, ... of them.
  std::vector<int64_t> horizons;
  toy::MlpRun run(200), plain(200);
  ht::NowcastStrategyOptions o = options(10, 8);
  o.horizon_min = 8;  // constant 8, so the cap is what shrinks it
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away, &horizons)));
  run.trainer->fit();
  plain.trainer->fit();
  EXPECT_TRUE(toy::all_equal(params_of(run), params_of(plain)));
  EXPECT_EQ(run.trainer->step(), plain.trainer->step());
  auto* s = dynamic_cast<ht::NowcastStrategy*>(run.trainer->strategy());
  // 20 periods: fail (k 8), fail (4), skip 1, fail (2), skip 3, fail (1), skip 7, fail (1), then
  // 15 to skip, of which 4 come before the end.
  EXPECT_EQ(horizons, (std::vector<int64_t>{8, 4, 2, 1, 1}));
  EXPECT_EQ(s->summary().jumps, 5);
  EXPECT_EQ(s->summary().undone, 5);
  EXPECT_EQ(s->summary().kept, 0);
  EXPECT_EQ(s->summary().skipped, 15);
}

TEST(NowcastStrategy, AToleranceByHorizonGivesFarJumpsAllOfItAndShortOnesLittle) {
  // Every jump raises the loss by 5 %: within a 10 % tolerance at the schedule's first k = 8 (all
  // of it), not at its last, k = 1 (an eighth of it) - unless the tolerance is flat.
  auto five_percent_up = [](const std::vector<at::Tensor>& s, int64_t) { return 1.0 + (s[4] - 1.0) * std::sqrt(1.05); };
  for (const bool by_horizon : {false, true}) {
    std::vector<int64_t> horizons;
    ht::NowcastStrategyOptions o = options(10, 8);
    o.tolerance = 0.1;
    o.tolerance_by_horizon = by_horizon;
    toy::BowlRun run(20, 0.1);
    run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(five_percent_up, &horizons)));
    run.trainer->fit();
    const auto& summary = dynamic_cast<ht::NowcastStrategy*>(run.trainer->strategy())->summary();
    EXPECT_EQ(horizons, (std::vector<int64_t>{8, 1})) << "by_horizon " << by_horizon;
    EXPECT_EQ(summary.kept, by_horizon ? 1 : 2) << "by_horizon " << by_horizon;
    EXPECT_EQ(summary.undone, by_horizon ? 1 : 0) << "by_horizon " << by_horizon;
  }
}

TEST(NowcastStrategy, AnUndoneJumpRestoresTheWeightsExactly) {
  toy::MlpRun run(40), plain(40);
  run.trainer->set_strategy(ht::make_nowcast_strategy(options(20, 4), scripted(push_away)));
  for (int i = 0; i < 19; ++i) {
    run.trainer->train_step();
    plain.trainer->train_step();
  }
  const auto before = toy::clone_all(params_of(run));
  const ht::StepRecord r = run.trainer->train_step();  // the jump, undone, then a real step
  EXPECT_EQ(r.extra.at("accepted"), 0.0);
  EXPECT_EQ(r.phase, ht::Phase::Full);
  EXPECT_GT(r.extra.at("probe_after"), r.extra.at("probe_before"));
  plain.trainer->train_step();
  EXPECT_TRUE(toy::all_equal(params_of(run), params_of(plain)));
  EXPECT_FALSE(toy::all_equal(params_of(run), before));
}

TEST(NowcastStrategy, WithoutVerificationAJumpIsKeptWhateverItDoes) {
  toy::MlpRun run(20);
  ht::NowcastStrategyOptions o = options(20, 4);
  o.verify = false;
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away)));
  for (int i = 0; i < 19; ++i) run.trainer->train_step();
  const auto before = toy::clone_all(params_of(run));
  const ht::StepRecord r = run.trainer->train_step();
  EXPECT_EQ(r.extra.at("accepted"), 1.0);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(params_of(run)[i], before[i] + 3.0));
  // A prediction that is not finite is undone even so.
  toy::MlpRun nan_run(20);
  nan_run.trainer->set_strategy(ht::make_nowcast_strategy(
      o, scripted([](const std::vector<at::Tensor>& s, int64_t) { return s[4] * NAN; })));
  for (int i = 0; i < 20; ++i) nan_run.trainer->train_step();
  for (const auto& p : params_of(nan_run)) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
}

TEST(NowcastStrategy, NoJumpIsMadeAfterTheLastJumpStep) {
  // Unverified jumps every 20 steps over 100: at 20, 40, 60, 80, 100; with the last at step 45,
  // only the first two are made, and the rest of the run is real steps.
  toy::MlpRun run(100);
  ht::NowcastStrategyOptions o = options(20, 4);
  o.verify = false;
  o.last_jump_step = 45;
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away)));
  std::vector<int64_t> jumped_at;
  for (int i = 0; i < 100; ++i)
    if (run.trainer->train_step().extra.count("accepted")) jumped_at.push_back(run.trainer->step());
  EXPECT_EQ(jumped_at, (std::vector<int64_t>{20, 40}));
  const auto& summary = dynamic_cast<ht::NowcastStrategy*>(run.trainer->strategy())->summary();
  EXPECT_EQ(summary.jumps, 2);
  EXPECT_EQ(summary.steps, 100);
  EXPECT_NE(summary.to_string().find("step 60: not made (after nowcast.last_jump_step = 45)"), std::string::npos);
}

TEST(NowcastStrategy, NoJumpIsMadeAfterTheLastJumpFractionOfTheRun) {
  // Unverified jumps every 20 steps; 0.45 of a 100-step run is step 45 (jumps at 20 and 40), and
  // of a 200-step run step 90 (20 ... 80), whatever the rate does; nowcast.schedule_steps, where
  // set, is the run the share is of.
  const auto jumps_under = [](int64_t steps, double fraction, int64_t schedule_steps) {
    toy::MlpRun run(steps);
    ht::NowcastStrategyOptions o = options(20, 4);
    o.verify = false;
    o.last_jump_fraction = fraction;
    o.schedule_steps = schedule_steps;
    run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away)));
    std::vector<int64_t> jumped_at;
    for (int64_t i = 0; i < steps; ++i)
      if (run.trainer->train_step().extra.count("accepted")) jumped_at.push_back(run.trainer->step());
    const auto& summary = dynamic_cast<ht::NowcastStrategy*>(run.trainer->strategy())->summary();
    return std::make_pair(jumped_at, summary.to_string());
  };
  const auto [short_run, short_log] = jumps_under(100, 0.45, 0);
  EXPECT_EQ(short_run, (std::vector<int64_t>{20, 40}));
  EXPECT_NE(short_log.find("step 60: not made (after step 45 = nowcast.last_jump_fraction 0.45 x 100)"), std::string::npos)
      << short_log;
  EXPECT_EQ(jumps_under(200, 0.45, 0).first, (std::vector<int64_t>{20, 40, 60, 80}));
  EXPECT_EQ(jumps_under(100, 0.45, 200).first, (std::vector<int64_t>{20, 40, 60, 80}));
  EXPECT_EQ(jumps_under(100, 0.0, 0).first.size(), 5u);
}

TEST(NowcastStrategy, AScaledJumpMovesTheWeightsByThatShareOfThePrediction) {
  toy::MlpRun run(20);
  ht::NowcastStrategyOptions o = options(20, 4);
  o.verify = false;
  o.jump_scale = 0.25;
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away)));
  for (int i = 0; i < 19; ++i) run.trainer->train_step();
  const auto before = toy::clone_all(params_of(run));
  EXPECT_EQ(run.trainer->train_step().extra.at("accepted"), 1.0);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::allclose(params_of(run)[i], before[i] + 0.75));
}

TEST(NowcastStrategy, ANormScaledJumpKeepsThePredictedDirectionAtTheScaledNorm) {
  for (const double s : {0.0, 0.5}) {
    toy::MlpRun run(20);
    ht::NowcastStrategyOptions o = options(20, 4);
    o.verify = false;
    o.jump_norm_scale = s;
    run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away)));
    for (int i = 0; i < 19; ++i) run.trainer->train_step();
    const auto before = toy::clone_all(params_of(run));
    EXPECT_EQ(run.trainer->train_step().extra.at("accepted"), 1.0);
    for (size_t i = 0; i < before.size(); ++i) {
      const at::Tensor predicted = before[i] + 3.0;  // push_away's prediction
      const double n0 = before[i].norm().item<double>(), n1 = predicted.norm().item<double>();
      const at::Tensor expected = predicted * ((n0 + s * (n1 - n0)) / n1);
      EXPECT_TRUE(torch::allclose(params_of(run)[i], expected, 1e-5, 1e-6)) << "scale " << s << ", tensor " << i;
    }
  }
}

TEST(NowcastStrategy, AJumpOverSomeKindsLeavesTheOthersWhereTheOptimizerLeftThem) {
  toy::MlpRun run(20);
  ht::NowcastStrategyOptions o = options(20, 4);
  o.verify = false;
  o.jump_kinds = "bias";
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away)));
  for (int i = 0; i < 19; ++i) run.trainer->train_step();
  const auto before = toy::clone_all(params_of(run));
  EXPECT_EQ(run.trainer->train_step().extra.at("accepted"), 1.0);
  int64_t moved = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    const bool bias = params_of(run)[i].dim() == 1;  // the toy MLP: 2-D weights, 1-D biases
    EXPECT_TRUE(torch::equal(params_of(run)[i], bias ? before[i] + 3.0 : before[i])) << i;
    moved += bias;
  }
  EXPECT_GT(moved, 0);
}

TEST(NowcastStrategy, ResumeInTheMiddleOfARecordingPeriodIsBitExact) {
  // Period 20 (a state every 4 steps); the checkpoint at step 30 holds 2 of the period's states.
  // Jumps are kept unverified, so the states restored from the checkpoint decide the weights.
  const ht::testing::ScratchDir scratch;
  const std::string path = scratch.file("nowcast.ht");
  ht::NowcastStrategyOptions o = options(20, 8);
  o.verify = false;
  toy::MlpRun straight(60);
  straight.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(continue_drift)));
  straight.trainer->fit();

  toy::MlpRun first(60);
  first.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(continue_drift)));
  for (int i = 0; i < 30; ++i) first.trainer->train_step();
  first.trainer->save_checkpoint(path);
  toy::MlpRun second(60);
  second.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(continue_drift)));
  second.trainer->load_checkpoint(path);
  EXPECT_EQ(second.trainer->step(), 30);
  second.trainer->fit();
  EXPECT_TRUE(toy::all_equal(params_of(second), params_of(straight)));
  auto* a = dynamic_cast<ht::NowcastStrategy*>(straight.trainer->strategy());
  auto* b = dynamic_cast<ht::NowcastStrategy*>(second.trainer->strategy());
  EXPECT_EQ(a->summary().kept, 3);
  EXPECT_EQ(b->summary().kept, 3);
  EXPECT_EQ(b->summary().recorded_states, a->summary().recorded_states);

  // Another period does not resume it.
  toy::MlpRun other(60);
  other.trainer->set_strategy(ht::make_nowcast_strategy(options(40, 8), scripted(continue_drift)));
  EXPECT_THROW(other.trainer->load_checkpoint(path), ht::CheckpointMismatch);
}

TEST(NowcastStrategy, TheReleasedWnnPlusJumpsAToyMlp) {
  // The registry's loader with the vendored weights, end to end on a model it never saw.
  ht::NowcastStrategyOptions o = options(50, 40);
  o.weights = std::string(HT_SOURCE_DIR) + "/models/nino/nino_mlp.safetensors";
  toy::MlpRun run(200);
  run.trainer->set_strategy(ht::make_nowcast_strategy(o));
  run.trainer->fit();
  auto* s = dynamic_cast<ht::NowcastStrategy*>(run.trainer->strategy());
  EXPECT_EQ(s->summary().jumps + s->summary().skipped, 4);
  EXPECT_EQ(s->summary().kept + s->summary().undone, s->summary().jumps);
  EXPECT_GT(s->summary().predict_ms, 0.0);
  // 5 recorded states of the parameters, and what WNN+ keeps; the planner's figure is the same
  // 5 copies (as the allocator rounds them) and its 256 KiB allowance for the 0.2 MiB of weights.
  std::vector<int64_t> numels;
  for (const auto& p : params_of(run)) numels.push_back(p.numel());
  const int64_t copies = ht::parameter_copies_bytes(numels, 5);
  EXPECT_GE(s->state_bytes(), 5 * 5313 * 4);
  EXPECT_EQ(ht::nowcast_state_bytes(numels, o), copies + (256 << 10));
  EXPECT_GE(ht::nowcast_state_bytes(numels, o), s->state_bytes() - (64 << 10));
}

TEST(NowcastStrategy, DelayedVerificationJudgesAJumpAfterItsWindowAndKeepsAGoodOne) {
  // Period 20 (a state every 4 steps), judged 3 steps after the jump: the jump at step 20, real
  // steps 21-23 from the predicted weights, the verdict at the start of step 24. Evaluations
  // wait meanwhile (the weights may still go back).
  ht::NowcastStrategyOptions o = options(20, 4);
  o.verify_after = 3;
  o.redo_budget = 0;  // a short run: no limit
  toy::BowlRun run(40);
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(halfway_to_one)));
  auto* s = dynamic_cast<ht::NowcastStrategy*>(run.trainer->strategy());
  for (int i = 0; i < 19; ++i) run.trainer->train_step();
  const ht::StepRecord jump = run.trainer->train_step();
  EXPECT_EQ(jump.phase, ht::Phase::Predict);
  EXPECT_EQ(jump.extra.count("accepted"), 0u);  // not judged yet
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(run.trainer->strategy()->at_verified_point());
    EXPECT_EQ(run.trainer->train_step().extra.count("judged"), 0u);
  }
  const ht::StepRecord verdict = run.trainer->train_step();
  EXPECT_EQ(verdict.step, 24);
  EXPECT_EQ(verdict.extra.at("accepted"), 1.0);
  EXPECT_LT(verdict.extra.at("probe_after"), verdict.extra.at("probe_plain"));
  EXPECT_TRUE(run.trainer->strategy()->at_verified_point());
  EXPECT_EQ(s->summary().kept, 1);
  EXPECT_EQ(s->summary().steps_redone, 0);
  EXPECT_GT(s->state_bytes(), 0);
}

TEST(NowcastStrategy, DelayedVerificationUndoesBadJumpsAndTheRunIsPlainBitForBit) {
  // Every jump is still bad after its window: weights, AdamW's moments and step count, the data
  // cursor and the random state go back, the jump's step is taken as a real one. The schedule
  // backs off as with immediate verification; the run is plain's, and 3 steps per undone jump
  // were thrown away.
  std::vector<int64_t> horizons;
  toy::MlpRun run(200), plain(200);
  ht::NowcastStrategyOptions o = options(20, 8);
  o.horizon_min = 8;
  o.verify_after = 3;
  o.redo_budget = 0;  // no limit: the back-off alone
  for (auto* r : {&run, &plain}) r->configure([](ht::TrainerOptions& to) { to.eval_every = 10; });
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away, &horizons)));
  run.trainer->fit();
  plain.trainer->fit();
  EXPECT_TRUE(toy::all_equal(params_of(run), params_of(plain)));
  EXPECT_EQ(run.trainer->step(), 200);
  auto* s = dynamic_cast<ht::NowcastStrategy*>(run.trainer->strategy());
  // 10 periods: fail (k 8), fail (4), skip 1, fail (2), skip 3, fail (1), 2 of 7 skips left.
  EXPECT_EQ(horizons, (std::vector<int64_t>{8, 4, 2, 1}));
  EXPECT_EQ(s->summary().undone, 4);
  EXPECT_EQ(s->summary().kept, 0);
  EXPECT_EQ(s->summary().skipped, 6);
  EXPECT_EQ(s->summary().steps_redone, 12);
  EXPECT_GT(s->summary().optimizer_snapshot_bytes, 2 * 5313 * 4);  // AdamW's two moments, at least
  // The planner counts the snapshot as two copies of the parameters; the archive adds names and
  // scalars, a few KiB.
  std::vector<int64_t> numels;
  for (const auto& p : params_of(run)) numels.push_back(p.numel());
  ht::NowcastStrategyOptions immediate = o;
  immediate.verify_after = 0;
  const int64_t planned = ht::nowcast_state_bytes(numels, o) - ht::nowcast_state_bytes(numels, immediate);
  EXPECT_EQ(planned, ht::parameter_copies_bytes(numels, 2));
  EXPECT_NEAR(static_cast<double>(s->summary().optimizer_snapshot_bytes), static_cast<double>(planned), 16 << 10);
  // The validation curves agree too: no evaluation scored weights that were later undone.
  ASSERT_EQ(run.logger.evals.size(), 20u);
  ASSERT_EQ(run.logger.evals.size(), plain.logger.evals.size());
  for (size_t i = 0; i < run.logger.evals.size(); ++i) {
    EXPECT_EQ(run.logger.evals[i].step, plain.logger.evals[i].step);
    EXPECT_EQ(run.logger.evals[i].val_loss, plain.logger.evals[i].val_loss);
  }
}

TEST(NowcastStrategy, DelayedVerificationStopsJumpingWhenTheRedoBudgetIsSpent) {
  // 200 steps, 5 % = 10 steps may be redone: 3 failed windows of 3 steps fit, the 4th does not.
  std::vector<int64_t> horizons;
  toy::MlpRun run(200), plain(200);
  ht::NowcastStrategyOptions o = options(20, 8);
  o.horizon_min = 8;
  o.verify_after = 3;
  o.redo_budget = 0.05;
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away, &horizons)));
  run.trainer->fit();
  plain.trainer->fit();
  EXPECT_TRUE(toy::all_equal(params_of(run), params_of(plain)));
  auto* s = dynamic_cast<ht::NowcastStrategy*>(run.trainer->strategy());
  EXPECT_EQ(horizons, (std::vector<int64_t>{8, 4, 2}));
  EXPECT_EQ(s->summary().steps_redone, 9);
  EXPECT_EQ(s->summary().over_budget, 2);  // the 8th and 9th periods' (5-7 were skipped backing off)
  EXPECT_EQ(s->summary().too_late, 1);     // the 10th, at the last step
}

TEST(NowcastStrategy, AJumpWhosePredictionCostsMoreThanTheRedoBudgetIsNotMade) {
  // 200 steps, 5 % = 10 may be spent; a prediction priced at 1 s per scalar is worth far more
  // steps than that, so no jump is made and the run is plain's - and the nowcaster for the
  // network (NiNo's graph, for one) is never built. Priced at 0, the same jumps are made.
  int64_t network_builds = 0;
  auto run_with = [&network_builds](double ms_per_scalar) {
    ht::NowcastStrategyOptions o = options(20, 4);
    o.verify_after = 3;
    o.redo_budget = 0.05;
    o.prediction_ms_per_scalar = ms_per_scalar;
    auto run = std::make_unique<toy::MlpRun>(200);
    const ht::NowcasterFactory bad = scripted(push_away);
    run->trainer->set_strategy(ht::make_nowcast_strategy(o, [&network_builds, bad](const ht::NowcastSpec& spec) {
      network_builds += spec.params.front().shape != std::vector<int64_t>{128, 128};  // not the limits' small layer
      return bad(spec);
    }));
    run->trainer->fit();
    return run;
  };
  auto priced = run_with(1000.0);
  EXPECT_EQ(network_builds, 0);
  toy::MlpRun plain(200);
  plain.trainer->fit();
  EXPECT_TRUE(toy::all_equal(params_of(*priced), params_of(plain)));
  const auto& s = dynamic_cast<ht::NowcastStrategy*>(priced->trainer->strategy())->summary();
  EXPECT_EQ(s.jumps, 0);
  EXPECT_EQ(s.over_budget, 9);  // every period's but the last, which is too late to judge
  ASSERT_FALSE(s.jump_log.empty());
  EXPECT_NE(s.jump_log[0].find("a prediction costs ~"), std::string::npos) << s.jump_log[0];
  auto free = run_with(0.0);
  EXPECT_GT(dynamic_cast<ht::NowcastStrategy*>(free->trainer->strategy())->summary().jumps, 0);
  EXPECT_EQ(network_builds, 1);
}

TEST(NowcastStrategy, APredictionIsPricedByTimingTheNowcasterOnASmallLayer) {
  // The released WNN+ runs a 128-wide MLP on every scalar: ~1.6 us a scalar on one EPYC core.
  const std::string path = std::string(HT_SOURCE_DIR) + "/models/nino/nino_mlp.safetensors";
  const double ms = ht::nowcaster_ms_per_scalar([&](const ht::NowcastSpec& spec) { return ht::load_wnn_plus(path, spec); });
  EXPECT_GT(ms, 1e-5);
  EXPECT_LT(ms, 0.1);
}

TEST(NowcastStrategy, AKeptJumpPaysItsLeadIntoTheRedoBudget) {
  // The bowl at a small rate: plain's loss falls ~1.6 % a step before the first jump (halfway to
  // the minimum: a quarter of the loss), so that jump is worth ~90 of its steps. Every later jump
  // is bad. 200 steps, 2 % = 4 steps may be redone: without the kept jump's lead one failed 3-step
  // window spends the budget; with it, the back-off alone limits the failures (10 periods: kept,
  // fail, fail, skip 1, fail, skip 3, fail, the 10th too late). A resume between the verdict and
  // the next jump keeps the lead.
  const ht::testing::ScratchDir scratch;
  const std::string path = scratch.file("credit.ht");
  auto start = [](bool credit, std::shared_ptr<int> calls) {
    auto first_good = [calls](const std::vector<at::Tensor>& s, int64_t k) {
      return (*calls)++ == 0 ? halfway_to_one(s, k) : push_away(s, k);
    };
    return slow_bowl(200, first_good, [credit](ht::NowcastStrategyOptions& o) {
      o.horizon_min = 8;
      o.redo_budget = 0.02;
      o.redo_credit = credit;
    });
  };
  auto credited = start(true, std::make_shared<int>(0));
  credited->trainer->fit();
  const ht::NowcastSummary s = summary_of(*credited);
  EXPECT_EQ(s.kept, 1);
  EXPECT_EQ(s.undone, 4);
  EXPECT_EQ(s.steps_redone, 12);
  EXPECT_EQ(s.over_budget, 0);
  EXPECT_EQ(s.redo_credit, 32);  // the jump's reach, k 8 x 4 steps, caps the ~90
  EXPECT_NE(s.jump_log[0].find("~32 steps ahead of plain"), std::string::npos) << s.jump_log[0];

  auto uncredited = start(false, std::make_shared<int>(0));
  uncredited->trainer->fit();
  EXPECT_EQ(summary_of(*uncredited).kept, 1);
  EXPECT_EQ(summary_of(*uncredited).undone, 1);
  EXPECT_EQ(summary_of(*uncredited).steps_redone, 3);
  EXPECT_EQ(summary_of(*uncredited).redo_credit, 0);
  EXPECT_EQ(summary_of(*uncredited).over_budget, 7);  // periods 3-9

  auto calls = std::make_shared<int>(0);
  auto first = start(true, calls);
  for (int i = 0; i < 30; ++i) first->trainer->train_step();  // past the verdict at step 24
  first->trainer->save_checkpoint(path);
  auto resumed = start(true, calls);  // the nowcaster has been called once, as in the checkpoint
  resumed->trainer->load_checkpoint(path);
  resumed->trainer->fit();
  EXPECT_EQ(summary_of(*resumed).redo_credit, 32);
  EXPECT_EQ(summary_of(*resumed).steps_redone, 12);
  EXPECT_TRUE(torch::equal(resumed->bowl->w, credited->bowl->w));
}

TEST(NowcastStrategy, AFailedJumpThatStillMadeProgressIsKeptWithItsLagCharged) {
  // A jump that does not move the weights loses its step: after its window (the jump's step and
  // 3 real ones) the bowl is at plain's 22nd step, below the weights it jumped from (19th) but
  // above plain's guess for step 23. Undoing would redo 4 steps to be 1 ahead of that; keeping
  // leaves the run exactly one step behind plain, and charges that lag (by the verdict's
  // extrapolation: above 0, under the window) to the redo budget. Off, the jump is undone. A jump
  // that ends above where it started (+3) is undone either way. A resume keeps the count.
  const ht::testing::ScratchDir scratch;
  const std::string path = scratch.file("behind.ht");
  auto start = [](bool keep_progress, ScriptedNowcaster::Rule rule) {
    return slow_bowl(40, std::move(rule), [keep_progress](ht::NowcastStrategyOptions& o) { o.keep_progress = keep_progress; });
  };
  toy::BowlRun plain(40, 0.01);
  for (int i = 0; i < 22; ++i) plain.trainer->train_step();

  auto kept = start(true, stay);
  for (int i = 0; i < 23; ++i) kept->trainer->train_step();
  EXPECT_TRUE(torch::equal(kept->bowl->w, plain.bowl->w));  // the window ends on plain's 22nd step
  const ht::StepRecord verdict = kept->trainer->train_step();  // step 24 judges the jump at 20
  EXPECT_EQ(verdict.extra.at("accepted"), 1.0);
  EXPECT_EQ(verdict.extra.at("behind"), 1.0);
  EXPECT_LT(verdict.extra.at("probe_after"), verdict.extra.at("probe_before"));
  EXPECT_GT(verdict.extra.at("probe_after"), verdict.extra.at("probe_plain"));
  plain.trainer->train_step();
  EXPECT_TRUE(torch::equal(kept->bowl->w, plain.bowl->w));  // kept: one step behind plain from here on
  ht::NowcastSummary s = summary_of(*kept);
  EXPECT_EQ(s.kept, 1);
  EXPECT_EQ(s.kept_behind, 1);
  EXPECT_EQ(s.undone, 0);
  EXPECT_EQ(s.steps_redone, 0);
  EXPECT_GT(s.steps_behind, 0);
  EXPECT_LT(s.steps_behind, 4);
  EXPECT_NE(s.jump_log[0].find("kept, though behind plain by ~"), std::string::npos) << s.jump_log[0];
  EXPECT_NE(s.to_string().find("1 of them behind plain"), std::string::npos) << s.to_string();

  auto undone = start(false, stay);
  for (int i = 0; i < 24; ++i) undone->trainer->train_step();
  EXPECT_EQ(summary_of(*undone).undone, 1);
  EXPECT_EQ(summary_of(*undone).kept_behind, 0);

  auto worse = start(true, push_away);
  for (int i = 0; i < 24; ++i) worse->trainer->train_step();
  EXPECT_EQ(summary_of(*worse).undone, 1);
  EXPECT_EQ(summary_of(*worse).kept, 0);

  auto first = start(true, stay);
  for (int i = 0; i < 30; ++i) first->trainer->train_step();
  first->trainer->save_checkpoint(path);
  auto resumed = start(true, stay);
  resumed->trainer->load_checkpoint(path);
  EXPECT_EQ(summary_of(*resumed).kept_behind, 1);
  EXPECT_EQ(summary_of(*resumed).steps_behind, summary_of(*first).steps_behind);
}

TEST(NowcastStrategy, APowerFittedToPlainsFirstStatesIsTheVerdictsYardstick) {
  // plain_model = power: at the first jump (step 20) the five states' probe losses (steps 4-20)
  // give b; the verdict carries the pre-jump loss on by (24 / 20)^-b, and a resume keeps b.
  const ht::testing::ScratchDir scratch;
  const std::string path = scratch.file("power.ht");
  auto start = [] { return slow_bowl(40, halfway_to_one, [](ht::NowcastStrategyOptions& o) { o.plain_model = "power"; }); };
  auto run = start();
  for (int i = 0; i < 23; ++i) run->trainer->train_step();
  const ht::StepRecord verdict = run->trainer->train_step();
  const ht::NowcastSummary& s = summary_of(*run);
  ASSERT_TRUE(std::isfinite(s.plain_exponent));
  EXPECT_GT(s.plain_exponent, 0.0);
  EXPECT_NEAR(verdict.extra.at("probe_plain"),
              verdict.extra.at("probe_before") * std::pow(24.0 / 20.0, -s.plain_exponent), 1e-9);
  EXPECT_EQ(verdict.extra.at("accepted"), 1.0);
  ASSERT_GE(s.jump_log.size(), 2u);
  EXPECT_NE(s.jump_log[0].find("at 4, "), std::string::npos) << s.jump_log[0];
  EXPECT_NE(s.jump_log[0].find(": falls as step^-"), std::string::npos) << s.jump_log[0];
  EXPECT_NE(s.jump_log[1].find("plain falling as step^-"), std::string::npos) << s.jump_log[1];
  run->trainer->save_checkpoint(path);
  auto resumed = start();
  resumed->trainer->load_checkpoint(path);
  EXPECT_EQ(summary_of(*resumed).plain_exponent, s.plain_exponent);
}

TEST(NowcastStrategy, ThePowersLevelComesFromSeveralStatesWhenAsked) {
  // power_level_states = 3: plain is carried on from the power curve through the losses of the
  // states at steps 12, 16 and 20 (the bowl's own, read from a plain run of the same trajectory),
  // not from step 20's alone - on this exponential bowl they differ.
  auto run = slow_bowl(40, halfway_to_one, [](ht::NowcastStrategyOptions& o) {
    o.plain_model = "power";
    o.power_level_states = 3;
  });
  for (int i = 0; i < 23; ++i) run->trainer->train_step();
  const ht::StepRecord verdict = run->trainer->train_step();
  const double b = summary_of(*run).plain_exponent;
  ASSERT_TRUE(std::isfinite(b));
  toy::BowlRun plain(40, 0.01);
  std::vector<double> losses;
  for (int step = 1; step <= 20; ++step) {  // the state "at step t" is the weights step t starts from
    if (step % 4 == 0 && step >= 12) losses.push_back(plain.loss());
    plain.trainer->train_step();
  }
  const double level = ht::power_level(losses, {12, 16, 20}, b, 20);
  EXPECT_GT(std::abs(level - losses.back()), 1e-4 * losses.back());
  EXPECT_NEAR(verdict.extra.at("probe_before"), level, 1e-9 * level);
  EXPECT_NEAR(verdict.extra.at("probe_plain"), level * std::pow(24.0 / 20.0, -b), 1e-9 * level);
}

TEST(NowcastStrategy, StateSavedBeforeTheRedoCreditExistedStillLoads) {
  // A checkpoint of an older version has no "redo_credit": it resumes with none paid in, not
  // with an error that would strand the run.
  ht::NowcastStrategyOptions o = options(20, 8);
  o.verify_after = 3;
  o.redo_budget = 0;  // a short run: no limit
  toy::MlpRun run(60);
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away)));
  for (int i = 0; i < 30; ++i) run.trainer->train_step();
  torch::serialize::InputArchive older_in;
  save_as_older(*run.trainer->strategy(), [](const std::string& key) { return key == "redo_credit"; }, older_in);
  toy::MlpRun resumed(60);
  resumed.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away)));
  resumed.trainer->strategy()->load(older_in);
  auto* s = dynamic_cast<ht::NowcastStrategy*>(resumed.trainer->strategy());
  EXPECT_EQ(s->summary().redo_credit, 0);
  EXPECT_EQ(s->summary().undone, 1);  // the rest of the state came through
}

TEST(NowcastStrategy, DelayedVerificationMakesNoJumpItCouldNotJudge) {
  // Period 20 over 40 steps: the jump due at step 40 would have no steps left to judge it in.
  ht::NowcastStrategyOptions o = options(20, 4);
  o.verify_after = 3;
  o.redo_budget = 0;  // a short run: no limit
  toy::BowlRun run(40);
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(halfway_to_one)));
  run.trainer->fit();
  auto* s = dynamic_cast<ht::NowcastStrategy*>(run.trainer->strategy());
  EXPECT_EQ(s->summary().jumps, 1);
  EXPECT_EQ(s->summary().too_late, 1);
  EXPECT_EQ(run.trainer->step(), 40);
  EXPECT_TRUE(run.trainer->strategy()->at_verified_point());
}

namespace {

// A run of `steps` with always-bad jumps, checkpointed after `stop_at` steps inside a window and
// resumed in a fresh trainer, against the same run uninterrupted: weights and jump logs agree.
void expect_resume_inside_a_window_is_bit_exact(const ht::NowcastStrategyOptions& o, int64_t steps, int64_t stop_at) {
  const ht::testing::ScratchDir scratch;
  const std::string path = scratch.file("window.ht");
  toy::MlpRun straight(steps);
  straight.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away)));
  straight.trainer->fit();

  toy::MlpRun first(steps);
  first.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away)));
  for (int64_t i = 0; i < stop_at; ++i) first.trainer->train_step();
  ASSERT_FALSE(first.trainer->strategy()->at_verified_point());
  first.trainer->save_checkpoint(path);
  toy::MlpRun second(steps);
  second.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away)));
  second.trainer->load_checkpoint(path);
  EXPECT_FALSE(second.trainer->strategy()->at_verified_point());
  second.trainer->fit();
  EXPECT_TRUE(toy::all_equal(params_of(second), params_of(straight)));
  auto* a = dynamic_cast<ht::NowcastStrategy*>(straight.trainer->strategy());
  auto* b = dynamic_cast<ht::NowcastStrategy*>(second.trainer->strategy());
  EXPECT_EQ(b->summary().jump_log, a->summary().jump_log);
  EXPECT_EQ(b->summary().steps_redone, a->summary().steps_redone);
  EXPECT_GE(a->summary().undone, 2);
}

}  // namespace

TEST(NowcastStrategy, ResumeInsideADelayedVerificationWindowIsBitExact) {
  // Checkpoint at step 22, inside the window of the jump at 20: the resumed run judges it (the
  // jump is bad: undone from the checkpointed optimizer snapshot, cursor and states) and ends
  // where the uninterrupted run ends.
  ht::NowcastStrategyOptions o = options(20, 8);
  o.verify_after = 3;
  o.redo_budget = 0;  // a short run: no limit
  expect_resume_inside_a_window_is_bit_exact(o, 60, 22);
}

// A window longer than a recording interval: states of the jumped trajectory are recorded inside
// it. Undone, they are recorded again by the redone steps, so every later jump sees plain's
// states at plain's steps - the same as with a window inside one interval.
TEST(NowcastStrategy, AWindowSpanningRecordingsIsUndoneBitForBitWithTheRecordingsRedone) {
  auto run_with = [](int64_t verify_after, std::vector<int64_t>* horizons, std::vector<std::vector<at::Tensor>>* seen) {
    auto run = std::make_unique<toy::MlpRun>(200);
    ht::NowcastStrategyOptions o = options(20, 8);  // a state every 4 steps
    o.horizon_min = 8;
    o.verify_after = verify_after;
    o.redo_budget = 0;
    run->trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away, horizons, seen)));
    run->trainer->fit();
    return run;
  };
  std::vector<int64_t> h_short, h_long;
  std::vector<std::vector<at::Tensor>> seen_short, seen_long;
  auto inside = run_with(3, &h_short, &seen_short);
  auto spanning = run_with(15, &h_long, &seen_long);  // 3 recordings inside each window
  toy::MlpRun plain(200);
  plain.trainer->fit();
  EXPECT_TRUE(toy::all_equal(params_of(*spanning), params_of(plain)));
  EXPECT_EQ(h_long, h_short);
  ASSERT_EQ(seen_long.size(), seen_short.size());
  ASSERT_GE(seen_long.size(), 2u);  // a jump after an undone spanning window
  for (size_t j = 0; j < seen_long.size(); ++j) EXPECT_TRUE(toy::all_equal(seen_long[j], seen_short[j])) << "jump " << j;
  auto* s = dynamic_cast<ht::NowcastStrategy*>(spanning->trainer->strategy());
  EXPECT_EQ(s->summary().steps_redone, 15 * s->summary().undone);
}

TEST(NowcastStrategy, AKeptSpanningWindowKeepsItsRecordingsAndTheNextJumpComesOnTime) {
  // Jump at 20, judged at 35 (recordings at 24, 28, 32 inside), kept; the next jump is at 40.
  std::vector<int64_t> horizons;
  ht::NowcastStrategyOptions o = options(20, 4);
  o.verify_after = 15;
  o.redo_budget = 0;
  toy::BowlRun run(60);
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(halfway_to_one, &horizons)));
  for (int i = 0; i < 35; ++i) run.trainer->train_step();
  EXPECT_FALSE(run.trainer->strategy()->at_verified_point());
  EXPECT_EQ(run.trainer->train_step().extra.at("accepted"), 1.0);
  const ht::StepRecord next = [&] {
    ht::StepRecord r;
    while (run.trainer->step() < 40) r = run.trainer->train_step();
    return r;
  }();
  EXPECT_EQ(next.step, 40);
  EXPECT_EQ(next.phase, ht::Phase::Predict);
  EXPECT_EQ(horizons.size(), 2u);
}

TEST(NowcastStrategy, ResumeInsideASpanningWindowAfterItsRecordingsIsBitExact) {
  // Checkpoint at step 30: the jump at 20 is pending and the window recorded at 24 and 28.
  ht::NowcastStrategyOptions o = options(20, 8);
  o.verify_after = 15;
  o.redo_budget = 0;
  expect_resume_inside_a_window_is_bit_exact(o, 80, 30);
}

TEST(NowcastStrategy, ResumeInsideAWindowJudgedOnATrendOfFourStatesIsBitExact) {
  // A state every 4 steps, judged 5 steps after the jump at 20 (the window records at 24) on the
  // states of steps 8-20: the checkpoint keeps them, before (22) and after (25) that recording.
  ht::NowcastStrategyOptions o = options(20, 8);
  o.verify_after = 5;
  o.trend_states = 4;
  o.redo_budget = 0;
  expect_resume_inside_a_window_is_bit_exact(o, 80, 22);
  expect_resume_inside_a_window_is_bit_exact(o, 80, 25);
}

TEST(NowcastStrategy, TheVerdictFitsTheStatesItIsAskedTo) {
  ht::NowcastStrategyOptions o = options(20, 4);
  o.verify_after = 3;
  o.trend_states = 5;
  o.redo_budget = 0;
  toy::BowlRun run(40);
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(halfway_to_one)));
  for (int i = 0; i < 23; ++i) run.trainer->train_step();  // the jump at 20, judged at 24
  const ht::StepRecord verdict = run.trainer->train_step();
  EXPECT_EQ(verdict.extra.at("accepted"), 1.0);
  auto* s = dynamic_cast<ht::NowcastStrategy*>(run.trainer->strategy());
  ASSERT_EQ(s->summary().jump_log.size(), 1u);
  const std::string& line = s->summary().jump_log[0];
  const size_t at = line.find("by the trend of ");
  ASSERT_NE(at, std::string::npos) << line;
  std::istringstream losses(line.substr(at + 16));
  double l = 0.0;
  int n = 0;
  while (losses >> l) ++n;
  EXPECT_EQ(n, 5) << line;
}

TEST(NowcastStrategy, AWindowSavedBeforeTrendsExistedIsJudgedOnItsTwoStates) {
  // An older version kept only the last two states before a pending jump: resumed with
  // trend_states = 4 it judges on those two instead of failing or reading stale slots.
  ht::NowcastStrategyOptions o = options(20, 8);
  o.verify_after = 5;
  o.trend_states = 4;
  o.redo_budget = 0;
  toy::MlpRun run(60);
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away)));
  for (int i = 0; i < 22; ++i) run.trainer->train_step();
  ASSERT_FALSE(run.trainer->strategy()->at_verified_point());
  torch::serialize::InputArchive older_in;
  save_as_older(*run.trainer->strategy(), [](const std::string& key) {
    return key.rfind("state0_", 0) == 0 || key.rfind("state1_", 0) == 0 || key.rfind("state2_", 0) == 0;
  }, older_in);
  const ht::testing::ScratchDir scratch;
  const std::string path = scratch.file("window.ht");
  run.trainer->save_checkpoint(path);
  toy::MlpRun resumed(60);
  resumed.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(push_away)));
  resumed.trainer->load_checkpoint(path);         // the weights, optimizer, cursor, step
  resumed.trainer->strategy()->load(older_in);     // the strategy's state as the older version kept it
  while (resumed.trainer->step() < 26) resumed.trainer->train_step();
  auto* s = dynamic_cast<ht::NowcastStrategy*>(resumed.trainer->strategy());
  ASSERT_EQ(s->summary().jump_log.size(), 1u);
  EXPECT_NE(s->summary().jump_log[0].find("a recording earlier): undone"), std::string::npos) << s->summary().jump_log[0];
}

TEST(NowcastStrategy, AHeldOutProbeUndoesAJumpThatOnlyFitsTheTrainingData) {
  // Halfway to the training data's minimum: kept when judged on the next training batches,
  // undone when judged on the probe split, right after the jump and after a window alike.
  for (const int64_t window : {0, 3}) {
    for (const bool held_out : {false, true}) {
      ht::NowcastStrategyOptions o = options(20, 4);
      o.verify_after = window;
      o.redo_budget = 0;
      o.probe_holdout = held_out;
      toy::BowlRun run(30, 0.1, /*minimum_from_batch=*/true);
      run.data.probe_batches = 2;
      run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(halfway_to_one)));
      for (int64_t i = 0; i < 19; ++i) run.trainer->train_step();
      const at::Tensor before_jump = run.bowl->w.detach().clone();
      for (int64_t i = 0; i < (window > 0 ? window + 1 : 0); ++i) run.trainer->train_step();
      const ht::StepRecord verdict = run.trainer->train_step();
      ASSERT_EQ(verdict.extra.count("accepted"), 1u) << "window " << window;
      const bool kept = verdict.extra.at("accepted") == 1.0;
      // A delayed verdict comes after the window; an undone jump's step is redone as a real one.
      EXPECT_EQ(verdict.step, window > 0 && kept ? 20 + window + 1 : 20);
      EXPECT_EQ(kept, !held_out) << "window " << window << ", held out " << held_out;
      if (window == 0) {  // the loss before the jump, on the training data's minimum (1) or the held-out one (-1)
        const double minimum = held_out ? -1.0 : 1.0;
        const double expected = (0.5 * run.bowl->lambda * (before_jump - minimum).pow(2)).sum().item<double>();
        EXPECT_NEAR(verdict.extra.at("probe_before"), expected, 1e-5 * expected) << "held out " << held_out;
      }
      // One training batch per real step: a kept jump's step drew none, an undone one's became real.
      EXPECT_EQ(run.data.cursor().position, run.trainer->step() - (kept ? 1 : 0));
    }
  }
  // Asking for a held-out probe of data that holds none is refused at the first step.
  ht::NowcastStrategyOptions o = options(20, 4);
  o.probe_holdout = true;
  o.probe_batches = 3;
  toy::BowlRun run(30, 0.1, /*minimum_from_batch=*/true);
  run.data.probe_batches = 2;
  run.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(halfway_to_one)));
  try {
    run.trainer->train_step();
    ADD_FAILURE() << "no error";
  } catch (const ht::OptionsError& e) {
    EXPECT_NE(std::string(e.what()).find("holds 2 probe batches, a verdict reads probe_batches = 3"), std::string::npos)
        << e.what();
  }
}

TEST(NowcastStrategy, BadOptionsAreErrorsThatNameTheFix) {
  auto error_of = [](const std::function<void(ht::NowcastStrategyOptions&)>& change) {
    ht::NowcastStrategyOptions o = options(1000, 40);
    o.weights = std::string(HT_SOURCE_DIR) + "/models/nino/nino_mlp.safetensors";
    change(o);
    try {
      ht::make_nowcast_strategy(o);
    } catch (const ht::OptionsError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto contains = [](const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; };
  EXPECT_TRUE(contains(error_of([](auto& o) { o.period = 1002; }), "period = 1002: must be a positive multiple of 5"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.model = "gnn"; }), "model = \"gnn\": must be one of \"wnn\", \"nino\""));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.horizon_min = 50; }), "horizon_max = 40: must be >= NowcastStrategyOptions.horizon_min"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.horizon_power = 0; }), "horizon_power = 0: must be > 0"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.tolerance = 2; }), "tolerance = 2: must be in [0, 1]"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.probe_batches = 0; }), "probe_batches = 0"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.architecture = "gpt2"; }), "n_head = 0"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.weights = "/nonexistent/w.safetensors"; }), "cannot read the file"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.weights.clear(); }), "nino_mlp.safetensors"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.verify_after = 800; }), "verify_after = 800: must be in [0, 4 x period / 5 = 800)"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.verify_after = 100, o.verify = false; }), "verify_after needs verify"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.trend_states = 1; }), "trend_states = 1: must be in [2, 5]"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.verify_after = 250, o.trend_states = 5; }),
                       "trend_states = 5: must be in [2, 4] (5 states less the 1 the window of verify_after 250 records over)"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.keep_progress = true; }), "keep_progress needs delayed verification"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.verify_after = 100, o.plain_model = "linear"; }),
                       "plain_model = \"linear\": must be \"trend\" or \"power\""));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.plain_model = "power"; }), "needs delayed verification"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.verify_after = 100, o.power_level_states = 2; }),
                       "power_level_states = 2 needs plain_model = \"power\""));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.verify_after = 250, o.plain_model = "power", o.power_level_states = 5; }),
                       "power_level_states = 5: must be in [1, 4]"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.redo_budget = 1.5; }), "redo_budget = 1.5: must be in [0, 1]"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.last_jump_step = -1; }), "last_jump_step = -1: must be >= 0"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.last_jump_fraction = 1.5; }), "last_jump_fraction = 1.5: must be in [0, 1]"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.jump_scale = 0; }), "jump_scale = 0: must be in (0, 4]"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.jump_norm_scale = 1.5; }), "jump_norm_scale = 1.5: must be in [0, 1]"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.jump_kinds = "weights"; }),
                       "jump_kinds = \"weights\": jump kinds \"weights\": unknown kind"));
  EXPECT_TRUE(contains(error_of([](auto& o) { o.verify_after = 100, o.horizon_search = 3; }), "horizon_search must be 1 with verify_after"));
  EXPECT_EQ(error_of([](auto&) {}), "no error");
  EXPECT_THROW(ht::parse_optimizer_state("zero"), ht::OptionsError);

  // Past the nowcaster's reach: found when it is built, at the first step.
  toy::MlpRun run(10);
  run.trainer->set_strategy(ht::make_nowcast_strategy(options(1000, 41), scripted(continue_drift)));
  EXPECT_THROW(run.trainer->train_step(), ht::OptionsError);

  // An optimizer that cannot reset its state is refused at the first step, not at the first jump.
  toy::MlpRun reset(20);
  ht::NowcastStrategyOptions o = options(20, 4);
  o.optimizer_state = ht::NowcastStrategyOptions::OptimizerState::Reset;
  reset.trainer->set_strategy(ht::make_nowcast_strategy(o, scripted(continue_drift)));
  try {
    reset.trainer->train_step();
    ADD_FAILURE() << "no error";
  } catch (const ht::OptionsError& e) {
    EXPECT_TRUE(contains(e.what(), "nowcast.optimizer_state=keep")) << e.what();
  }
}
