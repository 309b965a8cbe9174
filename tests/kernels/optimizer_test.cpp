// The fused AdamW and SGD against LibTorch's reference implementations, and state round trips.
// Reference equality is what lets the rest of the suite trust our optimizers' trajectories.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <torch/torch.h>

#include "hybrid/kernels/optimizers.h"

namespace ht {
namespace {

std::vector<at::Tensor> make_params(int64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({300, 70}).requires_grad_(), torch::randn({70}).requires_grad_()};
}

// Fills grads with a fixed function of the step so both optimizers see the same gradients.
void set_grads(std::vector<at::Tensor>& ps, int step) {
  for (size_t i = 0; i < ps.size(); ++i) {
    auto g = torch::sin(ps[i].detach() * (step + 1) + static_cast<double>(i));
    ps[i].mutable_grad() = g;
  }
}

}  // namespace

TEST(AdamW, MatchesTorchAdamW) {
  auto ours = make_params(1), ref = make_params(1);
  AdamWOptions o;
  o.lr = 3e-3;
  o.weight_decay = 0.1;
  o.decay_matrices_only = false;  // torch's AdamW decays everything
  auto opt = make_adamw(ours, o);
  torch::optim::AdamW ref_opt(ref, torch::optim::AdamWOptions(3e-3).weight_decay(0.1));
  for (int s = 0; s < 20; ++s) {
    set_grads(ours, s);
    set_grads(ref, s);
    opt->step();
    ref_opt.step();
  }
  for (size_t i = 0; i < ours.size(); ++i)
    EXPECT_TRUE(torch::allclose(ours[i], ref[i], 1e-5, 1e-6)) << "param " << i;
}

TEST(AdamW, FusedStepEqualsTheScalarFormulaBitForBit) {
  // The fused loop is compiled vectorised (-fno-math-errno on its file); this file is not, so the
  // loop below runs scalar. Vector sqrt and division round exactly as scalar ones: the results
  // must be identical, not merely close. 300 x 70 elements, odd for any vector width.
  auto ps = make_params(4);
  AdamWOptions o;
  o.lr = 3e-3;
  o.weight_decay = 0.1;
  auto opt = make_adamw(ps, o);
  std::vector<at::Tensor> p_ref, m_ref, v_ref;
  for (const auto& p : ps) {
    p_ref.push_back(p.detach().clone());
    m_ref.push_back(torch::zeros_like(p_ref.back()));
    v_ref.push_back(torch::zeros_like(p_ref.back()));
  }
  for (int t = 1; t <= 15; ++t) {
    set_grads(ps, t);
    opt->step();
    const double bc1 = 1.0 - std::pow(o.beta1, t), bc2 = 1.0 - std::pow(o.beta2, t);
    const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
    const float step_size = static_cast<float>(o.lr / bc1);
    const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    const float eps = static_cast<float>(o.eps);
    for (size_t i = 0; i < ps.size(); ++i) {
      const float decay = static_cast<float>(1.0 - o.lr * (ps[i].dim() >= 2 ? o.weight_decay : 0.0));
      const at::Tensor g = ps[i].grad().contiguous();
      const float* gd = g.data_ptr<float>();
      float* pd = p_ref[i].data_ptr<float>();
      float* md = m_ref[i].data_ptr<float>();
      float* vd = v_ref[i].data_ptr<float>();
      for (int64_t j = 0; j < g.numel(); ++j) {
        md[j] = b1 * md[j] + (1.0f - b1) * gd[j];
        vd[j] = b2 * vd[j] + (1.0f - b2) * gd[j] * gd[j];
        pd[j] = pd[j] * decay - step_size * md[j] / (std::sqrt(vd[j]) * inv_sqrt_bc2 + eps);
      }
    }
  }
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(torch::equal(ps[i].detach(), p_ref[i])) << "param " << i;
}

TEST(AdamW, DecaysOnlyMatricesByDefault) {
  auto ps = make_params(2);
  const auto weight_before = ps[0].detach().clone();
  const auto bias_before = ps[1].detach().clone();
  AdamWOptions o;
  o.lr = 0.5;
  o.weight_decay = 1.0;
  auto opt = make_adamw(ps, o);
  for (auto& p : ps) p.mutable_grad() = torch::zeros_like(p);
  opt->step();  // zero grads: only decay can move the weights
  EXPECT_TRUE(torch::equal(ps[1], bias_before));
  EXPECT_TRUE(torch::allclose(ps[0], weight_before * (1.0 - 0.5 * 1.0))) << "the matrix did not decay";
}

