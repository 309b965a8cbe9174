// Rollback buffers: a restore is bit-exact, allocates nothing, and survives save/load.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <sstream>

#include "hybrid/core/allocator.h"
#include "hybrid/divergence.h"
#include "hybrid/snapshot.h"

TEST(WeightSnapshot, RestoreIsBitExactAndAllocationFree) {
  torch::manual_seed(1);
  std::vector<at::Tensor> w{torch::randn({33, 17}), torch::randn({5}), torch::randn({2, 3}, torch::kDouble)};
  std::vector<at::Tensor> ref;
  for (auto& t : w) ref.push_back(t.clone());
  ht::WeightSnapshot s;
  s.allocate(w, true);
  EXPECT_EQ(s.bytes(), (33 * 17 + 5) * 4 + 6 * 8);
  EXPECT_THROW(s.restore(w), std::logic_error);
  s.capture(w);
  const int64_t before = ht::allocator_stats().current_bytes;
  for (int i = 0; i < 20; ++i) {
    for (auto& t : w) t.mul_(1.0001).add_(0.37);  // arbitrary in-place drift
    s.restore(w);
  }
  EXPECT_EQ(ht::allocator_stats().current_bytes, before);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_TRUE(torch::equal(w[i], ref[i]));
  EXPECT_EQ(s.restores(), 20);
  EXPECT_EQ(s.bytes_copied(), 21 * s.bytes());
}

TEST(WeightSnapshot, SaveLoadRoundTrip) {
  std::vector<at::Tensor> w{torch::arange(12.0).reshape({3, 4})};
  ht::WeightSnapshot a;
  a.allocate(w, false);
  a.capture(w);
  torch::serialize::OutputArchive out;
  a.save(out);
  std::ostringstream os;
  out.save_to(os);
  torch::serialize::InputArchive in;
  std::istringstream is(os.str());
  in.load_from(is);
  ht::WeightSnapshot b;
  b.allocate(w, false);
  b.load(in);
  std::vector<at::Tensor> target{torch::zeros({3, 4})};
  b.restore(target);
  EXPECT_TRUE(torch::equal(target[0], w[0]));
}

TEST(DivergenceDetector, FlagsNonFiniteSpikesExplosionsAndOscillation) {
  ht::DivergenceDetector d(16, 4.0, 10.0);
  for (int i = 0; i < 16; ++i) d.observe_real_step(1.0 + 0.01 * (i % 3), 2.0);
  EXPECT_EQ(d.check_loss(1.01), "");
  EXPECT_NE(d.check_loss(NAN), "");
  EXPECT_NE(d.check_loss(INFINITY), "");
  EXPECT_NE(d.check_loss(1.5).find("spike"), std::string::npos);
  EXPECT_EQ(d.check_grad(3.0), "");
  EXPECT_NE(d.check_grad(50.0).find("gradient norm"), std::string::npos);
  d.start_phase();
  for (double v : {1.0, 0.99, 1.0, 0.98, 1.01}) d.observe_verified(v);
  EXPECT_NE(d.check_oscillation(), "");
  d.start_phase();
  for (double v : {1.0, 0.99, 0.98, 0.97, 0.96}) d.observe_verified(v);
  EXPECT_EQ(d.check_oscillation(), "");
}

TEST(DivergenceDetector, AGradientIsJudgedAgainstTheNormsBeforeIt) {
  // As the strategy reports the first real step after a predict phase: checked, then observed.
  // Had the norm joined the average first, 15x would pass a 10x limit and nothing would ever
  // pass a 25x one.
  ht::DivergenceDetector d(16, 4.0, 10.0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(d.observe_real_step(1.0, 2.0, true), "") << i;
  EXPECT_NE(d.observe_real_step(1.0, 30.0, true).find("gradient norm"), std::string::npos);
  EXPECT_DOUBLE_EQ(d.grad_norm_ema(), 2.0);  // the flagged norm stayed out of the average
  EXPECT_EQ(d.observe_real_step(1.0, 19.0, true), "");
  EXPECT_EQ(d.observe_real_step(1.0, 30.0), "");  // not a step after a predict phase: observed only
  EXPECT_GT(d.grad_norm_ema(), 2.0);

  ht::DivergenceDetector wide(16, 4.0, 25.0);
  for (int i = 0; i < 8; ++i) wide.observe_real_step(1.0, 2.0);
  EXPECT_NE(wide.observe_real_step(1.0, 60.0, true), "");
  EXPECT_NE(wide.observe_real_step(1.0, NAN, true).find("non-finite"), std::string::npos);
}
