// Clipping by the global gradient norm: what is scaled, by how much, and what is left alone.
// The trainer and nowcast-meta's replay of its steps share these two functions.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/core/grad_clip.h"

namespace ht {
namespace {

// Two parameters with gradients [3] and [0, 4] (global norm 5) and one that has no gradient.
std::vector<at::Tensor> params_with_grads() {
  std::vector<at::Tensor> p = {torch::zeros({1}, torch::requires_grad()), torch::zeros({2}, torch::requires_grad()),
                               torch::zeros({3}, torch::requires_grad())};
  p[0].mutable_grad() = torch::tensor({3.0f});
  p[1].mutable_grad() = torch::tensor({0.0f, 4.0f});
  return p;
}

}  // namespace

TEST(GradClip, TheGlobalNormIsTheNormOverEveryDefinedGradient) {
  EXPECT_NEAR(global_grad_norm(params_with_grads()), 5.0, 1e-6);
  EXPECT_EQ(global_grad_norm({torch::zeros({2}, torch::requires_grad())}), 0.0);
}

TEST(GradClip, AboveTheLimitEveryGradientIsScaledToIt) {
  auto p = params_with_grads();
  clip_grads_to_norm(p, global_grad_norm(p), 1.0);
  const float scale = static_cast<float>(1.0 / (5.0 + 1e-6));  // as computed: in double, applied in float
  EXPECT_EQ(p[0].grad()[0].item<float>(), 3.0f * scale);
  EXPECT_EQ(p[1].grad()[1].item<float>(), 4.0f * scale);
  EXPECT_NEAR(global_grad_norm(p), 1.0, 1e-6);
  EXPECT_FALSE(p[2].grad().defined());  // no gradient is made up
}

TEST(GradClip, AtOrBelowTheLimitOrWithClippingOffNothingChanges) {
  for (const double limit : {5.0, 10.0, 0.0}) {
    auto p = params_with_grads();
    clip_grads_to_norm(p, global_grad_norm(p), limit);
    EXPECT_EQ(p[0].grad()[0].item<float>(), 3.0f) << limit;
    EXPECT_EQ(p[1].grad()[1].item<float>(), 4.0f) << limit;
  }
}

}  // namespace ht
