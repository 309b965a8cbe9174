// Each predictor on trajectories whose continuation is known: constant and geometric update
// sequences. Also: save/load gives identical predictions, and layer groups cover every tensor.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <sstream>

#include "hybrid/hybrid/options.h"
#include "hybrid/hybrid/predictor.h"

namespace {

// Updates of two tensors made of three geometric modes: d_t = sum_m r_m^t v_m.
struct GeometricTrajectory {
  GeometricTrajectory() {
    torch::manual_seed(3);
    for (int m = 0; m < 3; ++m) {
      modes_a.push_back(torch::randn({8, 5}));
      modes_b.push_back(torch::randn({7}));
    }
  }
  std::vector<at::Tensor> at(int64_t t) const {
    const double r[3] = {0.9, 0.96, 0.99};
    at::Tensor a = torch::zeros({8, 5}), b = torch::zeros({7});
    for (int m = 0; m < 3; ++m) {
      a += std::pow(r[m], double(t)) * modes_a[m];
      b += std::pow(r[m], double(t)) * modes_b[m];
    }
    return {a, b};
  }
  std::vector<at::Tensor> modes_a, modes_b;
};

std::vector<at::Tensor> zeros_like_all(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(torch::zeros_like(t));
  return out;
}

double rel_error(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]).pow(2).sum().item<double>();
    den += want[i].pow(2).sum().item<double>();
  }
  return std::sqrt(num / den);
}

template <typename Archived>
std::string to_bytes(const Archived& thing) {
  torch::serialize::OutputArchive out;
  thing.save(out);
  std::ostringstream os;
  out.save_to(os);
  return os.str();
}

template <typename Archived>
void from_bytes(Archived& thing, const std::string& bytes) {
  torch::serialize::InputArchive in;
  std::istringstream is(bytes);
  in.load_from(is);
  thing.load(in);
}

}  // namespace

TEST(Predictors, LastRepeatsTheLatestUpdateAndEmaAveragesFromTheFirst) {
  GeometricTrajectory traj;
  auto last = ht::make_last_predictor();
  auto ema = ht::make_ema_predictor(0.5);
  EXPECT_FALSE(last->ready());
  ht::TrainingFeatures f;
  for (int64_t t = 0; t < 3; ++t) {
    last->observe(traj.at(t), f);
    ema->observe(traj.at(t), f);
  }
  auto out = zeros_like_all(traj.at(0));
  last->predict_into(out, 5);
  EXPECT_TRUE(torch::allclose(out[0], traj.at(2)[0]));
  ema->predict_into(out, 1);
  // ema = 0.25 d0 + 0.25 d1 + 0.5 d2 (initialised with d0, no zero bias).
  auto want = 0.25 * traj.at(0)[1] + 0.25 * traj.at(1)[1] + 0.5 * traj.at(2)[1];
  EXPECT_TRUE(torch::allclose(out[1], want, 1e-5, 1e-6));
  ema->reset_history();
  EXPECT_FALSE(ema->ready());
}

TEST(Predictors, DmdPredictsAGeometricTrajectoryNearlyExactly) {
  GeometricTrajectory traj;
  auto dmd = ht::make_dmd_predictor(8, 4, 1e-9);
  ht::TrainingFeatures f;
  for (int64_t t = 0; t < 8; ++t) {
    EXPECT_FALSE(dmd->ready());
    dmd->observe(traj.at(t), f);
  }
  ASSERT_TRUE(dmd->ready());
  auto out = zeros_like_all(traj.at(0));
  dmd->predict_into(out, 1);
  EXPECT_LT(rel_error(out, traj.at(8)), 1e-3);
  dmd->predict_into(out, 10);
  EXPECT_LT(rel_error(out, traj.at(17)), 1e-2);
  EXPECT_GT(dmd->self_confidence(), 0.99);
  // Extrapolating the last update instead is off by the decay: the model adds something.
  EXPECT_GT(rel_error({traj.at(7)}, {traj.at(17)}), 0.1);
  // The ring is circular: ten more observations still fit the newest eight.
  for (int64_t t = 8; t < 18; ++t) dmd->observe(traj.at(t), f);
  dmd->predict_into(out, 1);
  EXPECT_LT(rel_error(out, traj.at(18)), 1e-3);
}

