// Tests of our own nowcaster's pieces: the trajectory recorder and corpus file, the WNN+ weights
// writer against the released file, meta-training on a synthetic corpus, the registry entry.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/core/safetensors.h"
#include "hybrid/hybrid/nowcast.h"
#include "hybrid/hybrid/nowcast_meta.h"
#include "hybrid/hybrid/nowcaster_registry.h"
#include "support/scratch_dir.h"

namespace {

const std::string kReleased = std::string(HT_SOURCE_DIR) + "/models/nino/nino_mlp.safetensors";

ht::NowcastSpec small_spec() {
  return ht::nowcast_spec_feedforward({{"fc1.weight", {16, 8}}, {"fc1.bias", {16}}, {"fc2.weight", {4, 16}}});
}

// States of every parameter drifting linearly from a random start with a random per-scalar slope
// (plus a little noise): a trajectory whose future is learnable from its 5 last states.
std::vector<std::vector<at::Tensor>> drifting_states(const ht::NowcastSpec& spec, int64_t T, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<std::vector<at::Tensor>> states(static_cast<size_t>(T));
  for (const auto& p : spec.params) {
    const at::Tensor w0 = torch::randn(p.shape), slope = torch::randn(p.shape) * 0.05;
    for (int64_t t = 0; t < T; ++t) states[t].push_back(w0 + slope * t + torch::randn(p.shape) * 0.002);
  }
  return states;
}

std::vector<ht::Trajectory> drifting_corpus(int64_t runs, int64_t T, uint64_t seed) {
  std::vector<ht::Trajectory> corpus;
  const ht::NowcastSpec spec = small_spec();
  for (int64_t r = 0; r < runs; ++r) {
    ht::TrajectoryRecorder rec(spec, 64, seed + r);
    for (const auto& s : drifting_states(spec, T, seed + 100 + r)) rec.record(s);
    corpus.push_back(rec.take("drift " + std::to_string(r), 1));
  }
  return corpus;
}

ht::MetaTrainOptions small_options() {
  ht::MetaTrainOptions o;
  o.hidden = 32;
  o.steps = 150;
  o.windows = 16;
  o.scalars = 32;
  o.lr = 3e-3;
  return o;
}

TEST(NowcastMeta, RecorderKeepsWholeTensorSumsAndASampleOfScalars) {
  const ht::NowcastSpec spec = ht::nowcast_spec_gpt2({{"h.0.attn.c_attn.weight", {4, 12}}}, 2);
  ht::TrajectoryRecorder rec(spec, 10, 1);
  const at::Tensor w = torch::arange(48, torch::kFloat).reshape({4, 12});
  rec.record({w});
  rec.record({w * 2});
  const ht::Trajectory t = rec.take("qkv", 5);
  ASSERT_EQ(t.tensors.size(), 1u);
  const auto& tt = t.tensors[0];
  EXPECT_EQ(t.states(), 2);
  EXPECT_EQ(tt.numel, 48);
  ASSERT_EQ(tt.values.sizes(), (at::IntArrayRef{2, 10}));
  EXPECT_DOUBLE_EQ(tt.sum[0], 47.0 * 48.0 / 2.0);
  EXPECT_DOUBLE_EQ(tt.sum[1], 47.0 * 48.0);
  EXPECT_DOUBLE_EQ(tt.sumsq[0], (w.to(torch::kDouble) * w.to(torch::kDouble)).sum().item<double>());
  // Values are the recorded scalars; their column (value mod 12) says q (0-3), k (4-7) or v (8-11).
  for (int64_t m = 0; m < 10; ++m) {
    const auto v = static_cast<int64_t>(tt.values[0][m].item<float>());
    EXPECT_FLOAT_EQ(tt.values[1][m].item<float>(), 2.0f * v);
    EXPECT_EQ(tt.kinds[m].item<int64_t>(), 7 + (v % 12) / 4) << "scalar " << v;
  }
  EXPECT_THROW(rec.record({torch::zeros({4, 11})}), ht::NowcastError);  // not the spec's shape
}

TEST(NowcastMeta, CorpusFileRoundTrips) {
  ht::testing::ScratchDir dir;
  const auto corpus = drifting_corpus(2, 7, 3);
  ht::save_trajectories(dir.file("c.safetensors"), corpus);
  const auto back = ht::load_trajectories(dir.file("c.safetensors"));
  ASSERT_EQ(back.size(), 2u);
  for (size_t j = 0; j < 2; ++j) {
    EXPECT_EQ(back[j].task, corpus[j].task);
    EXPECT_EQ(back[j].interval, 1);
    ASSERT_EQ(back[j].tensors.size(), corpus[j].tensors.size());
    for (size_t i = 0; i < corpus[j].tensors.size(); ++i) {
      EXPECT_EQ(back[j].tensors[i].name, corpus[j].tensors[i].name);
      EXPECT_EQ(back[j].tensors[i].numel, corpus[j].tensors[i].numel);
      EXPECT_TRUE(torch::equal(back[j].tensors[i].values, corpus[j].tensors[i].values));
      EXPECT_TRUE(torch::equal(back[j].tensors[i].kinds, corpus[j].tensors[i].kinds));
      EXPECT_EQ(back[j].tensors[i].sum, corpus[j].tensors[i].sum);
      EXPECT_EQ(back[j].tensors[i].sumsq, corpus[j].tensors[i].sumsq);
    }
  }
}

TEST(NowcastMeta, WrittenWeightsHaveTheReleasedNamesAndShapesAndRoundTrip) {
  ht::testing::ScratchDir dir;
  ht::MetaTrainOptions o = small_options();
  o.hidden = 128;
  o.steps = 2;
  const auto result = ht::meta_train_wnn_plus(drifting_corpus(1, 8, 5), o);
  ht::save_wnn_plus(dir.file("w.safetensors"), result.weights, {{"trained_by", "test"}});
  std::map<std::string, std::string> meta;
  const auto back = ht::load_safetensors(dir.file("w.safetensors"), &meta);
  const auto released = ht::load_safetensors(kReleased);
  EXPECT_EQ(meta.at("trained_by"), "test");
  ASSERT_EQ(back.size(), released.size());
  for (const auto& [name, t] : released) {
    ASSERT_TRUE(back.count(name)) << name;
    EXPECT_EQ(back.at(name).sizes(), t.sizes()) << name;
    EXPECT_EQ(back.at(name).scalar_type(), torch::kFloat) << name;
    EXPECT_TRUE(torch::equal(back.at(name), result.weights.at(name))) << name;
  }
}

TEST(NowcastMeta, MetaTrainingLowersTheLossAndBeatsNoJumpOnUnseenRuns) {
  const ht::MetaTrainOptions o = small_options();
  const auto result = ht::meta_train_wnn_plus(drifting_corpus(4, 30, 11), o);
  ASSERT_EQ(static_cast<int64_t>(result.losses.size()), o.steps);
  double first = 0, last = 0;
  for (int i = 0; i < 15; ++i) first += result.losses[i] / 15, last += result.losses[o.steps - 1 - i] / 15;
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
  // On runs it never saw, against the untrained output (zero: predict the last state).
  const auto held = drifting_corpus(2, 30, 77);
  auto none = result.weights;
  none["edge_mlp.fc.6.weight"] = torch::zeros_like(none["edge_mlp.fc.6.weight"]);
  none["edge_mlp.fc.6.bias"] = torch::zeros_like(none["edge_mlp.fc.6.bias"]);
  const double trained = ht::meta_eval_loss(result.weights, held, o, 10, 1);
  const double baseline = ht::meta_eval_loss(none, held, o, 10, 1);
  EXPECT_LT(trained, 0.5 * baseline) << "trained " << trained << " no jump " << baseline;
}

TEST(NowcastMeta, TrainedFileLoadsThroughLoadWnnPlusAndExtrapolates) {
  ht::testing::ScratchDir dir;
  const auto result = ht::meta_train_wnn_plus(drifting_corpus(4, 30, 11), small_options());
  ht::save_wnn_plus(dir.file("own.safetensors"), result.weights);
  const ht::NowcastSpec spec = small_spec();
  auto model = ht::load_wnn_plus(dir.file("own.safetensors"), spec);
  EXPECT_EQ(model->max_horizon(), 40);
  const auto states = drifting_states(spec, 15, 123);
  std::vector<std::vector<at::Tensor>> context(spec.params.size());
  for (size_t i = 0; i < spec.params.size(); ++i)
    for (int t = 5; t < 10; ++t) context[i].push_back(states[t][i]);
  const int64_t k = 4;
  const auto pred = model->predict(context, k);
  double err_pred = 0, err_none = 0;
  for (size_t i = 0; i < spec.params.size(); ++i) {
    err_pred += (pred[i] - states[9 + k][i]).pow(2).mean().item<double>();
    err_none += (states[9][i] - states[9 + k][i]).pow(2).mean().item<double>();
  }
  EXPECT_LT(err_pred, 0.5 * err_none) << "prediction " << err_pred << " last state " << err_none;
}

TEST(NowcastMeta, RegistryListsOurOwnNowcastersAndTheirCommittedWeightsLoad) {
  std::vector<std::string> names;
  for (const auto& s : ht::nowcaster_registry()) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"wnn", "nino", "own", "own-gpt", "own-gpt-loss", "own-words", "wnn-tuned"}));
  const auto states = drifting_states(small_spec(), 5, 9);
  std::vector<std::vector<at::Tensor>> context(3);
  for (size_t i = 0; i < 3; ++i)
    for (int t = 0; t < 5; ++t) context[i].push_back(states[t][i]);
  for (const std::string name : {"own", "own-gpt", "own-gpt-loss", "own-words", "wnn-tuned"}) {
    SCOPED_TRACE(name);
    const ht::NowcasterSpec& own = ht::find_nowcaster(name);
    const std::string path = std::string(HT_SOURCE_DIR) + "/models/" + own.weights_file;
    auto model = own.load(path, small_spec(), {});
    EXPECT_EQ(model->name(), "wnn+");
    EXPECT_EQ(model->max_horizon(), 40);
    for (const auto& p : model->predict(context, 8)) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
  }
}

