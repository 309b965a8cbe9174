// A small convolutional classifier for 28x28 grey images: conv3x3(1->16)+ReLU+maxpool,
// conv3x3(16->32)+ReLU+maxpool, then a linear layer from 32x7x7 features to the logits.
#pragma once

#include <cstdint>

#include "hybrid/models/image_classifier.h"

namespace torch::nn {
class Conv2dImpl;
class LinearImpl;
}  // namespace torch::nn

namespace ht {

struct ConvNetConfig {
  int64_t channels1 = 16;
  int64_t channels2 = 32;
  int64_t image_size = 28;  // square, divisible by 4
  int64_t num_classes = 10;
};

// Parameters conv1.*, conv2.*, fc.*.
class ConvNet : public ImageClassifier {
 public:
  explicit ConvNet(ConvNetConfig config = {});
  at::Tensor forward(const at::Tensor& images) override;  // [B, 1, S, S] -> [B, num_classes]

 private:
  std::shared_ptr<torch::nn::Conv2dImpl> conv1_, conv2_;
  std::shared_ptr<torch::nn::LinearImpl> fc_;
};

}  // namespace ht
