// MLP and CNN tests: output shapes, parameter names, and that Adam reduces the loss on a fixed
// batch through the classifier objective.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/core/data.h"
#include "hybrid/models/cnn.h"
#include "hybrid/models/image_classifier.h"
#include "hybrid/models/mlp.h"

namespace ht {
namespace {

class ImageClassifierTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ImageClassifierTest, MapsImagesToTenLogitsAndLearnsAFixedBatch) {
  torch::manual_seed(0);
  auto model = make_image_classifier(GetParam());
  const Batch batch{torch::rand({32, 1, 28, 28}), torch::randint(10, {32}, torch::kLong)};
  EXPECT_EQ(model->forward(batch.input).sizes().vec(), (std::vector<int64_t>{32, 10}));

  auto objective = make_image_classifier_objective(model);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(2e-3));
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    const auto loss = objective->loss(batch);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_NEAR(first, std::log(10.0), 0.3);
  EXPECT_LT(last, 0.5 * first);
}

INSTANTIATE_TEST_SUITE_P(Models, ImageClassifierTest, ::testing::Values("mlp", "cnn"));

TEST(ImageClassifier, LayoutsAndNames) {
  MLP mlp(MLPConfig{784, {64}, 10});
  const auto p = mlp.named_parameters();
  EXPECT_EQ(p.size(), 4u);
  EXPECT_EQ(p["fc1.weight"].sizes().vec(), (std::vector<int64_t>{64, 784}));
  EXPECT_EQ(p["fc2.weight"].sizes().vec(), (std::vector<int64_t>{10, 64}));

  ConvNet cnn;
  const auto q = cnn.named_parameters();
  EXPECT_EQ(q["conv1.weight"].sizes().vec(), (std::vector<int64_t>{16, 1, 3, 3}));
  EXPECT_EQ(q["conv2.weight"].sizes().vec(), (std::vector<int64_t>{32, 16, 3, 3}));
  EXPECT_EQ(q["fc.weight"].sizes().vec(), (std::vector<int64_t>{10, 32 * 7 * 7}));
  EXPECT_THROW(make_image_classifier("resnet"), std::invalid_argument);
}

}  // namespace
}  // namespace ht
