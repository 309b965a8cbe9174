// Nowcast mode's engine (private to src/hybrid): the recorded states, the jumps and their verdicts,
// the horizon schedule. Step logic in nowcast_strategy.cpp; what a checkpoint keeps in nowcast_state.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "hybrid/core/data.h"
#include "hybrid/hybrid/nowcast.h"
#include "hybrid/hybrid/nowcast_strategy.h"
#include "hybrid/plain_trend.h"

namespace ht {

class NowcastEngine final : public NowcastStrategy {
 public:
  NowcastEngine(NowcastStrategyOptions options, NowcasterFactory factory);

  StepRecord run_step(Trainer& trainer) override;
  void on_finish(Trainer& trainer) override;
  bool at_verified_point() const override { return !pending_; }
  const NowcastSummary& summary() const override { return summary_; }
  const NowcastStrategyOptions& options() const override { return opt_; }

  // nowcast_state.cpp: the host memory the engine holds, and its part of a checkpoint.
  int64_t state_bytes() const override;
  void save(torch::serialize::OutputArchive& a) const override;
  void load(torch::serialize::InputArchive& a) override;

 private:
  // The run the jump schedule and last_jump_fraction span: schedule_steps, or the trainer's length.
  int64_t run_steps(const Trainer& trainer) const;

  // Why the jump that would replace 0-based step s is not made; empty when it is.
  std::string why_no_jump(const Trainer& trainer, int64_t s) const;

  // The parameters, their spec, the state buffers. At the first step, so the model is the
  // trainer's; a checkpoint may have filled some state buffers already (their shapes are checked
  // against the parameters here). The nowcaster for this spec is built at the first jump made
  // (model()): a run whose budget allows none does not pay for NiNo's graph (4 s on the 6 x 256 GPT).
  void ensure_ready(Trainer& trainer);

  void record(int64_t slot);
  double tolerance_at(int64_t k) const;

  // How far a jump of k intervals goes, for the log: at the pace of the states it was predicted
  // from, which under horizon_by_schedule is not plain's pace ahead.
  std::string ahead_text(int64_t k) const;

  int64_t horizon_at(int64_t s) const;

  // The verdict's probe. Held out (probe_holdout): the probe split's first probe_batches batches,
  // assembled once. Otherwise the next probe_batches training batches, peeked: the data cursor is
  // put back, so training sees plain mode's data order and the probe is not yet trained on in this
  // epoch (it was in earlier ones: training batches cannot show overfitting; probe_holdout can).
  Batch peek_probe(Trainer& trainer);
  double probe_loss(Trainer& trainer, const Batch& probe);
  bool all_finite() const;

  // The nowcaster for this network, built at the first prediction (timed as set-up).
  NowcastModel& model();

  // The weights predicted k intervals ahead, written over the parameters (the states are intact).
  void predict_into_params(int64_t k);

  void load_params(const std::vector<at::Tensor>& from);
  void restore_params() { load_params(states_[kNowcastContext - 1]); }  // the weights before the jump

  // The horizons a jump tries: the schedule's k, then (horizon_search > 1) k x 2, k / 2, k x 4,
  // k / 4, ... within [1, min(horizon_max, cap)], without repeats.
  std::vector<int64_t> candidates(int64_t k) const;

  // One jump at step s + 1: predict in place from the 5 states (the 5th, a copy of the weights,
  // is also the undo snapshot), verify, keep or undo. True when kept (the step is the jump).
  bool jump(Trainer& trainer, int64_t s, StepRecord& rec);

  void count_failure(int64_t k_schedule);

  // After a jump that failed its verdict, undone or not: the cap halves, and failures in a row
  // make the schedule skip jumps.
  void shorten_horizon(int64_t k_schedule);

  void count_success(int64_t k);

  // plain_model = power: plain's exponent, from the probe losses of the five states before the
  // first jump made, at steps jump_step - 4 x interval .. jump_step. No jump was kept before it,
  // so they are plain's own trajectory. Once per run; the weights are the 5th state again after.
  void fit_plain_exponent(Trainer& trainer, int64_t jump_step);

  // Delayed verification's jump at step s + 1: what undoing it later needs is kept (the 5th
  // state is already the weights), the weights jump, training goes on from them. True when made.
  bool jump_to_judge_later(Trainer& trainer, int64_t s, StepRecord& rec);

  // The verdict on a delayed jump, at the step after its window (see verify_after). True: kept.
  // False: weights, optimizer state, data cursor, random state, step count and the recording
  // position are as before the jump. States the window recorded (slots 0-2, from the jumped
  // trajectory) are recorded again, at the same steps, by the redone ones; the states before the
  // jump that the verdict scores (the last trend_states slots) are out of its reach (validate).
  bool judge(Trainer& trainer, StepRecord& rec);

  // A prediction's cost in this run's mean step times: the nowcaster's time per scalar (timed once
  // on a small layer, or the option's) times this model's scalars; under half a step counts as
  // none. 0 before 10 real steps (a resumed run's first few): nothing to price it against yet.
  // Data-parallel ranks time differently; they price the jump at their mean, so all decide alike.
  int64_t prediction_cost_steps(Trainer& trainer);

  // A kept jump's lead over plain after its window: the steps plain, carried on as the verdict
  // guessed it, needs to reach the jump's loss, less the window. 0 where plain was not expected to
  // improve or the jump is not below it.
  static int64_t steps_ahead_of_plain(const PlainGuess& plain, double now, int64_t window);

  // A jump kept behind plain (keep_progress) lags it by window - n, in [0, window]: the whole
  // window where plain was not expected to improve.
  static int64_t steps_behind_plain(const PlainGuess& plain, double now, int64_t window);

  void change_optimizer_state(Trainer& trainer);

  NowcastStrategyOptions opt_;
  NowcasterFactory factory_;
  bool ready_ = false;
  NowcastSpec spec_;
  JumpKinds jump_kinds_ = JumpKinds::parse(opt_.jump_kinds);  // opt_ is declared (and validated) first
  std::unique_ptr<NowcastModel> model_;  // built at the first jump
  int64_t kept_bytes_ = 0;
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> states_[kNowcastContext];  // [slot][parameter], host memory
  std::vector<at::Tensor> scratch_;                    // the prediction, when it cannot go in place
  bool in_place_ = true;
  std::vector<int64_t> horizons_;
  int64_t interval_ = 1;
  int64_t recorded_ = 0;    // states recorded in this period
  int64_t cap_ = 0;         // horizon cap: halves after a failed jump, doubles after a kept one
  int64_t fails_ = 0;       // failed jumps in a row
  int64_t skip_left_ = 0;   // due jumps still to skip
  // Delayed verification: a jump made at step jump_step_ waits for its verdict.
  bool pending_ = false;
  int64_t jump_step_ = 0;
  int64_t pending_k_ = 0;
  int64_t trend_from_ = 0;  // the oldest state before the jump still held (a checkpoint may lack some)
  bool exponent_fitted_ = false;  // plain_model = power: tried once, at the first jump made
  double plain_exponent_ = NAN;   // its b; NaN: the verdicts use the trend
  int64_t real_steps_ = 0;      // real steps since this engine started (summary_.real_ms's count)
  double ms_per_scalar_ = -1.0;  // a prediction's time per scalar, found at the first jump decision
  DataCursor cursor_;
  at::Tensor optimizer_snapshot_;  // [bytes] uint8, the optimizer's checkpoint format
  Batch held_out_probe_;           // probe_holdout: the probe split's batches, kept between verdicts
  at::Tensor random_state_;
  NowcastSummary summary_;
};

}  // namespace ht
