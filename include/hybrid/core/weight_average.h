// An exponential moving average of a model's parameters (Polyak averaging), kept beside the
// weights and swapped in while evaluating: on noisy training it scores below the weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch {
namespace nn { class Module; }
namespace serialize { class OutputArchive; class InputArchive; }
}  // namespace torch

namespace ht {

class WeightAverage {
 public:
  // decay in (0, 1): after each update average = decay * average + (1 - decay) * weights; the
  // first update copies the weights. Holds one copy of every parameter of `module`.
  WeightAverage(torch::nn::Module& module, double decay);

  void update();                 // folds the module's current parameters in (under no-grad)
  void reset() { updates_ = 0; } // the next update starts the average over from the weights
  // Exchanges the average and the module's parameters in place, one tensor at a time (the only
  // temporary is one parameter-sized copy). Twice restores both bit for bit. No-op before the
  // first update.
  void swap();

  double decay() const { return decay_; }
  int64_t updates() const { return updates_; }
  int64_t bytes() const;
  const std::vector<at::Tensor>& tensors() const { return average_; }

  // Keyed by parameter name; load() checks names and shapes and names the mismatch.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive, const std::string& what);
  // Copies an average saved by save() straight into `module`'s parameters (sampling, eval).
  static void read_into(torch::serialize::InputArchive& archive, torch::nn::Module& module, const std::string& what);

 private:
  double decay_;
  int64_t updates_ = 0;
  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;   // the module's parameters (shared storage)
  std::vector<at::Tensor> average_;  // same shapes
};

}  // namespace ht