TEST(AdamW, StateRoundTripContinuesBitIdentically) {
  auto a = make_params(3), b = make_params(3);
  auto opt_a = make_adamw(a, {}), opt_b = make_adamw(b, {});
  for (int s = 0; s < 5; ++s) {
    set_grads(a, s);
    opt_a->step();
  }
  torch::serialize::OutputArchive out;
  opt_a->save(out);
  std::stringstream buf;
  out.save_to(buf);
  torch::serialize::InputArchive in;
  in.load_from(buf);
  {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
  }
  opt_b->load(in);
  for (int s = 5; s < 10; ++s) {
    set_grads(a, s);
    set_grads(b, s);
    opt_a->step();
    opt_b->step();
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));
  EXPECT_EQ(opt_a->state_bytes(), 2 * (300 * 70 + 70) * 4);
}

TEST(AdamW, LoadingStateOfAnotherOptimizerFailsClearly) {
  auto ps = make_params(4);
  auto sgd = make_sgd(ps, {});
  torch::serialize::OutputArchive out;
  sgd->save(out);
  std::stringstream buf;
  out.save_to(buf);
  torch::serialize::InputArchive in;
  in.load_from(buf);
  auto adam = make_adamw(ps, {});
  try {
    adam->load(in);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("adamw"), std::string::npos) << e.what();
  }
}

TEST(AdamW, ResetAndRescaledStateAfterAWeightJump) {
  // Reset: the next step is a fresh optimizer's first step from the same weights. Rescale: the
  // first moment times the factor, the second and the bias correction kept (so the next step
  // equals one from a state whose m was scaled by hand).
  AdamWOptions o;
  o.lr = 1e-2;
  auto a = make_params(3), fresh = make_params(3);
  auto opt = make_adamw(a, o);
  for (int s = 0; s < 5; ++s) {
    set_grads(a, s);
    opt->step();
  }
  ASSERT_TRUE(opt->can_change_state(Optimizer::StateChange::Reset));
  opt->change_state(Optimizer::StateChange::Reset, 0.0);
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < a.size(); ++i) fresh[i].copy_(a[i]);
  }
  auto fresh_opt = make_adamw(fresh, o);
  set_grads(a, 7);
  set_grads(fresh, 7);
  opt->step();
  fresh_opt->step();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], fresh[i]));

  auto b = make_params(4), c = make_params(4);
  auto ob = make_adamw(b, o), oc = make_adamw(c, o);
  for (int s = 0; s < 5; ++s) {
    set_grads(b, s);
    set_grads(c, s);
    ob->step();
    oc->step();
  }
  ob->change_state(Optimizer::StateChange::ScaleMomentum, 0.5);
  // The same by hand through a state round trip: m halved.
  torch::serialize::OutputArchive out;
  oc->save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  {
    torch::NoGradGuard g;
    for (int i = 0; i < 2; ++i) {
      at::Tensor m;
      in.read("m." + std::to_string(i), m);
      m.mul_(0.5);
    }
  }
  oc->load(in);
  set_grads(b, 9);
  set_grads(c, 9);
  ob->step();
  oc->step();
  for (size_t i = 0; i < b.size(); ++i) EXPECT_TRUE(torch::equal(b[i], c[i]));
}

TEST(Sgd, MatchesTorchSgdWithMomentum) {
  auto ours = make_params(5), ref = make_params(5);
  auto opt = make_sgd(ours, SgdOptions{0.05, 0.9, 1e-3, true});
  torch::optim::SGD ref_opt(ref, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3).nesterov(true));
  for (int s = 0; s < 15; ++s) {
    set_grads(ours, s);
    set_grads(ref, s);
    opt->step();
    ref_opt.step();
  }
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_TRUE(torch::allclose(ours[i], ref[i], 1e-5, 1e-6));
}

TEST(Optimizer, RejectsBadHyperparameters) {
  AdamWOptions o;
  o.beta2 = 1.0;
  EXPECT_THROW(make_adamw(make_params(6), o), std::invalid_argument);
  EXPECT_THROW(make_sgd(make_params(6), SgdOptions{0.1, 1.5, 0, false}), std::invalid_argument);
}

}  // namespace ht
