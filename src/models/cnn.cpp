// Small CNN classifier: two 3x3 conv stages halve the image twice; kept narrow so a Fashion-MNIST
// epoch stays quick on two cores.
#include "hybrid/models/cnn.h"

#include <stdexcept>

#include <torch/torch.h>

#include "hybrid/models/gpt.h"  // count_parameters
#include "hybrid/models/memory_plan.h"
#include "hybrid/models/model_registry.h"

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

// The registry's entry (model_registry.cpp).
ModelSpec cnn_model_spec() {
  ModelSpec s;
  s.name = "cnn";
  s.help = "two conv+pool stages and a linear layer for Fashion-MNIST (~87 %)";
  s.data = DataKind::Images;
  s.build = [](const ModelSettings&, const DataShape&, const BuildOptions&) {
    auto model = std::make_shared<ConvNet>();
    BuiltModel b;
    b.module = model;
    b.objective = make_image_classifier_objective(model);
    b.summary = "cnn: " + std::to_string(count_parameters(*model)) + " parameters";
    b.muon.input_output = {"conv1.weight", "fc.weight"};
    return b;
  };
  s.estimate = [](const ModelSettings&, const TrainShape& shape, const MemoryLevers& levers) {
    return estimate_classifier_memory("cnn", shape, levers);
  };
  return s;
}

}  // namespace ht