// A linear least-squares model y = x w trained by plain gradient descent from a random start: its
// weights move steadily toward the solution, so a jump further along their motion lowers the loss.
struct LinearRun {
  at::Tensor x, y, w;  // [64, 8], [64, 4], the model [8, 4] (a leaf with grad)
  ht::LossTuneRun run;
};

std::unique_ptr<LinearRun> linear_run(uint64_t seed, int64_t T) {
  torch::manual_seed(seed);
  auto r = std::make_unique<LinearRun>();
  r->x = torch::randn({64, 8});
  r->y = r->x.mm(torch::randn({8, 4}));
  r->w = torch::randn({8, 4}).requires_grad_(true);
  for (int64_t t = 0; t < T; ++t) {
    for (int step = 0; step < 5; ++step) {
      const at::Tensor loss = (r->x.mm(r->w) - r->y).pow(2).mean();
      loss.backward();
      torch::NoGradGuard no_grad;
      r->w.sub_(r->w.grad() * 0.02);
      r->w.mutable_grad() = at::Tensor();
    }
    r->run.states.push_back({r->w.detach().clone()});
  }
  r->run.spec = ht::nowcast_spec_feedforward({{"fc.weight", {8, 4}}});
  r->run.params = {r->w};
  LinearRun* self = r.get();
  r->run.probe_loss = [self](int64_t) { return (self->x.mm(self->w) - self->y).pow(2).mean(); };
  return r;
}

