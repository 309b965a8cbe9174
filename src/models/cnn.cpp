// Small CNN classifier: two 3x3 conv stages halve the image twice; kept narrow so a Fashion-MNIST
// epoch stays quick on two cores.
#include "hybrid/models/cnn.h"

#include <stdexcept>

#include <torch/torch.h>

namespace ht {

ConvNet::ConvNet(ConvNetConfig config) {
  if (config.image_size < 4 || config.image_size % 4 != 0) {
    throw std::invalid_argument("ConvNet: image_size must be a positive multiple of 4");
  }
  namespace nn = torch::nn;
  conv1_ = register_module(
      "conv1", nn::Conv2d(nn::Conv2dOptions(1, config.channels1, 3).padding(1)));
  conv2_ = register_module(
      "conv2", nn::Conv2d(nn::Conv2dOptions(config.channels1, config.channels2, 3).padding(1)));
  const int64_t side = config.image_size / 4;
  fc_ = register_module("fc", nn::Linear(config.channels2 * side * side, config.num_classes));
}

at::Tensor ConvNet::forward(const at::Tensor& images) {
  auto x = at::max_pool2d(at::relu(conv1_->forward(images)), 2);  // [B, c1, S/2, S/2]
  x = at::max_pool2d(at::relu(conv2_->forward(x)), 2);            // [B, c2, S/4, S/4]
  return fc_->forward(x.flatten(1));                              // [B, classes]
}

}  // namespace ht
