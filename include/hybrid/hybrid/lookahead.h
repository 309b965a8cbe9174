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
struct LookaheadOptions {
  int64_t k = 5;           // fast steps per synchronisation
  double alpha = 0.5;      // slow step size (SNOO: outer learning rate)
  double momentum = 0.0;   // outer Nesterov momentum; > 0 makes it SNOO
  // Hand over to plain steps at the first synchronisation at or after this step and free the
  // buffers (SNOO for the early phase only). 0: never.
  int64_t until_step = 0;
  // Plain steps before this step; the first period starts at the first step at or after it, from
  // the weights there (SNOO after a warmup or a plateau plain leaves faster). 0: from the first step.
  int64_t start_step = 0;
  // SNOO only: from the first synchronisation at or after late_step, outer momentum late_momentum,
  // with alpha rescaled so the steady outer step alpha / (1 - momentum) stays what it was, and the
  // buffer rescaled by (1 - momentum) / (1 - late_momentum) so the step does not jump at the switch.
  // Momentum buys the tiny GPT's early plateau exit and costs after it (BENCHMARKS.md 9). 0: never.
  int64_t late_step = 0;
  double late_momentum = 0.0;
  // SNOO only: divide the outer step by 1 - momentum^(t+1) at the t-th synchronisation, the
  // Nesterov form of Adam's bias correction. The buffer starts at zero, so without it the first
  // outer steps are alpha * (1 + momentum) of the drift (0.51 at 0.3 / 0.7), not the steady 1:
  // early SNOO lags plain steps. With it every outer step of a steady drift is the steady one.
  bool bias_correction = false;
};

class LookaheadStrategy : public StepStrategy {
 public:
  explicit LookaheadStrategy(const LookaheadOptions& options);
  LookaheadStrategy(int64_t k, double alpha, double momentum = 0.0, int64_t until_step = 0);
  std::string name() const override { return "lookahead"; }
  StepRecord run_step(Trainer& trainer) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  int64_t state_bytes() const override;  // slow weights (+ the momentum buffer)
  bool started() const { return started_; }  // past start_step: syncing
  bool stopped() const { return stopped_; }  // handed over to plain steps (until_step reached)
  bool late() const { return late_; }        // switched to late_momentum (late_step reached)

 private:
  double momentum() const { return late_ ? options_.late_momentum : options_.momentum; }
  double alpha() const;  // options_.alpha, rescaled once late
  void switch_to_late_momentum();

  LookaheadOptions options_;
  bool started_ = false;   // reached start_step: buffers live until stopped_
  bool stopped_ = false;   // past until_step: plain steps, no buffers
  bool late_ = false;      // past late_step: late_momentum
  int64_t count_ = 0;  // full steps since the last synchronisation
  int64_t syncs_ = 0;  // synchronisations done (bias_correction's t)
  std::vector<at::Tensor> slow_;
  std::vector<at::Tensor> outer_;  // SNOO's momentum buffer b (empty without momentum)
};

std::unique_ptr<StepStrategy> make_lookahead_strategy(const LookaheadOptions& options);
std::unique_ptr<StepStrategy> make_lookahead_strategy(int64_t k = 5, double alpha = 0.5, double momentum = 0.0,
                                                      int64_t until_step = 0);

}  // namespace ht