TEST(NowcastMeta, LossAwareTuningLowersTheLossAtPredictionsOnAnUnseenRun) {
  ht::MetaTrainOptions o = small_options();
  o.steps = 1;  // the start: (almost) the untrained net, which predicts "no jump"
  const auto start = ht::meta_train_wnn_plus(drifting_corpus(1, 8, 5), o).weights;
  ht::LossTuneOptions t;
  t.steps_per_run = 60;
  t.lr = 3e-3;
  t.l1_weight = 0.0;  // the loss alone: the future is not needed
  ht::LossTuner tuner(start, t);
  const ht::LossTuner untuned(start, t);
  for (uint64_t seed : {1, 2, 3}) {
    auto r = linear_run(seed, 12);
    const auto steps = tuner.tune(r->run);
    ASSERT_EQ(steps.size(), 60u);
    EXPECT_TRUE(torch::equal(r->w.detach(), r->run.states.back()[0]));  // left at the run's last state
    EXPECT_FALSE(r->w.grad().defined());
  }
  auto held = linear_run(9, 12);
  const auto before = untuned.score(held->run, 11, 10, 0), after = tuner.score(held->run, 11, 10, 0);
  EXPECT_NEAR(before.loss_pred / before.loss_now, 1.0, 0.05);
  EXPECT_LT(after.loss_pred, 0.5 * after.loss_now) << "tuned: " << after.loss_pred << " now " << after.loss_now;
}

