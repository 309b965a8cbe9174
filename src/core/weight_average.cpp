// The exponential weight average: in-place updates, an exact swap for evaluation, and its
// checkpoint form (by parameter name, so sampling can read it without building a trainer).
#include "hybrid/core/weight_average.h"

#include <stdexcept>

#include <torch/torch.h>

#include "hybrid/core/checkpoint_file.h"

namespace ht {
namespace {

// The stored average of one parameter into `dst`, with the name and shape checked.
void read_tensor(torch::serialize::InputArchive& archive, const std::string& name, at::Tensor& dst,
                 const std::string& what) {
  at::Tensor t;
  if (!archive.try_read("param/" + name, t))
    throw CheckpointError(what + ": its weight average has no tensor '" + name +
                          "': it was saved from a different model (check the model config)");
  if (!t.sizes().equals(dst.sizes()))
    throw CheckpointError(what + ": weight average '" + name + "' has shape " + c10::str(t.sizes()) +
                          " but the model expects " + c10::str(dst.sizes()));
  dst.copy_(t);
}

}  // namespace

WeightAverage::WeightAverage(torch::nn::Module& module, double decay) : decay_(decay) {
  if (!(decay > 0.0 && decay < 1.0))
    throw std::invalid_argument("weight average decay must be in (0, 1), got " + std::to_string(decay));
  torch::NoGradGuard no_grad;
  for (const auto& kv : module.named_parameters()) {
    names_.push_back(kv.key());
    params_.push_back(kv.value());
    average_.push_back(at::zeros_like(kv.value()).requires_grad_(false));
  }
}

void WeightAverage::update() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (updates_ == 0) average_[i].copy_(params_[i]);
    else average_[i].lerp_(params_[i], 1.0 - decay_);
  }
  ++updates_;
}

void WeightAverage::swap() {
  if (updates_ == 0) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor weights = params_[i].clone();
    params_[i].copy_(average_[i]);
    average_[i].copy_(weights);
  }
}

int64_t WeightAverage::bytes() const {
  int64_t b = 0;
  for (const auto& t : average_) b += t.numel() * static_cast<int64_t>(t.element_size());
  return b;
}

void WeightAverage::save(torch::serialize::OutputArchive& archive) const {
  archive.write("updates", torch::tensor(updates_));
  archive.write("decay", torch::tensor(decay_, torch::kFloat64));
  for (size_t i = 0; i < names_.size(); ++i) archive.write("param/" + names_[i], average_[i]);
}

void WeightAverage::load(torch::serialize::InputArchive& archive, const std::string& what) {
  torch::NoGradGuard no_grad;
  at::Tensor updates;
  archive.read("updates", updates);
  for (size_t i = 0; i < names_.size(); ++i) read_tensor(archive, names_[i], average_[i], what);
  updates_ = updates.item<int64_t>();
}

void WeightAverage::read_into(torch::serialize::InputArchive& archive, torch::nn::Module& module,
                              const std::string& what) {
  torch::NoGradGuard no_grad;
  at::Tensor updates;
  archive.read("updates", updates);
  if (updates.item<int64_t>() == 0) return;  // never updated: the weights are what there is
  for (auto& kv : module.named_parameters()) read_tensor(archive, kv.key(), kv.value(), what);
}

}  // namespace ht
