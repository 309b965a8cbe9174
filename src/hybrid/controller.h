// The phase state machine of the hybrid engine: Warmup -> Full -> Predict -> Correct -> Full...
// Pure bookkeeping (no tensors): it decides, the strategy acts and reports what it measured.
#pragma once

#include <cstdint>
#include <string>

#include "hybrid/core/metrics.h"
#include "hybrid/hybrid/options.h"

namespace torch {
namespace serialize { class OutputArchive; class InputArchive; }
}  // namespace torch

namespace ht {


// Confidence is calibrated on observed errors only: the recent acceptance rate of verifications,
// the cosine between predicted and true updates (update predictors: on the first recorded step
// after a predict phase; trajectory predictors: the next Full stretch's drift against the last
// applied update, at that stretch's end), the relative error of the predicted loss, and the
// predictor's own estimate. The Predict phase opens when it passes enter_confidence and
// predicted phases lower the loss faster per second than full steps.
class PhaseController {
 public:
  explicit PhaseController(const HybridOptions& options);

  Phase phase() const { return phase_; }
  int64_t steps_in_phase() const { return in_phase_; }
  bool recording() const;          // this real step must record its update for the predictor
  bool holding() const { return holding_; }  // Full without recording: prediction did not pay
  bool probing() const { return probing_; }  // this predict phase tests a closed gate
  int64_t horizon() const { return horizon_; }
  double confidence() const;
  double step_scale() const;       // multiplier on predicted updates, from confidence
  bool pays() const;               // predicted phases beat full steps per second (or untested)
  // The next on_real_step() will decide between Predict and hold (the strategy measures first).
  bool decision_due(bool predictor_ready) const;

  // Transitions. Each returns a human-readable reason when the phase changed, "" otherwise.
  std::string on_real_step(bool predictor_ready);  // after a warmup / full / correct step
  std::string on_predicted_step();                 // a predicted step that was kept (so far)
  // Verification failed: weights restored to the last verified point, `kept` predicted steps of
  // this phase survive. This step turns Correct; the next horizon shrinks to what held.
  std::string on_rollback(int64_t kept);

  // Calibration.
  void on_verification(bool accepted);
  void on_loss_error(double relative_error);
  void on_direction_error(double cosine);
  void set_predictor_confidence(double c) { predictor_conf_ = c; }
  // Loss decrease per second of the last predict phase and of the full stretch before it.
  void on_rates(double predict_rate, double full_rate);

  double acceptance() const;
  double predict_rate() const { return pred_rate_ema_; }
  double full_rate() const { return full_rate_ema_; }
  int64_t rate_samples() const { return rate_samples_; }

  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  std::string enter(Phase next, const std::string& why);
  std::string decide_after_full();

  HybridOptions opt_;
  Phase phase_ = Phase::Warmup;
  int64_t in_phase_ = 0;
  int64_t horizon_;
  bool holding_ = false;
  int64_t hold_left_ = 0;
  bool after_hold_ = false;   // this recording stretch follows a hold: probe even if gated
  bool probing_ = false;
  bool phase_clean_ = true;   // no rollback in the current predict phase
  int64_t reprobe_interval_;

  double ok_ = 1.0, bad_ = 0.0;  // decayed verification counts
  double cos_ema_ = 0.5;
  double loss_err_ema_ = 0.0;
  double predictor_conf_ = 1.0;
  double pred_rate_ema_ = 0.0, full_rate_ema_ = 0.0;
  int64_t rate_samples_ = 0;
};

}  // namespace ht
