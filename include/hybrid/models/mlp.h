// A multilayer perceptron for small images: flatten, then Linear+ReLU per hidden layer, then a
// Linear layer to the class logits.
#pragma once

#include <cstdint>
#include <vector>

#include "hybrid/models/image_classifier.h"

namespace torch::nn {
class LinearImpl;
}  // namespace torch::nn

namespace ht {

struct MLPConfig {
  int64_t in_features = 28 * 28;
  // 784-512-256-10 reaches ~85 % (84.8-85.7 over seeds) on Fashion-MNIST test after one epoch
  // of Adam (lr 1e-3, batch 64, normalised pixels); 256-128 stays near 84.5 %.
  std::vector<int64_t> hidden = {512, 256};
  int64_t num_classes = 10;
};

// Parameters fc1.{weight,bias}, fc2..., one Linear per layer, PyTorch's default initialisation.
class MLP : public ImageClassifier {
 public:
  explicit MLP(MLPConfig config = {});
  at::Tensor forward(const at::Tensor& images) override;  // [B, ...] -> [B, num_classes]

 private:
  std::vector<std::shared_ptr<torch::nn::LinearImpl>> layers_;
};

}  // namespace ht
