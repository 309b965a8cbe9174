// The vectorised tanh-GELU against ATen's at::gelu(x, "tanh"), forward and backward, over the
// whole float range that matters, including the saturated tails.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/gelu.h"

namespace ht {
namespace {

TEST(GeluTanh, MatchesATenForwardAndBackward) {
  torch::manual_seed(0);
  auto x = torch::cat({torch::randn({100000}) * 3, torch::linspace(-100, 100, 20001),
                       torch::tensor({0.0f, -0.0f, 1e-8f, -1e-8f})})
               .requires_grad_();
  const auto dy = torch::randn({x.size(0)});
  const auto y = gelu_tanh(x);
  const auto g = torch::autograd::grad({y}, {x}, {dy})[0];
  const auto y_ref = at::gelu(x, "tanh");
  const auto g_ref = torch::autograd::grad({y_ref}, {x}, {dy})[0];
  EXPECT_TRUE(torch::allclose(y, y_ref, 1e-5, 1e-6)) << (y - y_ref).abs().max().item<double>();
  // ATen saturates tanh to exactly -1 below x ~ -9 (gradient 0); ours keeps ~1e-6 there.
  EXPECT_TRUE(torch::allclose(g, g_ref, 1e-5, 1e-5)) << (g - g_ref).abs().max().item<double>();
}

TEST(GeluTanh, KeepsShapeAndPropagatesNaN) {
  const auto x = torch::tensor({NAN, 1.0f, -2.0f}).view({3, 1});
  const auto y = gelu_tanh(x);
  EXPECT_EQ(y.sizes(), x.sizes());
  EXPECT_TRUE(std::isnan(y[0][0].item<float>()));
  EXPECT_NEAR(y[1][0].item<float>(), at::gelu(x, "tanh")[1][0].item<float>(), 1e-6);
  // Non-contiguous and double inputs take the general path.
  const auto d = torch::randn({4, 6}, torch::kDouble).t();
  EXPECT_TRUE(torch::allclose(gelu_tanh(d), at::gelu(d, "tanh")));
}

}  // namespace
}  // namespace ht
