// The adapter that lets any torch::optim::Optimizer drive training: steps, and learning rates
// that the schedule scales per parameter group from each group's own base rate.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "hybrid/core/optimizer.h"

namespace ht {
namespace {

std::vector<at::Tensor> make_params(int64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({30, 7}).requires_grad_(), torch::randn({7}).requires_grad_()};
}

void set_grads(std::vector<at::Tensor>& ps, int step) {
  for (size_t i = 0; i < ps.size(); ++i)
    ps[i].mutable_grad() = torch::sin(ps[i].detach() * (step + 1) + static_cast<double>(i));
}

}  // namespace

TEST(TorchOptimizerAdapter, DrivesAnyLibTorchOptimizer) {
  auto ps = make_params(7);
  auto rms = std::make_shared<torch::optim::RMSprop>(ps, torch::optim::RMSpropOptions(1e-2));
  auto opt = wrap_torch_optimizer(rms, "rmsprop");
  EXPECT_DOUBLE_EQ(opt->lr(), 1e-2);
  opt->schedule_lr([](double base) { return 2 * base; });
  EXPECT_DOUBLE_EQ(opt->lr(), 0.02);
  const auto before = ps[0].detach().clone();
  set_grads(ps, 0);
  opt->step();
  EXPECT_FALSE(torch::equal(before, ps[0]));
  EXPECT_EQ(opt->parameters().size(), 2u);
}

TEST(TorchOptimizerAdapter, ParameterGroupsKeepTheirOwnRates) {
  auto a = make_params(1), b = make_params(2);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(a, std::make_unique<torch::optim::SGDOptions>(0.1));
  groups.emplace_back(b, std::make_unique<torch::optim::SGDOptions>(0.01));
  auto sgd = std::make_shared<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.5));
  auto opt = wrap_torch_optimizer(sgd, "sgd");
  opt->schedule_lr([](double base) { return base * 0.5; });
  EXPECT_DOUBLE_EQ(sgd->param_groups()[0].options().get_lr(), 0.05);
  EXPECT_DOUBLE_EQ(sgd->param_groups()[1].options().get_lr(), 0.005);
  // Scheduling again scales the base rates, not the last scheduled ones.
  opt->schedule_lr([](double base) { return base; });
  EXPECT_DOUBLE_EQ(sgd->param_groups()[1].options().get_lr(), 0.01);
}

TEST(TorchOptimizerAdapter, ZeroesGradientsInPlace) {
  auto ps = make_params(3);
  set_grads(ps, 0);
  const void* storage = ps[0].grad().data_ptr();
  wrap_torch_optimizer(std::make_shared<torch::optim::SGD>(ps, torch::optim::SGDOptions(0.1)), "sgd")->zero_grad();
  ASSERT_TRUE(ps[0].grad().defined());
  EXPECT_EQ(ps[0].grad().data_ptr(), storage);
  EXPECT_EQ(ps[0].grad().abs().sum().item<double>(), 0.0);
}

}  // namespace ht
