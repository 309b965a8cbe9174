// Muon: the Newton-Schulz orthogonalization, the step against its formula, what gets AdamW's step,
// state round trips and bad options. The benchmarks measure whether it pays; these pin what it does.
#include <gtest/gtest.h>

#include <sstream>
#include <torch/torch.h>

#include "hybrid/kernels/muon.h"

namespace ht {
namespace {

void set_grads(std::vector<at::Tensor>& ps, int step) {
  for (size_t i = 0; i < ps.size(); ++i)
    ps[i].mutable_grad() = torch::sin(ps[i].detach() * (step + 1) + static_cast<double>(i));
}

std::vector<MuonParam> as_muon(const std::vector<at::Tensor>& ps, int64_t qkv_blocks = 1) {
  std::vector<MuonParam> out;
  for (const auto& p : ps) out.push_back({p, p.dim() >= 2, p.dim() >= 2 ? qkv_blocks : 1});
  return out;
}

}  // namespace

TEST(Muon, NewtonSchulzFlattensTheSpectrumOfWideTallAndSquareMatrices) {
  torch::manual_seed(3);
  for (auto shape : {std::vector<int64_t>{64, 256}, {256, 64}, {96, 96}}) {
    // A spread of singular values over four orders of magnitude: AdamW's step would follow the
    // largest; the orthogonalized one must give all of them about the same size.
    auto u = std::get<0>(torch::linalg_qr(torch::randn({shape[0], shape[0]})));
    auto v = std::get<0>(torch::linalg_qr(torch::randn({shape[1], shape[1]})));
    const int64_t r = std::min(shape[0], shape[1]);
    auto s = torch::logspace(0, -3, r);
    auto m = u.narrow(1, 0, r).mul(s).mm(v.narrow(1, 0, r).t());
    auto o = orthogonalize_newton_schulz(m, 5);
    ASSERT_EQ(o.sizes(), m.sizes());
    // bf16 iterations (MuonOptions.ns_bf16): float32 out, within 10 % of fp32's (7.8 % here).
    auto o_bf16 = orthogonalize_newton_schulz(m, 5, at::kBFloat16);
    ASSERT_EQ(o_bf16.scalar_type(), at::kFloat);
    EXPECT_LT(((o_bf16 - o).norm() / o.norm()).item<double>(), 0.1) << shape[0] << "x" << shape[1];
    auto sv = torch::linalg_svdvals(o);
    // Jordan's coefficients trade exactness for speed: ~[0.7, 1.2] for the values above ~1e-3 of
    // the largest; the smallest here (1e-3) still grows by two orders of magnitude or more.
    EXPECT_LT(sv.max().item<double>(), 1.25) << shape[0] << "x" << shape[1];
    EXPECT_GT(sv.narrow(0, 0, r / 2).min().item<double>(), 0.6) << shape[0] << "x" << shape[1];
    EXPECT_GT(sv.min().item<double>(), 0.1) << shape[0] << "x" << shape[1];
    // The same singular vectors: o lines up with u v^T of m.
    auto polar = u.narrow(1, 0, r).mm(v.narrow(1, 0, r).t());
    EXPECT_GT((o * polar).sum().item<double>() / (o.norm() * polar.norm()).item<double>(), 0.9);
  }
}

TEST(Muon, MatrixStepIsTheOrthogonalizedNesterovMomentumAtAdamWsScale) {
  torch::manual_seed(5);
  std::vector<at::Tensor> ps{torch::randn({40, 120}).requires_grad_(), torch::randn({120}).requires_grad_()};
  MuonOptions o;
  o.adamw.lr = 0.02;
  o.adamw.weight_decay = 0.1;
  auto opt = make_muon(as_muon(ps, 3), o);
  auto w = ps[0].detach().clone(), buf = torch::zeros_like(w);
  for (int t = 0; t < 3; ++t) {
    set_grads(ps, t);
    opt->step();
    const auto g = ps[0].grad();
    buf = buf * o.momentum + g;
    const auto nesterov = g + buf * o.momentum;
    std::vector<at::Tensor> blocks;
    for (int b = 0; b < 3; ++b)  // three column blocks of 40 x 40: scale 0.2 * sqrt(40)
      blocks.push_back(orthogonalize_newton_schulz(nesterov.narrow(1, 40 * b, 40), o.ns_steps) * (0.2 * std::sqrt(40.0)));
    w = w * (1.0 - o.adamw.lr * o.adamw.weight_decay) - torch::cat(blocks, 1) * o.adamw.lr;
    EXPECT_TRUE(torch::allclose(ps[0].detach(), w, 1e-5, 1e-6)) << "step " << t;
  }
}

TEST(Muon, VectorsAndUnorthogonalizedMatricesTakeAdamWsStep) {
  torch::manual_seed(6);
  auto make = [] { return std::vector<at::Tensor>{torch::randn({30, 20}).requires_grad_(), torch::randn({20}).requires_grad_()}; };
  auto ours = make();
  for (auto& p : ours) p.detach().copy_(torch::randn(p.sizes()));
  std::vector<at::Tensor> ref;
  for (auto& p : ours) ref.push_back(p.detach().clone().requires_grad_());
  MuonOptions o;
  o.adamw.lr = 3e-3;
  auto muon = make_muon({{ours[0], false, 1}, {ours[1], false, 1}}, o);  // e.g. an embedding and a bias
  auto adamw = make_adamw(ref, o.adamw);
  for (int t = 0; t < 10; ++t) {
    set_grads(ours, t);
    set_grads(ref, t);
    muon->step();
    adamw->step();
  }
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_TRUE(torch::equal(ours[i], ref[i])) << "param " << i;
}

TEST(Muon, StateRoundTripContinuesBitIdentically) {
  torch::manual_seed(7);
  auto make = [] { return std::vector<at::Tensor>{torch::randn({24, 48}).requires_grad_(), torch::randn({48}).requires_grad_()}; };
  auto a = make();
  std::vector<at::Tensor> b;
  for (auto& p : a) b.push_back(p.detach().clone().requires_grad_());
  MuonOptions o;
  o.adamw.lr = 0.01;
  auto opt_a = make_muon(as_muon(a), o);
  for (int t = 0; t < 4; ++t) {
    set_grads(a, t);
    opt_a->step();
  }
  std::stringstream saved;
  {
    torch::serialize::OutputArchive out;
    opt_a->save(out);
    out.save_to(saved);
  }
  for (size_t i = 0; i < a.size(); ++i) b[i].detach().copy_(a[i].detach());
  auto opt_b = make_muon(as_muon(b), o);
  torch::serialize::InputArchive in;
  in.load_from(saved);
  opt_b->load(in);
  EXPECT_EQ(opt_a->state_bytes(), opt_b->state_bytes());
  EXPECT_EQ(opt_a->state_bytes(), (24 * 48 + 2 * 48) * 4);  // momentum for the matrix, m and v for the bias
  for (int t = 4; t < 8; ++t) {
    set_grads(a, t);
    set_grads(b, t);
    opt_a->step();
    opt_b->step();
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "param " << i;
  // AdamW's state is not Muon's: the error names both.
  std::stringstream adam_saved;
  {
    auto adamw = make_adamw(a, o.adamw);
    torch::serialize::OutputArchive out;
    adamw->save(out);
    out.save_to(adam_saved);
  }
  torch::serialize::InputArchive adam_in;
  adam_in.load_from(adam_saved);
  try {
    opt_b->load(adam_in);
    FAIL() << "loaded AdamW state into Muon";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("adamw"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("muon"), std::string::npos) << e.what();
  }
}

TEST(Muon, FitsALinearMapTenfold) {
  // A real outcome: a two-layer linear map fitted to a realizable target (y = x W*) under a
  // decaying rate (Muon's step does not shrink with the gradient, so a constant rate leaves a floor).
  torch::manual_seed(8);
  auto x = torch::randn({256, 32}), y = x.mm(torch::randn({32, 8}) * 0.3);
  std::vector<at::Tensor> ps{(torch::randn({32, 64}) * 0.1).requires_grad_(), (torch::randn({64, 8}) * 0.1).requires_grad_()};
  MuonOptions o;
  o.adamw.lr = 0.02;
  o.adamw.weight_decay = 0;
  auto opt = make_muon(as_muon(ps), o);
  auto loss_now = [&] { return (x.mm(ps[0]).mm(ps[1]) - y).pow(2).mean(); };
  const double first = loss_now().item<double>();
  const int steps = 300;
  for (int t = 0; t < steps; ++t) {
    opt->schedule_lr([&](double base) { return base * (1.0 - static_cast<double>(t) / steps); });
    opt->zero_grad();
    auto loss = loss_now();
    loss.backward();
    opt->step();
  }
  EXPECT_LT(loss_now().item<double>(), 0.1 * first);
}

TEST(Muon, RejectsBadOptionsWithTheFieldNamed) {
  std::vector<at::Tensor> ps{torch::randn({4, 6}), torch::randn({6})};
  auto fails_with = [&](MuonOptions o, std::vector<MuonParam> params, const std::string& needle) {
    try {
      make_muon(std::move(params), o);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  MuonOptions o;
  o.momentum = 1.0;
  fails_with(o, as_muon(ps), "momentum");
  o = MuonOptions{};
  o.ns_steps = 0;
  fails_with(o, as_muon(ps), "ns_steps");
  o = MuonOptions{};
  o.adamw.beta1 = 1.0;
  fails_with(o, as_muon(ps), "beta1");
  fails_with(MuonOptions{}, {{ps[1], true, 1}}, "1-D");
  fails_with(MuonOptions{}, {{ps[0], true, 4}}, "column blocks");
}

}  // namespace ht