// The jump scan moves a state by a multiple of the predicted change: 0 is the state itself, bit
// for bit (so "no jump" costs nothing to compare), 2 goes twice as far as the prediction; kinds
// left out stay at the state.
TEST(NowcastMeta, ScaledJumpMovesTheStateByThatMultipleOfThePredictedChange) {
  auto r = linear_run(4, 10);
  const auto wnn = ht::load_wnn_plus(std::string(HT_SOURCE_DIR) + "/models/nino/nino_mlp.safetensors", r->run.spec);
  const at::Tensor state = r->run.states[6][0];
  const auto predicted = ht::predict_from_state(r->run, *wnn, 6, 20);
  ht::write_jump(r->run, 6, predicted, 0.0);
  EXPECT_TRUE(torch::equal(r->w.detach(), state));
  ht::write_jump(r->run, 6, predicted, 1.0);
  const at::Tensor change = r->w.detach() - state;
  ASSERT_GT(change.abs().max().item<double>(), 1e-4);  // the released model does move this run
  std::vector<std::vector<at::Tensor>> context(1);
  for (int64_t j = 2; j <= 6; ++j) context[0].push_back(r->run.states[j][0]);
  EXPECT_TRUE(torch::allclose(r->w.detach(), wnn->predict(context, 20)[0], 1e-5, 1e-6));  // the model's own prediction
  ht::write_jump(r->run, 6, predicted, 2.0);
  EXPECT_TRUE(torch::allclose(r->w.detach() - state, 2 * change, 1e-4, 1e-6));
  ht::write_jump(r->run, 6, predicted, 1.0, ht::JumpKinds::parse("bias"));  // the run's one tensor is a weight
  EXPECT_TRUE(torch::equal(r->w.detach(), state));
  EXPECT_THROW(ht::predict_from_state(r->run, *wnn, 3, 20), ht::NowcastError);  // no 5-state context before state 4
  EXPECT_THROW(ht::predict_from_state(r->run, *wnn, 6, 41), ht::NowcastError);  // past the model's 40 horizons
}

TEST(NowcastMeta, LossAwareTuningRefusesARunTooShortForAContext) {
  ht::MetaTrainOptions o = small_options();
  o.steps = 1;
  ht::LossTuner tuner(ht::meta_train_wnn_plus(drifting_corpus(1, 8, 5), o).weights, {});
  auto r = linear_run(1, 4);
  EXPECT_THROW(tuner.tune(r->run), ht::NowcastError);
}

}  // namespace
