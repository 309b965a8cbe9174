// NowcastModel's entry points: every input checked against the spec (with the fix in the error),
// then the model runs under NoGradGuard.
#include <string>

#include <ATen/ATen.h>

#include "hybrid/hybrid/nowcast.h"

namespace ht {
namespace {

std::string shape_str(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void check_tensor(const at::Tensor& t, const NowcastParam& p, const std::string& what) {
  if (!t.defined()) throw NowcastError("nowcast: " + what + " of '" + p.name + "' is undefined");
  if (!t.device().is_cpu() || t.scalar_type() != at::kFloat) {
    throw NowcastError("nowcast: " + what + " of '" + p.name +
                       "' must be a float32 CPU tensor, "
                       "got " +
                       std::string(c10::toString(t.scalar_type())) + " on " + t.device().str());
  }
  if (t.sizes() != at::IntArrayRef(p.shape)) {
    throw NowcastError("nowcast: " + what + " of '" + p.name + "' has shape " +
                       shape_str(t.sizes()) + " but the spec says " + shape_str(p.shape) +
                       " (pass tensors in spec().params order)");
  }
}

}  // namespace

void NowcastModel::predict(const std::vector<std::vector<at::Tensor>>& states, int64_t k,
                           const std::vector<at::Tensor>& out) {
  const auto& params = spec_.params;
  if (states.size() != params.size() || out.size() != params.size()) {
    throw NowcastError("nowcast: got states for " + std::to_string(states.size()) +
                       " tensors and " + std::to_string(out.size()) +
                       " outputs, but the model "
                       "was built for " +
                       std::to_string(params.size()) +
                       " parameters (one entry per spec().params, in that order)");
  }
  if (k < 1 || k > max_horizon()) {
    throw NowcastError("nowcast: horizon k = " + std::to_string(k) + " is outside 1.." +
                       std::to_string(max_horizon()) +
                       " (k counts recording intervals of "
                       "period / 5 steps ahead; 1 = the next one)");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (static_cast<int>(states[i].size()) != kNowcastContext) {
      throw NowcastError("nowcast: " + std::to_string(states[i].size()) + " states given for '" +
                         params[i].name + "'; " + name() + " takes the last " +
                         std::to_string(kNowcastContext) +
                         " recorded states, oldest first (the last is the current weights)");
    }
    for (int t = 0; t < kNowcastContext; ++t) {
      check_tensor(states[i][t], params[i], "state " + std::to_string(t));
    }
    check_tensor(out[i], params[i], "output");
    if (!out[i].is_contiguous()) {
      throw NowcastError("nowcast: output for '" + params[i].name + "' must be contiguous");
    }
  }
  at::NoGradGuard no_grad;
  predict_checked(states, k, out);
}

std::vector<at::Tensor> NowcastModel::predict(const std::vector<std::vector<at::Tensor>>& states,
                                              int64_t k) {
  std::vector<at::Tensor> out;
  for (const auto& p : spec_.params) out.push_back(at::empty(p.shape, at::kFloat));
  predict(states, k, out);
  return out;
}

}  // namespace ht