TEST(Predictors, DmdOnNoiseReportsLowConfidenceAndBoundedPredictions) {
  torch::manual_seed(5);
  auto dmd = ht::make_dmd_predictor(8, 4, 1e-6);
  ht::TrainingFeatures f;
  at::Tensor newest;
  for (int t = 0; t < 8; ++t) {
    newest = torch::randn({200});
    dmd->observe({newest}, f);
  }
  EXPECT_LT(dmd->self_confidence(), 0.5);
  std::vector<at::Tensor> out{torch::zeros({200})};
  dmd->predict_into(out, 50);
  EXPECT_LE(out[0].norm().item<double>(), 2.0 * newest.norm().item<double>() + 1e-6);
}

TEST(Predictors, SaveLoadGivesIdenticalPredictions) {
  GeometricTrajectory traj;
  ht::HybridOptions o;
  o.predictor_options["rssm_train_every"] = 2;
  for (const std::string name : {"last", "ema", "dmd", "rssm", "mean", "regression", "drift"}) {
    o.predictor = name;
    auto a = ht::make_update_predictor(o);
    ht::TrainingFeatures f;
    f.loss = 1.0;
    f.loss_ema = 1.0;
    f.lr = 0.1;
    f.grad_norm = 1.0;
    f.group_update_norms = {1.0, 0.5};
    const bool weights = a->input() == ht::UpdatePredictor::Input::Weights;
    for (int64_t t = 0; t < 10; ++t) {
      f.loss *= 0.97;
      if (weights) a->observe_weights(traj.at(t), f);  // any sequence of tensors will do
      else a->observe(traj.at(t), f);
    }
    if (weights) a->end_stretch(traj.at(10));
    ASSERT_TRUE(a->ready()) << name;
    const std::string bytes = to_bytes(*a);
    auto b = ht::make_update_predictor(o);
    from_bytes(*b, bytes);
    auto pa = zeros_like_all(traj.at(0)), pb = zeros_like_all(traj.at(0));
    a->predict_into(pa, 3);
    b->predict_into(pb, 3);
    EXPECT_TRUE(torch::equal(pa[0], pb[0]) && torch::equal(pa[1], pb[1])) << name;
    // Both continue identically (the rssm's training noise generator was saved too).
    for (int64_t t = 10; t < 14; ++t) {
      if (weights) {
        a->observe_weights(traj.at(t), f);
        b->observe_weights(traj.at(t), f);
      } else {
        a->observe(traj.at(t), f);
        b->observe(traj.at(t), f);
      }
    }
    if (weights) {
      a->end_stretch(traj.at(14));
      b->end_stretch(traj.at(14));
    }
    a->predict_into(pa, 2);
    b->predict_into(pb, 2);
    EXPECT_TRUE(torch::equal(pa[0], pb[0]) && torch::equal(pa[1], pb[1])) << name;
    EXPECT_GT(a->state_bytes(), 0) << name;
  }
}

TEST(Predictors, TrajectoryPredictorsRecoverTheDriftOfANoisyLine) {
  // w_t = c + v t + noise_t: mean sees v plus the noise difference of the end points over n-1;
  // regression fits v and returns from the noisy last weights to the line first.
  torch::manual_seed(9);
  const at::Tensor c = torch::randn({50, 4}), v = 0.01 * torch::randn({50, 4});
  std::vector<at::Tensor> noise;
  for (int t = 0; t < 64; ++t) noise.push_back(0.05 * torch::randn({50, 4}));
  auto w = [&](int t) { return std::vector<at::Tensor>{c + v * double(t) + noise[t]}; };
  auto mean = ht::make_mean_predictor(), reg = ht::make_regression_predictor();
  ht::TrainingFeatures f;
  for (int t = 0; t < 64; ++t) {
    mean->observe_weights(w(t), f);
    reg->observe_weights(w(t), f);
  }
  mean->end_stretch(w(63));
  reg->end_stretch(w(63));
  std::vector<at::Tensor> out{torch::zeros({50, 4})};
  mean->predict_into(out, 5);
  EXPECT_TRUE(torch::allclose(out[0], v + (noise[63] - noise[0]) / 63.0, 1e-4, 1e-6));
  reg->predict_into(out, 3, 2.0);
  EXPECT_LT((out[0] - 2.0 * v).norm().item<double>(), 0.1 * (2.0 * v).norm().item<double>());
  // Step 1: from w_63 back to the line at t = 63, then one step along it.
  reg->predict_into(out, 1);
  const at::Tensor landed = w(63)[0] + out[0];
  const at::Tensor truth = c + v * 64.0;
  // The line at its end point carries about a quarter of the noise (sqrt(1/n + 3/n) for n = 64).
  EXPECT_LT((landed - truth).norm().item<double>(), 0.4 * noise[63].norm().item<double>());
  EXPECT_THROW(mean->observe(w(0), f), std::logic_error);
  reg->reset_history();
  EXPECT_FALSE(reg->ready());
}

