// UpdateScaleCallback: the update of chosen parameter slices times a factor, for the first steps.
// The copy is taken after the backward (gradients final) and rescaled after the optimizer's step.
#include "hybrid/core/update_scale.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace ht {
namespace {

std::string describe(const ParamSlice& s) {
  return "[" + std::to_string(s.begin) + ", " + std::to_string(s.end) + ") along dim " + std::to_string(s.dim) +
         " of parameter " + std::to_string(s.index);
}

}  // namespace

UpdateScaleCallback::UpdateScaleCallback(std::vector<ParamSlice> slices, double factor, int64_t until_step)
    : slices_(std::move(slices)), factor_(factor), until_step_(until_step) {
  if (!(factor >= 0.0)) throw std::invalid_argument("UpdateScaleCallback: factor must be >= 0, got " + std::to_string(factor));
  if (until_step < 0) throw std::invalid_argument("UpdateScaleCallback: until_step must be >= 0 (0: every step)");
  for (const auto& s : slices_)
    if (s.index < 0 || s.dim < 0 || s.begin < 0 || s.end <= s.begin)
      throw std::invalid_argument("UpdateScaleCallback: " + describe(s) + " is not a slice");
}

bool UpdateScaleCallback::active(const Trainer& trainer) const {
  return until_step_ == 0 || trainer.step() < until_step_;  // step(): the step being taken, from 0
}

void UpdateScaleCallback::after_backward(Trainer& trainer) {
  taken_ = false;
  if (!active(trainer)) {
    before_.clear();  // past until_step for good: free the copies
    return;
  }
  torch::NoGradGuard no_grad;
  const auto& params = trainer.optimizer().parameters();
  if (before_.empty()) {  // the first scaled step: allocate the copies once
    for (const auto& s : slices_) {
      if (s.index >= static_cast<int64_t>(params.size()) || s.dim >= params[s.index].dim() ||
          s.end > params[s.index].size(s.dim))
        throw std::out_of_range("UpdateScaleCallback: " + describe(s) + " lies outside the optimizer's parameters");
      before_.push_back(params[s.index].narrow(s.dim, s.begin, s.end - s.begin).clone());
    }
  } else {
    for (size_t i = 0; i < slices_.size(); ++i) {
      const ParamSlice& s = slices_[i];
      before_[i].copy_(params[s.index].narrow(s.dim, s.begin, s.end - s.begin));
    }
  }
  taken_ = true;
}

void UpdateScaleCallback::after_optimizer_step(Trainer& trainer) {
  if (!taken_) return;
  torch::NoGradGuard no_grad;
  const auto& params = trainer.optimizer().parameters();
  for (size_t i = 0; i < slices_.size(); ++i) {
    const ParamSlice& s = slices_[i];
    at::Tensor slice = params[s.index].narrow(s.dim, s.begin, s.end - s.begin);  // a view: updated in place
    slice.sub_(before_[i]).mul_(factor_).add_(before_[i]);  // before + factor * (after - before)
  }
  taken_ = false;
}

}  // namespace ht
