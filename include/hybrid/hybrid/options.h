// Configuration of the hybrid predictive training engine and of its predictors.
// validate() throws std::invalid_argument naming the offending field and the accepted range.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace ht {

struct HybridOptions {
  // Phase lengths (in trainer steps).
  // The defaults suit the "mean" predictor (measured on a noisy MLP regression with Adam: the
  // mean update over 64 steps stays a descent direction for 32-64 steps, single updates do not).
  int64_t warmup_steps = 50;       // plain full steps before anything is recorded
  int64_t full_steps = 64;         // recorded full steps per cycle (extended until the predictor is ready;
                                   // drift: >= 4, the least its slope test fits)
  int64_t correct_steps = 16;      // real steps after a predict phase: measure the error, let Adam settle
  int64_t min_predict_steps = 32;  // first horizon (and a probe's); rollbacks may shrink it below
  int64_t max_predict_steps = 64;  // the horizon grows on success up to this

  // The update predictor, by its registry name (predictor_registry.h: mean, regression, drift,
  // last, ema, dmd, rssm), and the values of its own options that differ from their defaults
  // (e.g. {"drift_tstat", 2.5}); every key must be declared by a registered predictor.
  std::string predictor = "mean";
  std::map<std::string, double> predictor_options;
  // A predictor option's value: set here, else the default its predictor declares.
  double predictor_option(const std::string& key) const;
  int64_t groups = 4;              // layer groups (contiguous runs of parameter tensors)
  uint64_t seed = 1234;            // the stochastic latent's generator

  // Verification: "batch" = forward on every predicted step's own training batch (no
  // oscillation test: successive losses are different batches');
  // "holdout" = forward on a probe (the next probe_batches training batches, peeked: the data
  // order stays plain mode's, and they are not yet trained on) after the 4th predicted step of
  // a phase, every verify_every steps and at the end of the phase. Either way a failed check
  // restores the last verified weights.
  enum class Verify { Batch, Holdout };
  Verify verify = Verify::Holdout;
  int64_t verify_every = 16;
  int64_t probe_batches = 2;       // training batches concatenated into the probe
  double tolerance = 0.0;          // accepted loss rise, relative to the last verified loss
  // Holdout: a kept predicted step takes a step of the budget (and of the schedule) from the
  // real steps, so it must lower the probe loss by at least this fraction of what one real step
  // lowers it (the real steps' recent per-step rate). 0 = any decrease passes. A quarter keeps
  // steps that pay for their time (an axpy and a share of the probe forwards) and rejects
  // decreases at the level of the probe's noise.
  double min_step_worth = 0.25;
  double spike_zscore = 4.0;       // verified losses (batch or probe) this many sd above the real steps' fail
  int64_t loss_window = 32;        // losses kept for z-scores and oscillation (>= 8: the spike test needs 8)
  double grad_explosion = 10.0;    // grad norm above this multiple of its EMA is divergence

  // Confidence (in [0, 1]) gates the Predict phase and scales the step multiplier.
  double enter_confidence = 0.35;
  double max_step_scale = 2.0;     // predicted update multiplier at full confidence (1 = off)

  // Never slower: predict only while it lowers the loss faster per second than full steps.
  bool pay_check = true;           // off makes the schedule independent of wall-clock (tests)
  // What the pay check's rates are per: Seconds (wall-clock: phase decisions then depend on the
  // machine's load, so reruns can differ) or Steps (loss decrease per step: deterministic, and
  // stricter, since a predicted step costs less than a real one but must lower the loss as much).
  enum class Clock { Seconds, Steps };
  Clock pay_check_clock = Clock::Seconds;
  double pay_margin = 1.0;         // predict phases must reach this fraction of the full rate
  int64_t reprobe_min = 32;        // full steps between probes when prediction does not pay
  int64_t reprobe_max = 512;       // the interval doubles after each failed probe up to this

  bool snapshot_on_host = true;    // rollback buffers in CPU memory when parameters are not

  void validate() const;  // throws OptionsError("HybridOptions.<field> ...")
};

HybridOptions::Verify parse_verify(const std::string& name);  // "batch" | "holdout"
const char* to_string(HybridOptions::Verify verify);
HybridOptions::Clock parse_clock(const std::string& name);    // "seconds" | "steps"
const char* to_string(HybridOptions::Clock clock);

}  // namespace ht
