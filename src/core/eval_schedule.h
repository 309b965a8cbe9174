// When evaluations run: every `every` steps, each at the first verified point at or after the
// step it fell due at. Shared by Trainer::fit and the benchmarks, so both score the same weights.
#pragma once

#include <cstdint>

namespace ht {

class EvalSchedule {
 public:
  // final_step > 0 also makes an evaluation due at that step (a run's last).
  explicit EvalSchedule(int64_t every, int64_t final_step = 0) : every_(every), final_step_(final_step) {}

  // Call after each step with the step count and whether the weights are verified (no predicted
  // step that may still be undone). True: evaluate now. An evaluation that falls due while the
  // weights are unverified waits; a rollback to before its step makes it wait until training is
  // back there, so no weights that are later undone are ever scored.
  bool evaluate_now(int64_t step, bool verified) {
    const bool falls_due = (every_ > 0 && step % every_ == 0) || (final_step_ > 0 && step == final_step_);
    if (falls_due && due_ == 0) due_ = step;
    if (due_ == 0 || step < due_ || !verified) return false;
    due_ = 0;
    return true;
  }

  // The step a waiting evaluation fell due at (0 = none): a checkpoint written while the weights
  // are unverified saves it, so that a run resumed from there still runs that evaluation.
  int64_t due() const { return due_; }
  void restore_due(int64_t step) { due_ = step; }

 private:
  int64_t every_;
  int64_t final_step_;
  int64_t due_ = 0;  // the step the waiting evaluation fell due at, 0 = none
};

}  // namespace ht
