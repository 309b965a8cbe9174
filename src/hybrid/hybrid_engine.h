// The hybrid engine's state and step logic (private to src/hybrid): phases from the controller,
// recording for the predictor, predicted steps, verification, rollback and the summary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hybrid/controller.h"
#include "hybrid/divergence.h"
#include "hybrid/hybrid/strategy.h"
#include "hybrid/snapshot.h"
#include "hybrid/update_sample.h"

namespace ht {

class HybridEngine final : public HybridStrategy {
 public:
  // predictor: nullptr builds the one options.predictor names (tests inject their own).
  explicit HybridEngine(HybridOptions options, std::unique_ptr<UpdatePredictor> predictor = nullptr);

  StepRecord run_step(Trainer& trainer) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  void on_finish(Trainer& trainer) override;
  int64_t state_bytes() const override;  // snapshot + buffers + predictor
  // Unverified only between a predicted step and the check that keeps or undoes it.
  bool at_verified_point() const override {
    return ctl_.phase() != Phase::Predict || ctl_.steps_in_phase() == 0 || ahead_ == ref_ahead_;
  }

  const HybridSummary& summary() const override { return summary_; }
  const HybridOptions& options() const override { return opt_; }
  const UpdatePredictor& predictor() const override { return *predictor_; }
  const PhaseController& controller() const { return ctl_; }

 private:
  void ensure_buffers(Trainer& trainer);
  FullStepResult real_step(Trainer& trainer, Phase phase, bool record, StepRecord& rec);
  void end_stretch(Trainer& trainer, StepRecord& rec);
  bool predicted_step(Trainer& trainer, StepRecord& rec);  // true: rolled back
  void correct_after_rollback(Trainer& trainer, StepRecord& rec);
  void enter_predict(Trainer& trainer);
  void finish_predict_phase(Trainer& trainer, double final_probe_loss);
  // required: the probe loss the steps since the last verified point must reach (holdout). The
  // predicted loss only calibrates the controller; it never widens what is accepted.
  std::string check_prediction(double actual, double required);
  void rollback(Trainer& trainer, const std::string& why, StepRecord& rec);
  void measure_probe_before_decision(Trainer& trainer);
  double probe_loss(Trainer& trainer, const Batch& batch);
  double batch_loss(Trainer& trainer, const Batch& batch);
  // Cosine and relative error of `predicted` x predicted_scale against `truth`, per tensor,
  // weighted by the parameters' element counts (the vectors may hold samples of the tensors).
  void measure_prediction_error(const std::vector<at::Tensor>& truth, const std::vector<at::Tensor>& predicted,
                                double predicted_scale, StepRecord& rec);
  void release_gradients(Trainer& trainer);
  TrainingFeatures features(Trainer& trainer, const FullStepResult& r);
  void update_loss_stats(double loss);
  void log_transition(Trainer& trainer, const std::string& what);

  HybridOptions opt_;
  std::unique_ptr<UpdatePredictor> predictor_;
  PhaseController ctl_;
  DivergenceDetector div_;
  WeightSnapshot snapshot_;

  // Parameter handles (shared storage with the model) and preallocated per-parameter buffers.
  std::vector<at::Tensor> params_;     // the optimizer's parameters
  std::vector<at::Tensor> state_;      // params_ + floating module buffers: what a rollback restores
  // Update predictors only: model-sized buffers for the weights before a recorded step, the
  // update it made and the predictor's output, which the next recorded step is measured against.
  std::vector<at::Tensor> before_;
  std::vector<at::Tensor> delta_;
  std::vector<at::Tensor> predicted_;
  // Trajectory predictors add their prediction in place and are measured on strided samples:
  // the weights at the stretch's first recorded step and the last predicted update applied.
  UpdateSampler sampler_;
  std::vector<at::Tensor> first_sample_;
  std::vector<at::Tensor> applied_sample_;
  std::vector<int64_t> group_;         // layer group of each parameter
  int64_t num_groups_ = 0;
  int64_t max_steps_ = 0;

  // Trajectory bookkeeping.
  double lr_observed_ = 0.0;     // lr of the last observed update (predictions are rescaled)
  int64_t ahead_ = 0;            // predicted steps applied since the last observation
  bool contiguous_ = false;      // the previous step was a recorded real step
  int64_t stretch_n_ = 0;        // recorded real steps in the current stretch
  bool stretch_open_ = false;    // the stretch has not been handed to the predictor yet
  double last_scale_ = 1.0;      // scale of the last predicted step
  bool measure_next_ = false;    // the next real step measures the prediction error
  int64_t measure_ahead_ = 0;
  double measure_scale_ = 1.0;

  // Loss statistics of real steps.
  double loss_ema_ = NAN;
  double loss_var_ = 0.0;
  double loss_slope_ = 0.0;      // EMA of the per-step change of loss_ema_ (negative: falling)

  // Verification state of the current predict phase. The probe is the next training batches,
  // peeked without moving the data cursor, so not yet trained on while the phase runs; it
  // verifies (holdout mode) and measures both modes' rates.
  Batch probe_;
  bool have_probe_ = false;
  int64_t phases_on_probe_ = 0;  // predict phases verified on the current probe batch
  double ref_loss_ = NAN;        // loss at the last verified point (probe or train-loss EMA)
  int64_t ref_ahead_ = 0;        // ahead_ at that point
  int64_t phase_start_ahead_ = 0;  // ahead_ when the phase began
  double entry_loss_ = NAN;      // probe loss when the phase began
  double decision_loss_ = NAN;   // probe loss measured just before the controller decided
  bool have_decision_loss_ = false;
  double phase_sum_ = 0.0;       // batch mode: sum and count of this phase's step losses
  int64_t phase_n_ = 0;

  // Rates: loss decrease per second of a predict phase and of the real steps after it.
  double phase_ms_ = 0.0;        // time spent in this predict phase so far
  double stretch_ms_ = 0.0;      // time in real steps since the last predict phase ended
  int64_t stretch_steps_ = 0;    // and their number
  double probe_slope_ = 0.0;     // per-step change of the probe loss under those real steps
  bool have_probe_slope_ = false;
  double end_loss_ = NAN;        // probe loss when the last predict phase ended
  bool have_end_loss_ = false;
  double pending_pred_rate_ = 0.0;

  HybridSummary summary_;
  bool buffers_ready_ = false;
};

}  // namespace ht
