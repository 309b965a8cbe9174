// Shared helpers for writing optimizer state into torch archives and checking it on load.
// Private to src/core: errors name the optimizer and the tensor that does not fit.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

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

}  // namespace ht
