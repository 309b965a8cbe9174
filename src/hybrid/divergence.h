// Divergence signals for predicted steps: non-finite or spiking loss (z-score over a window of
// real-step losses), gradient-norm explosion, and a loss that oscillates with growing amplitude.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch {
namespace serialize { class OutputArchive; class InputArchive; }
}  // namespace torch

namespace ht {

// Fixed-size ring of doubles with mean / standard deviation.
class LossWindow {
 public:
  explicit LossWindow(int64_t capacity = 32);
  void push(double x);
  void clear();
  int64_t size() const { return count_; }
  int64_t capacity() const { return static_cast<int64_t>(values_.size()); }
  double mean() const;
  double stddev() const;
  double at(int64_t i) const;  // i = 0 is the oldest value held
  void save(torch::serialize::OutputArchive& archive, const std::string& key) const;
  void load(torch::serialize::InputArchive& archive, const std::string& key);

 private:
  std::vector<double> values_;
  int64_t head_ = 0;   // next write position
  int64_t count_ = 0;
};

class DivergenceDetector {
 public:
  DivergenceDetector(int64_t window, double spike_zscore, double grad_factor);

  // Reference statistics from a real (full/correct) step. With check_grad (the first real step
  // after a predict phase) its gradient norm is tested first, against the norms before it: in an
  // average that already held it, a norm would need ~19x the others to pass a 10x limit, and no
  // norm could pass a limit of 20x or more. A flagged norm stays out of the average.
  // Returns the reason for flagging, or "".
  std::string observe_real_step(double loss, double grad_norm, bool check_grad = false);
  // Losses measured on successive verifications within one predict phase, on the same probe:
  // the strategy checks oscillation in holdout mode only, where differences are not batch noise.
  void observe_verified(double loss);
  void start_phase() { verified_.clear(); }

  // Each returns the reason for rejecting, or "" when the value is fine.
  std::string check_loss(double loss) const;       // non-finite, or z-score above the limit
  std::string check_grad(double grad_norm) const;  // above grad_factor x the EMA observed so far
  std::string check_oscillation() const;           // >= 4 alternating differences, growing

  double zscore(double loss) const;
  double grad_norm_ema() const { return grad_ema_; }

  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  LossWindow real_;
  LossWindow verified_;
  double spike_zscore_;
  double grad_factor_;
  double grad_ema_ = 0.0;
  int64_t grad_count_ = 0;
};

}  // namespace ht
