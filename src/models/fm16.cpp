// FM-16 (NiNo's in-distribution vision task, after Kofinas et al.'s neural-graph benchmark) and its
// registry entry: the model the released nowcasters know best, so their transfer is measurable.
#include "hybrid/models/fm16.h"

#include <torch/torch.h>

#include "hybrid/models/gpt.h"  // count_parameters
#include "hybrid/models/model_registry.h"

namespace ht {

FM16::FM16() {
  namespace nn = torch::nn;
  // NiNo's Net: the first conv strides by 2 without padding (28 -> 13), the others keep 13 x 13.
  conv1_ = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 16, 3).stride(2)));
  conv2_ = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(16, 32, 3).padding(1)));
  conv3_ = register_module("conv3", nn::Conv2d(nn::Conv2dOptions(32, 32, 3).padding(1)));
  fc_ = register_module("fc", nn::Linear(32, 10));
}

at::Tensor FM16::forward(const at::Tensor& images) {
  auto x = at::relu(conv1_->forward(images));  // [B, 16, 13, 13]
  x = at::relu(conv2_->forward(x));            // [B, 32, 13, 13]
  x = at::relu(conv3_->forward(x));            // [B, 32, 13, 13]
  return fc_->forward(x.mean({2, 3}));         // global average pool [B, 32] -> [B, 10]
}

ModelSpec fm16_model_spec() {
  ModelSpec s;
  s.name = "fm16";
  s.help = "FM-16: NiNo's Fashion-MNIST CNN (convs 16/32/32, global average pooling), 14k parameters";
  s.data = DataKind::Images;
  s.build = [](const ModelSettings&, const DataShape&, const BuildOptions&) {
    auto model = std::make_shared<FM16>();
    BuiltModel b;
    b.module = model;
    b.objective = make_image_classifier_objective(model);
    b.summary = "fm16: " + std::to_string(count_parameters(*model)) + " parameters";
    b.muon.input_output = {"conv1.weight", "fc.weight"};
    return b;
  };
  // No analytic memory model: the planner measures a step (measured_memory in memory_plan.h).
  return s;
}

}  // namespace ht
