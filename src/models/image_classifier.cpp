// Name-based construction of the image classifiers and their cross-entropy objective.
#include "hybrid/models/image_classifier.h"

#include <stdexcept>

#include <torch/torch.h>

#include "hybrid/models/cnn.h"
#include "hybrid/models/mlp.h"

namespace ht {

std::vector<std::string> image_classifier_names() { return {"mlp", "cnn"}; }

std::shared_ptr<ImageClassifier> make_image_classifier(const std::string& name) {
  if (name == "mlp") return std::make_shared<MLP>();
  if (name == "cnn") return std::make_shared<ConvNet>();
  std::string valid;
  for (const auto& n : image_classifier_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown image classifier '" + name + "'; valid: " + valid);
}

std::unique_ptr<Objective> make_image_classifier_objective(std::shared_ptr<ImageClassifier> model) {
  if (!model) throw std::invalid_argument("make_image_classifier_objective: null model");
  ImageClassifier* raw = model.get();  // kept alive by the objective's module pointer
  return make_classifier_objective(std::move(model),
                                   [raw](const at::Tensor& x) { return raw->forward(x); });
}

}  // namespace ht