TEST(Predictors, DriftContinuesOnlyTheCoordinatesWhoseSlopeStandsOutOfTheNoise) {
  // Half the coordinates drift (v = 0.01 per step, noise 0.02), half only wander (v = 0): the
  // slope t-statistic over 64 steps is ~14 for the first half and |t| ~ 1 for the second.
  torch::manual_seed(10);
  const int64_t n = 400;
  const at::Tensor c = torch::randn({n});
  const at::Tensor v = torch::cat({torch::full({n / 2}, 0.01), torch::zeros({n / 2})});
  std::vector<at::Tensor> noise;
  for (int t = 0; t < 64; ++t) noise.push_back(0.02 * torch::randn({n}));
  auto w = [&](int t) { return std::vector<at::Tensor>{c + v * double(t) + noise[t]}; };
  auto drift = ht::make_drift_predictor(3.0);
  ht::TrainingFeatures f;
  for (int t = 0; t < 64; ++t) drift->observe_weights(w(t), f);
  drift->end_stretch(w(63));
  std::vector<at::Tensor> out{torch::zeros({n})};
  drift->predict_into(out, 2, 1.0);  // steps after the first: the kept slope only
  const at::Tensor moving = out[0].slice(0, 0, n / 2), still = out[0].slice(0, n / 2);
  EXPECT_EQ(moving.ne(0).sum().item<int64_t>(), n / 2) << "a clear drift was dropped";
  EXPECT_LT((moving - 0.01).abs().max().item<double>(), 0.004);
  // At |t| > 3 about 0.3 % of pure-noise coordinates pass by chance.
  EXPECT_LE(still.ne(0).sum().item<int64_t>(), 3);
  // The first step returns to the fitted line, as regression does: closer to the truth than w_63.
  drift->predict_into(out, 1, 0.0);
  const at::Tensor truth = c + v * 63.0;
  EXPECT_LT((w(63)[0] + out[0] - truth).norm().item<double>(), 0.5 * noise[63].norm().item<double>());
  EXPECT_THROW(ht::make_drift_predictor(3.0)->end_stretch(w(0)), std::logic_error);
}

TEST(Predictors, RssmLearnsTheMultiplierOfAGeometricTrajectory) {
  // With ema beta 0.9 and d_t = 0.95^t v, the next update carries alpha = r (1 - b/r) / (1 - b)
  // = 0.5 of the EMA direction; the loss falls 1 % per step.
  ht::HybridOptions o;
  o.predictor = "rssm";
  o.groups = 2;
  o.predictor_options["rssm_train_every"] = 1;
  auto p = ht::make_update_predictor(o);
  torch::manual_seed(11);
  const at::Tensor va = torch::randn({6, 4}), vb = torch::randn({9});
  ht::TrainingFeatures f;
  f.loss = 2.0;
  f.lr = 0.01;
  f.grad_norm = 1.0;
  for (int64_t t = 0; t < 80; ++t) {
    const double s = std::pow(0.95, double(t));
    f.loss *= 0.99;
    f.loss_ema = f.loss;
    f.loss_var = 1e-4;
    f.group_update_norms = {s * va.norm().item<double>(), s * vb.norm().item<double>()};
    p->observe({s * va, s * vb}, f);
  }
  std::vector<at::Tensor> out{torch::zeros({6, 4}), torch::zeros({9})};
  p->predict_into(out, 1);
  // The EMA direction is parallel to v; the predicted multiplier applies to it per group.
  const double s_last = std::pow(0.95, 79.0);
  const double ema_scale = s_last * 0.1 / (1.0 - 0.9 / 0.95);  // |ema| / |v|, converged
  const double alpha_a = (out[0] / va).mean().item<double>() / ema_scale;
  EXPECT_NEAR(alpha_a, 0.5, 0.1);
  const double change = p->predicted_loss_change(5);
  EXPECT_NEAR(change, std::pow(0.99, 5) - 1.0, 0.02);
  EXPECT_GT(p->self_confidence(), 0.0);
}

TEST(Predictors, LayerGroupsAreContiguousAndCoverEveryTensor) {
  const auto g = ht::layer_groups(10, 4);
  ASSERT_EQ(g.size(), 10u);
  EXPECT_EQ(g.front(), 0);
  EXPECT_EQ(g.back(), 3);
  for (size_t i = 1; i < g.size(); ++i) EXPECT_TRUE(g[i] == g[i - 1] || g[i] == g[i - 1] + 1);
  EXPECT_EQ(ht::layer_groups(2, 4).back(), 1);
}
