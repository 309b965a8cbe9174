// Weight-update predictors: from the updates (or the weights) of recorded real steps, predict
// the per-tensor updates of the next steps. The hybrid strategy applies them in place, no backward.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch {
namespace serialize { class OutputArchive; class InputArchive; }
}  // namespace torch

namespace ht {

struct HybridOptions;

// The training state on a recorded step, model-agnostic. Layer groups are contiguous runs of the
// optimizer's parameter tensors (layer_groups() below), so they follow the model's layer order.
struct TrainingFeatures {
  int64_t step = 0;
  double progress = 0.0;   // step / max_steps
  double lr = 0.0;
  double loss = NAN;       // this step's training loss
  double loss_ema = NAN;
  double loss_var = 0.0;   // EMA variance of the loss around loss_ema
  double grad_norm = NAN;  // global, before clipping
  std::vector<double> group_update_norms;  // [G] L2 norm of this step's update per group
};

class UpdatePredictor {
 public:
  virtual ~UpdatePredictor() = default;
  virtual std::string name() const = 0;

  // Input::Updates, after each recorded real step: deltas[i] = w_after - w_before of parameter i.
  virtual void observe(const std::vector<at::Tensor>& deltas, const TrainingFeatures& features) = 0;
  // The weights jumped (a predict phase, an unrecorded stretch): the next observation starts a
  // new trajectory. Learned state (the rssm's model) survives; update histories do not.
  virtual void reset_history() = 0;
  virtual bool ready() const = 0;  // enough history to predict

  // Writes into out (preallocated, shaped like the parameters) the update of the step that comes
  // steps_ahead after the last observed one (1 = the next), when one predicted step stands for
  // `scale` observed ones (learning-rate ratio x confidence multiplier).
  virtual void predict_into(std::vector<at::Tensor>& out, int64_t steps_ahead, double scale = 1.0) = 0;
  // Adds that same update to `params` in place (the caller holds a NoGradGuard). The default
  // writes it into temporaries the size of the model first; trajectory predictors add their
  // stored direction directly, so a predict step needs no model-sized buffer of its own.
  virtual void add_prediction_to(std::vector<at::Tensor>& params, int64_t steps_ahead, double scale = 1.0);

  // Predicted relative change of the training loss over the next steps_ahead steps
  // (e.g. -0.01 = 1 % lower); NaN when the predictor does not model the loss.
  virtual double predicted_loss_change(int64_t /*steps_ahead*/) { return NAN; }
  // The predictor's own reliability estimate in [0, 1] (fit residual, ensemble agreement).
  virtual double self_confidence() const { return 1.0; }
  // Whether observe() reads TrainingFeatures::group_update_norms (a pass over the update).
  virtual bool wants_group_norms() const { return false; }

  // What the predictor watches. Updates: observe() after each recorded step, with its update.
  // Weights: observe_weights() after each recorded step with the weights themselves, then
  // end_stretch() once before a predict phase - trajectory predictors that need no per-step
  // update (no copy of the weights before each step).
  enum class Input { Updates, Weights };
  virtual Input input() const { return Input::Updates; }
  virtual void observe_weights(const std::vector<at::Tensor>& weights, const TrainingFeatures& features);
  virtual void end_stretch(const std::vector<at::Tensor>& weights);

  virtual int64_t state_bytes() const = 0;  // tensor bytes the predictor holds
  virtual void save(torch::serialize::OutputArchive& archive) const = 0;
  virtual void load(torch::serialize::InputArchive& archive) = 0;
};

// (a) Extrapolation: repeat the last update, or an EMA of recent updates.
std::unique_ptr<UpdatePredictor> make_last_predictor();
std::unique_ptr<UpdatePredictor> make_ema_predictor(double beta);
// Trajectory predictors over a recorded stretch of n weights w_1..w_n (Input::Weights):
// "mean": the mean update (w_n - w_1) / (n - 1) - single updates' noise and oscillation cancel,
// the drift stays (Lookahead / SNOO's direction, continued instead of interpolated).
// "regression": the least-squares line w(t) = a + b t through the stretch; the first predicted
// step moves to the line (a denoised point, as weight averaging does), every step adds b.
std::unique_ptr<UpdatePredictor> make_mean_predictor();
std::unique_ptr<UpdatePredictor> make_regression_predictor();
// "drift": the regression line, its slope kept only where its t-statistic exceeds `tstat`.
std::unique_ptr<UpdatePredictor> make_drift_predictor(double tstat);
// (b) DMD-style: per tensor, a linear recurrence d[t] = sum_j c[j] d[t-j] (j = 1..rank) fitted by
// least squares over the last `history` updates through their K x K Gram matrix.
std::unique_ptr<UpdatePredictor> make_dmd_predictor(int64_t history, int64_t rank, double ridge);
// (c) RSSM-lite: an ensemble of GRU + stochastic-latent models over TrainingFeatures that predicts
// the loss change and per-group multipliers of the EMA update direction.
std::unique_ptr<UpdatePredictor> make_rssm_predictor(const HybridOptions& options);
// By options.predictor, through the registry (predictor_registry.h).
std::unique_ptr<UpdatePredictor> make_update_predictor(const HybridOptions& options);

// group[i] for tensor i: num_groups contiguous runs of near-equal length (fewer if fewer tensors).
std::vector<int64_t> layer_groups(int64_t num_tensors, int64_t num_groups);

}  // namespace ht
