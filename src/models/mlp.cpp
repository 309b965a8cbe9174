// MLP classifier: the simplest model the trainer and the hybrid engine are tested on.
#include "hybrid/models/mlp.h"

#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include "hybrid/models/gpt.h"  // count_parameters
#include "hybrid/models/memory_plan.h"
#include "hybrid/models/model_registry.h"

namespace ht {

MLP::MLP(MLPConfig config) {
  int64_t in = config.in_features;
  std::vector<int64_t> widths = config.hidden;
  widths.push_back(config.num_classes);
  for (size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] < 1) throw std::invalid_argument("MLP: layer widths must be positive");
    const std::string name = "fc" + std::to_string(i + 1);
    layers_.push_back(register_module(name, torch::nn::Linear(in, widths[i])));
    in = widths[i];
  }
}

at::Tensor MLP::forward(const at::Tensor& images) {
  auto x = images.flatten(1);  // [B, in_features]
  for (size_t i = 0; i + 1 < layers_.size(); ++i) x = at::relu(layers_[i]->forward(x));
  return layers_.back()->forward(x);  // [B, num_classes]
}

// The registry's entry (model_registry.cpp).
ModelSpec mlp_model_spec() {
  ModelSpec s;
  s.name = "mlp";
  s.help = "784-512-256-10 perceptron for Fashion-MNIST (~85 % after one epoch)";
  s.data = DataKind::Images;
  s.build = [](const ModelSettings&, const DataShape&, const BuildOptions&) {
    const MLPConfig config;
    auto model = std::make_shared<MLP>(config);
    BuiltModel b;
    b.module = model;
    b.objective = make_image_classifier_objective(model);
    b.summary = "mlp: " + std::to_string(count_parameters(*model)) + " parameters";
    // The first layer and the head, named as MLP's constructor names its layers (fc1 .. fcN).
    b.muon.input_output = {"fc1.weight", "fc" + std::to_string(config.hidden.size() + 1) + ".weight"};
    return b;
  };
  s.estimate = [](const ModelSettings&, const TrainShape& shape, const MemoryLevers& levers) {
    return estimate_classifier_memory("mlp", shape, levers);
  };
  return s;
}

}  // namespace ht
