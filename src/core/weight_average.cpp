// The exponential weight average: in-place updates, its lag correction, an exact swap for
// evaluation, and its checkpoint form (by parameter name, so sampling can read it alone).
#include "hybrid/core/weight_average.h"

#include <map>
#include <stdexcept>
#include <utility>

#include <torch/torch.h>

#include "hybrid/core/checkpoint_file.h"

namespace ht {
namespace {

// The stored tensor `key` of parameter `name` into `dst`, with the name and shape checked.
void read_tensor(torch::serialize::InputArchive& archive, const std::string& key, const std::string& name,
                 at::Tensor& dst, const std::string& what) {
  at::Tensor t;
  if (!archive.try_read(key, t))
    throw CheckpointError(what + ": its weight average has no tensor '" + key +
                          "': it was saved from a different model (check the model config)");
  if (!t.sizes().equals(dst.sizes()))
    throw CheckpointError(what + ": weight average '" + name + "' has shape " + c10::str(t.sizes()) +
                          " but the model expects " + c10::str(dst.sizes()));
  dst.copy_(t);
}

// average + c * (average - smooth): lerp with a negative weight extrapolates past the average.
at::Tensor corrected(const at::Tensor& average, const at::Tensor& smooth, double c) {
  return at::lerp(average, smooth, -c);
}

double saved_lag_correction(torch::serialize::InputArchive& archive) {
  at::Tensor saved;  // averages saved before lag correction existed had none
  if (!archive.try_read("lag_correction", saved)) return 0.0;
  return saved.item<double>();
}

}  // namespace

WeightAverage::WeightAverage(torch::nn::Module& module, double decay, double lag_correction)
    : decay_(decay), lag_correction_(lag_correction) {
  if (!(decay > 0.0 && decay < 1.0))
    throw std::invalid_argument("weight average decay must be in (0, 1), got " + std::to_string(decay));
  if (!(lag_correction >= 0.0 && lag_correction <= 1.0))
    throw std::invalid_argument("weight average lag correction must be in [0, 1], got " + std::to_string(lag_correction));
  torch::NoGradGuard no_grad;
  for (const auto& kv : module.named_parameters()) {
    names_.push_back(kv.key());
    params_.push_back(kv.value());
    average_.push_back(at::zeros_like(kv.value()).requires_grad_(false));
    if (lag_correction_ > 0.0) smooth_.push_back(at::zeros_like(kv.value()).requires_grad_(false));
  }
}

void WeightAverage::update() {
  if (swapped_) throw std::logic_error("WeightAverage::update while the average is swapped in: swap back first");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (updates_ == 0) average_[i].copy_(params_[i]);
    else average_[i].lerp_(params_[i], 1.0 - decay_);
    if (smooth_.empty()) continue;
    if (updates_ == 0) smooth_[i].copy_(average_[i]);
    else smooth_[i].lerp_(average_[i], 1.0 - decay_);
  }
  ++updates_;
}

std::vector<at::Tensor> WeightAverage::scored() const {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < average_.size(); ++i)
    out.push_back(smooth_.empty() ? average_[i] : corrected(average_[i], smooth_[i], lag_correction_));
  return out;
}

void WeightAverage::swap() {
  if (updates_ == 0) return;
  torch::NoGradGuard no_grad;
  if (smooth_.empty()) {
    // One scratch buffer per kind of parameter, as large as its largest, allocated before anything
    // moves: an allocation that fails leaves both as they were, and the temporary stays one
    // parameter's size.
    std::map<std::pair<at::ScalarType, std::string>, at::Tensor> scratch;
    for (const auto& p : params_) {
      at::Tensor& s = scratch[{p.scalar_type(), p.device().str()}];
      if (!s.defined() || s.numel() < p.numel()) s = at::empty({p.numel()}, p.options());
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      at::Tensor weights = scratch.at({params_[i].scalar_type(), params_[i].device().str()})
                               .narrow(0, 0, params_[i].numel())
                               .view(params_[i].sizes());
      weights.copy_(params_[i]);
      params_[i].copy_(average_[i]);
      average_[i].copy_(weights);
    }
    return;
  }
  if (!swapped_) {
    // Every copy first: an allocation that fails leaves the weights as they were. The in-place
    // lerp_ gives the bits corrected() does, without a temporary.
    try {
      for (const auto& p : params_) held_.push_back(p.clone());
    } catch (...) {
      held_.clear();
      throw;
    }
    for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(average_[i]).lerp_(smooth_[i], -lag_correction_);
  } else {
    for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(held_[i]);
    held_.clear();
  }
  swapped_ = !swapped_;
}

int64_t WeightAverage::bytes() const {
  int64_t b = 0;
  for (const auto* buffers : {&average_, &smooth_, &held_})
    for (const auto& t : *buffers) b += t.numel() * static_cast<int64_t>(t.element_size());
  return b;
}

void WeightAverage::save(torch::serialize::OutputArchive& archive) const {
  if (swapped_) throw std::logic_error("WeightAverage::save while the average is swapped in: swap back first");
  archive.write("updates", torch::tensor(updates_));
  archive.write("decay", torch::tensor(decay_, torch::kFloat64));
  archive.write("lag_correction", torch::tensor(lag_correction_, torch::kFloat64));
  for (size_t i = 0; i < names_.size(); ++i) archive.write("param/" + names_[i], average_[i]);
  for (size_t i = 0; i < smooth_.size(); ++i) archive.write("smooth/" + names_[i], smooth_[i]);
}

void WeightAverage::load(torch::serialize::InputArchive& archive, const std::string& what) {
  torch::NoGradGuard no_grad;
  at::Tensor updates;
  archive.read("updates", updates);
  for (size_t i = 0; i < names_.size(); ++i) read_tensor(archive, "param/" + names_[i], names_[i], average_[i], what);
  // Saved without a smooth average (no lag correction then): it starts over from the average,
  // as the first update would have started it.
  at::Tensor probe;
  const bool has_smooth = !names_.empty() && archive.try_read("smooth/" + names_[0], probe);
  for (size_t i = 0; i < smooth_.size(); ++i) {
    if (has_smooth) read_tensor(archive, "smooth/" + names_[i], names_[i], smooth_[i], what);
    else smooth_[i].copy_(average_[i]);
  }
  updates_ = updates.item<int64_t>();
}

void WeightAverage::read_into(torch::serialize::InputArchive& archive, torch::nn::Module& module,
                              const std::string& what) {
  torch::NoGradGuard no_grad;
  at::Tensor updates;
  archive.read("updates", updates);
  if (updates.item<int64_t>() == 0) return;  // never updated: the weights are what there is
  const double c = saved_lag_correction(archive);
  for (auto& kv : module.named_parameters()) {
    read_tensor(archive, "param/" + kv.key(), kv.key(), kv.value(), what);
    if (c == 0.0) continue;
    at::Tensor smooth = at::empty_like(kv.value());
    read_tensor(archive, "smooth/" + kv.key(), kv.key(), smooth, what);
    kv.value().copy_(corrected(kv.value(), smooth, c));
  }
}

}  // namespace ht
