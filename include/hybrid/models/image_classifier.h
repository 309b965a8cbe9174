// Fashion-MNIST classifiers behind one interface: images [B, 1, 28, 28] float -> logits [B, 10].
// Pick one by name ("mlp", "cnn") and wrap it as a cross-entropy Objective for the trainer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "hybrid/core/objective.h"

namespace ht {

class ImageClassifier : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& images) = 0;  // [B, 1, H, W] -> [B, classes]
};

// "mlp" (784-512-256-10, ~85 % test accuracy after one Fashion-MNIST epoch) or "cnn" (two
// conv+pool stages then a linear layer, ~87 %). Throws std::invalid_argument listing the names.
std::shared_ptr<ImageClassifier> make_image_classifier(const std::string& name);
std::vector<std::string> image_classifier_names();

// Cross entropy of the logits against Batch.target [B] int64; evaluate() also counts accuracy.
std::unique_ptr<Objective> make_image_classifier_objective(std::shared_ptr<ImageClassifier> model);

}  // namespace ht
