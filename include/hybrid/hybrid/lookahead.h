// Lookahead (Zhang et al. 2019) and SNOO (Kallusky et al. 2025) as step strategies over the
// trainer's optimizer: the no-learning baselines the hybrid engine must beat.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hybrid/core/trainer.h"

namespace ht {

// Lookahead (Zhang et al. 2019) over the trainer's optimizer: every k full steps
// slow += alpha * (fast - slow); fast := slow. Optimizer state is kept. No learning, no prediction.
// With momentum > 0 it is SNOO (Kallusky et al. 2025): the pseudo-gradient s = slow - fast gets
// outer Nesterov momentum, b = momentum * b + s; slow -= alpha * (momentum * b + s). Its steady
// outer step is alpha / (1 - momentum) of the fast drift: above 1 it extrapolates, at 1 it damps.
// With until_step > 0 it hands over to plain steps at the first synchronisation at or after that
// step and frees its buffers (SNOO for the early phase only, plain training after it).
class LookaheadStrategy : public StepStrategy {
 public:
  LookaheadStrategy(int64_t k, double alpha, double momentum = 0.0, int64_t until_step = 0);
  std::string name() const override { return "lookahead"; }
  StepRecord run_step(Trainer& trainer) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  int64_t state_bytes() const override;  // slow weights (+ the momentum buffer)
  bool stopped() const { return stopped_; }  // handed over to plain steps (until_step reached)

 private:
  int64_t k_;
  double alpha_;
  double momentum_;
  int64_t until_step_;     // 0: never hand over
  bool stopped_ = false;   // past until_step: plain steps, no buffers
  int64_t count_ = 0;  // full steps since the last synchronisation
  std::vector<at::Tensor> slow_;
  std::vector<at::Tensor> outer_;  // SNOO's momentum buffer b (empty without momentum)
};

std::unique_ptr<StepStrategy> make_lookahead_strategy(int64_t k = 5, double alpha = 0.5, double momentum = 0.0,
                                                      int64_t until_step = 0);

}  // namespace ht
