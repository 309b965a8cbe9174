// An exponential moving average of a model's parameters (Polyak averaging), kept beside the
// weights and swapped in while evaluating: on noisy training it scores below the weights.
// Optionally lag-corrected (a double exponential average) so it does not trail a moving run.
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
  // lag_correction c in [0, 1]: 0 scores the average itself, which trails weights moving at a
  // steady rate by decay / (1 - decay) updates. c > 0 also keeps smooth, the same average of the
  // average (one more copy, and one more while swapped in), and scores
  // average + c * (average - smooth), whose lag is (1 - c) times that: c = 1 follows a straight
  // path without lag (Brown's double exponential smoothing) at more of the weights' noise.
  WeightAverage(torch::nn::Module& module, double decay, double lag_correction = 0.0);

  void update();                 // folds the module's current parameters in (under no-grad)
  void reset() { updates_ = 0; } // the next update starts the average over from the weights
  // Puts the scored weights (the average, lag-corrected if asked) in the module's parameters in
  // place, or back: twice restores the weights and the average bit for bit. Without correction
  // it exchanges the two, one tensor at a time (the only temporary is one parameter-sized copy);
  // with it the weights wait in a copy while swapped out. No-op before the first update.
  void swap();

  double decay() const { return decay_; }
  double lag_correction() const { return lag_correction_; }
  int64_t updates() const { return updates_; }
  int64_t bytes() const;
  const std::vector<at::Tensor>& tensors() const { return average_; }  // the average, uncorrected
  // The weights evaluations score: the average, or with lag correction a new tensor per parameter.
  std::vector<at::Tensor> scored() const;

  // Keyed by parameter name; load() checks names and shapes and names the mismatch.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive, const std::string& what);
  // Copies the scored weights of an average saved by save() straight into `module`'s parameters
  // (sampling, eval), lag-corrected as it was saved.
  static void read_into(torch::serialize::InputArchive& archive, torch::nn::Module& module, const std::string& what);

 private:
  double decay_;
  double lag_correction_;
  int64_t updates_ = 0;
  bool swapped_ = false;             // with lag correction: the scored weights are in the module
  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;   // the module's parameters (shared storage)
  std::vector<at::Tensor> average_;  // same shapes
  std::vector<at::Tensor> smooth_;   // the average's average; empty without lag correction
  std::vector<at::Tensor> held_;     // the weights while swapped out (lag correction only)
};

}  // namespace ht
