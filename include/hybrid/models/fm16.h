// FM-16, the Fashion-MNIST task NiNo's nowcasters were trained on: three 3x3 convolutions of
// 16/32/32 channels (the first with stride 2), ReLU, global average pooling, a linear layer.
#pragma once

#include <memory>

#include "hybrid/models/image_classifier.h"

namespace torch::nn {
class Conv2dImpl;
class LinearImpl;
}  // namespace torch::nn

namespace ht {

// Parameters conv1.* [16, 1, 3, 3], conv2.* [32, 16, 3, 3], conv3.* [32, 32, 3, 3], fc.* [10, 32]:
// 14,410 in all, in the order of NiNo's Net(hid=(16, 32, 32)) so its neural graph matches.
class FM16 : public ImageClassifier {
 public:
  FM16();
  at::Tensor forward(const at::Tensor& images) override;  // [B, 1, 28, 28] -> [B, 10]

 private:
  std::shared_ptr<torch::nn::Conv2dImpl> conv1_, conv2_, conv3_;
  std::shared_ptr<torch::nn::LinearImpl> fc_;
};

}  // namespace ht
