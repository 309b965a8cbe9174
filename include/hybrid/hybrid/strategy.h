// The hybrid predictive training engine as an ht::StepStrategy: its public face (options, the
// end-of-run summary) and its factory. The engine itself is private (src/hybrid/hybrid_engine.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "hybrid/core/trainer.h"
#include "hybrid/hybrid/options.h"
#include "hybrid/hybrid/predictor.h"

namespace ht {

struct HybridSummary {
  std::string predictor;
  // The run's steps, as the trainer counts them: rolled-back predicted steps are taken back, so
  // steps_by_phase[Predict] holds kept predicted steps only (a rolled-back step reports as the
  // correct step that replaced it).
  int64_t steps = 0;
  int64_t steps_by_phase[4] = {0, 0, 0, 0};   // indexed by Phase
  double ms_by_phase[4] = {0, 0, 0, 0};       // predict: also the undone predicted steps' time
  int64_t predicted_applied = 0;   // predicted updates added to the weights
  int64_t predicted_kept = 0;      // of those, not rolled back
  int64_t predicted_undone = 0;    // of those, rolled back (kept + undone = applied once verified)
  int64_t recorded_steps = 0;      // real steps that recorded for the predictor (what recording costs)
  int64_t verifications = 0;
  int64_t accepted = 0;
  int64_t rollbacks = 0;
  int64_t verify_forwards = 0;     // forward passes spent on verification and rate probes
  int64_t phases_predict = 0;
  int64_t snapshot_bytes = 0;      // rollback buffer size
  int64_t snapshot_bytes_copied = 0;
  int64_t buffer_bytes = 0;        // recording + prediction buffers
  int64_t predictor_bytes = 0;
  double plain_step_ms = 0.0;      // EMA of an unrecorded full step
  double recorded_step_ms = 0.0;   // EMA of a recorded full step
  double estimated_saved_ms = 0.0; // kept predictions x plain step - predict time - recording cost
  double final_confidence = 0.0;
  int64_t final_horizon = 0;

  double share_predicted() const { return steps ? double(steps_by_phase[2]) / steps : 0.0; }  // kept
  double acceptance_rate() const { return verifications ? double(accepted) / verifications : 0.0; }
  std::string to_string() const;
};

// The trainer calls run_step() once per step; real steps go through Trainer::full_step(), predicted
// steps add predicted updates to the weights under no-grad, verified and undone exactly when wrong.
class HybridStrategy : public StepStrategy {
 public:
  std::string name() const override { return "hybrid"; }
  std::string summary_text() const override { return summary().to_string(); }
  // What the run did so far (complete after fit() returns): steps by phase, kept and undone
  // predicted updates, verifications, time per phase.
  virtual const HybridSummary& summary() const = 0;
  virtual const HybridOptions& options() const = 0;
  virtual const UpdatePredictor& predictor() const = 0;
};

// predictor: null builds the one options.predictor names (the predictor registry); tests and
// users may pass their own. Throws OptionsError for options out of range.
std::unique_ptr<HybridStrategy> make_hybrid_strategy(const HybridOptions& options,
                                                     std::unique_ptr<UpdatePredictor> predictor = nullptr);

}  // namespace ht
