// WeightAverage on its own: the exponential average it keeps and the exact swap evaluation uses.
// (The trainer's use of it - evaluation, resume, sampling - is tested in trainer_test.cpp.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/core/weight_average.h"
#include "support/toy_problem.h"

namespace ht {

namespace {

void fill(torch::nn::Module& m, double v) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) p.fill_(v);
}

}  // namespace

TEST(WeightAverage, FirstUpdateCopiesThenAveragesExponentially) {
  testing::ToyNet net;
  WeightAverage avg(net, 0.75);
  fill(net, 4.0);
  avg.update();
  for (const auto& t : avg.tensors()) EXPECT_TRUE(torch::equal(t, torch::full_like(t, 4.0)));
  fill(net, 0.0);
  avg.update();  // 0.75 * 4 + 0.25 * 0
  fill(net, 8.0);
  avg.update();  // 0.75 * 3 + 0.25 * 8
  EXPECT_EQ(avg.updates(), 3);
  for (const auto& t : avg.tensors()) EXPECT_TRUE(torch::allclose(t, torch::full_like(t, 4.25), 0, 1e-6));
  EXPECT_EQ(avg.bytes(), static_cast<int64_t>(sizeof(float)) * (2 * 32 + 32 + 32 + 1));
}

TEST(WeightAverage, SwapExchangesInPlaceAndTwiceRestoresBitForBit) {
  torch::manual_seed(3);
  testing::ToyNet net;
  WeightAverage avg(net, 0.9);
  avg.update();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : net.parameters()) p.add_(torch::randn_like(p));
  }
  std::vector<at::Tensor> weights, average;
  for (const auto& p : net.parameters()) weights.push_back(p.detach().clone());
  avg.update();
  for (const auto& t : avg.tensors()) average.push_back(t.clone());
  const void* storage = net.parameters()[0].data_ptr();

  avg.swap();
  for (size_t i = 0; i < weights.size(); ++i) {
    EXPECT_TRUE(torch::equal(net.parameters()[i], average[i]));
    EXPECT_TRUE(torch::equal(avg.tensors()[i], weights[i]));
  }
  EXPECT_EQ(net.parameters()[0].data_ptr(), storage);  // in place: the optimizer's tensors
  avg.swap();
  for (size_t i = 0; i < weights.size(); ++i) {
    EXPECT_TRUE(torch::equal(net.parameters()[i], weights[i]));
    EXPECT_TRUE(torch::equal(avg.tensors()[i], average[i]));
  }
}

TEST(WeightAverage, SwapBeforeAnyUpdateChangesNothing) {
  testing::ToyNet net;
  fill(net, 1.5);
  WeightAverage avg(net, 0.9);
  avg.swap();
  for (const auto& p : net.parameters()) EXPECT_TRUE(torch::equal(p, torch::full_like(p, 1.5)));
}

TEST(WeightAverage, DecayOutsideTheOpenUnitIntervalIsRejected) {
  testing::ToyNet net;
  EXPECT_THROW(WeightAverage(net, 0.0), std::invalid_argument);
  EXPECT_THROW(WeightAverage(net, 1.0), std::invalid_argument);
  EXPECT_THROW(WeightAverage(net, -0.5), std::invalid_argument);
}

}  // namespace ht
