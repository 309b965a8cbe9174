// Shared helpers for writing optimizer state into torch archives and checking it on load.
// Private to src/core: errors name the optimizer and the tensor that does not fit.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "hybrid/core/optimizer.h"

namespace ht {

inline void write_tensor_list(torch::serialize::OutputArchive& a, const std::string& key,
                              const std::vector<at::Tensor>& ts) {
  a.write(key + ".count", torch::tensor(static_cast<int64_t>(ts.size())));
  for (size_t i = 0; i < ts.size(); ++i) a.write(key + "." + std::to_string(i), ts[i]);
}

// Copies into the existing tensors so they stay where they are (and keep their storage).
inline void read_tensor_list_into(torch::serialize::InputArchive& a, const std::string& key,
                                  std::vector<at::Tensor>& ts) {
  at::Tensor count;
  a.read(key + ".count", count);
  if (count.item<int64_t>() != static_cast<int64_t>(ts.size()))
    throw std::runtime_error("optimizer state '" + key + "' holds " +
                             std::to_string(count.item<int64_t>()) + " tensors, the model has " +
                             std::to_string(ts.size()) + " parameters: checkpoint of another model?");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < ts.size(); ++i) {
    at::Tensor t;
    a.read(key + "." + std::to_string(i), t);
    if (!t.sizes().equals(ts[i].sizes()))
      throw std::runtime_error("optimizer state '" + key + "." + std::to_string(i) +
                               "' has shape " + c10::str(t.sizes()) + ", expected " +
                               c10::str(ts[i].sizes()));
    ts[i].copy_(t);
  }
}

// The archive tags our optimizers write (torch::optim wrappers write none).
inline std::string optimizer_kind_name(int64_t kind) {
  switch (kind) {
    case 1: return "adamw";
    case 2: return "sgd";
    case 4: return "muon";
    case 8: return "adamw8bit";
    default: return "an unknown optimizer (tag " + std::to_string(kind) + ")";
  }
}

inline void expect_kind(torch::serialize::InputArchive& a, int64_t kind, const char* name) {
  at::Tensor k;
  if (!a.try_read("kind", k))
    throw std::runtime_error(std::string("the checkpoint holds no state of ours for ") + name +
                             " (a torch::optim optimizer's?): use the optimizer it was trained with");
  if (k.item<int64_t>() != kind)
    throw std::runtime_error("the checkpoint holds " + optimizer_kind_name(k.item<int64_t>()) +
                             " state, this run uses " + name +
                             ": resume with the optimizer it was trained with");
}

// Adam-style state - a step count and first and second moments - as AdamW and Muon keep it (Muon's
// second moments are empty for the matrices it orthogonalizes).
struct AdamMoments {
  int64_t t = 0;
  std::vector<at::Tensor> m, v;

  void save(torch::serialize::OutputArchive& a, int64_t kind) const {
    a.write("kind", torch::tensor(kind));
    a.write("t", torch::tensor(t));
    write_tensor_list(a, "m", m);
    write_tensor_list(a, "v", v);
  }
  void load(torch::serialize::InputArchive& a, int64_t kind, const char* name) {
    expect_kind(a, kind, name);
    at::Tensor step;
    a.read("t", step);
    t = step.item<int64_t>();
    read_tensor_list_into(a, "m", m);
    read_tensor_list_into(a, "v", v);
  }
  // Optimizer::change_state: Reset zeroes everything (bias correction starts over), ScaleMomentum
  // scales the first moments only.
  void change(Optimizer::StateChange change, double factor) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < m.size(); ++i) {
      if (change == Optimizer::StateChange::Reset) {
        m[i].zero_();
        v[i].zero_();
      } else {
        m[i].mul_(factor);
      }
    }
    if (change == Optimizer::StateChange::Reset) t = 0;
  }
  int64_t bytes() const {
    int64_t b = 0;
    for (size_t i = 0; i < m.size(); ++i) b += m[i].nbytes() + v[i].nbytes();
    return b;
  }
};

}  // namespace ht
