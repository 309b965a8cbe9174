// The predictor factory by name (through the registry), the interface's defaults, and the layer-group split.
#include "hybrid/hybrid/predictor.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

#include "hybrid/hybrid/options.h"
#include "hybrid/hybrid/predictor_registry.h"

namespace ht {

std::unique_ptr<UpdatePredictor> make_update_predictor(const HybridOptions& o) {
  o.validate();
  return find_predictor(o.predictor).make(o);
}

void UpdatePredictor::observe_weights(const std::vector<at::Tensor>&, const TrainingFeatures&) {
  throw std::logic_error(name() + " predictor observes updates, not weights");
}

void UpdatePredictor::end_stretch(const std::vector<at::Tensor>&) {}

void UpdatePredictor::add_prediction_to(std::vector<at::Tensor>& params, int64_t steps_ahead, double scale) {
  std::vector<at::Tensor> update;
  update.reserve(params.size());
  for (const auto& p : params) update.push_back(at::empty_like(p));
  predict_into(update, steps_ahead, scale);
  for (size_t i = 0; i < params.size(); ++i) params[i].add_(update[i]);
}

std::vector<int64_t> layer_groups(int64_t num_tensors, int64_t num_groups) {
  const int64_t g = std::max<int64_t>(1, std::min(num_groups, num_tensors));
  std::vector<int64_t> group(static_cast<size_t>(num_tensors));
  for (int64_t i = 0; i < num_tensors; ++i) group[static_cast<size_t>(i)] = i * g / std::max<int64_t>(1, num_tensors);
  return group;
}

}  // namespace ht
