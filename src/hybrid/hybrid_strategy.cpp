// The hybrid engine's step logic: real steps that record the optimizer's updates, predicted steps
// that add predicted updates to the weights in place (no backward, no graph, no model copy),
// verification against real losses, bit-exact rollback, and the bookkeeping behind the summary.
#include "hybrid/hybrid_engine.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "archive_io.h"
#include "hybrid/core/memory_monitor.h"

namespace ht {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Predict phases verified on one probe before it is replaced. One: the real steps after a phase
// train on its probe (it is peeked from the training stream), so the next phase needs unseen ones.
constexpr int64_t kProbeRefreshPhases = 1;
constexpr double kLossEma = 0.9;
// An early extra verification in every predict phase: a bad prediction then costs a few steps,
// not a whole verification interval.
constexpr int64_t kFirstCheck = 4;
constexpr double kTimeEma = 0.9;

int64_t tensor_bytes(const std::vector<at::Tensor>& ts) {
  int64_t b = 0;
  for (const auto& t : ts) b += t.numel() * static_cast<int64_t>(t.element_size());
  return b;
}

void ema(double& acc, double x, double beta) { acc = acc == 0.0 ? x : beta * acc + (1.0 - beta) * x; }

}  // namespace

HybridEngine::HybridEngine(HybridOptions options, std::unique_ptr<UpdatePredictor> predictor)
    : opt_((options.validate(), std::move(options))),
      predictor_(predictor ? std::move(predictor) : make_update_predictor(opt_)),
      ctl_(opt_),
      div_(opt_.loss_window, opt_.spike_zscore, opt_.grad_explosion) {
  summary_.predictor = predictor_->name();
}

double HybridEngine::step_cost(std::chrono::steady_clock::time_point t0) const {
  return opt_.pay_check_clock == HybridOptions::Clock::Steps ? 1.0 : ms_since(t0);
}

double HybridEngine::probe_cost(std::chrono::steady_clock::time_point t0) const {
  return opt_.pay_check_clock == HybridOptions::Clock::Steps ? 0.0 : ms_since(t0);  // steps: a probe is no step
}

std::unique_ptr<HybridStrategy> make_hybrid_strategy(const HybridOptions& options,
                                                     std::unique_ptr<UpdatePredictor> predictor) {
  return std::make_unique<HybridEngine>(options, std::move(predictor));
}

void HybridEngine::ensure_buffers(Trainer& trainer) {
  if (buffers_ready_) return;
  params_ = trainer.optimizer().parameters();
  if (params_.empty()) throw std::invalid_argument("hybrid: the optimizer has no parameters");
  state_ = params_;
  // Running statistics (batch norm) move during forwards too; a rollback must restore them.
  for (const auto& b : trainer.objective().module().buffers()) {
    if (b.is_floating_point()) state_.push_back(b);
  }
  // Scratch for update predictors, refilled before every use (predicted_ is predicted again
  // when a measured step comes), so no checkpoint holds them.
  auto allocate = [&](std::vector<at::Tensor>& buffers) {
    for (const auto& p : params_) buffers.push_back(torch::zeros(p.sizes(), p.options().requires_grad(false)));
  };
  if (predictor_->input() == UpdatePredictor::Input::Updates) {
    allocate(before_);
    allocate(delta_);
    allocate(predicted_);
  } else {
    sampler_.init(params_);
    // A checkpoint may have filled them already.
    if (first_sample_.empty()) first_sample_ = sampler_.make_buffers(params_);
    if (applied_sample_.empty()) applied_sample_ = sampler_.make_buffers(params_);
  }
  group_ = layer_groups(static_cast<int64_t>(params_.size()), opt_.groups);
  num_groups_ = group_.back() + 1;
  snapshot_.allocate(state_, opt_.snapshot_on_host);
  max_steps_ = trainer.options().max_steps;
  summary_.snapshot_bytes = snapshot_.bytes();
  summary_.buffer_bytes = tensor_bytes(before_) + tensor_bytes(delta_) + tensor_bytes(predicted_) +
                          tensor_bytes(first_sample_) + tensor_bytes(applied_sample_);
  buffers_ready_ = true;
}

void HybridEngine::log_transition(Trainer& trainer, const std::string& what) {
  if (what.empty()) return;
  // Phases differ most in memory (predict steps build no graph): show where each one starts.
  MemoryMonitor& mem = trainer.memory();
  trainer.logger().on_message(Level::Info, "hybrid: step " + std::to_string(trainer.step() + 1) + ": " + what +
                                               " [tensors " + mib_text(mem.counters().current_bytes) +
                                               ", step peak " + mib_text(mem.step_peak_bytes()) + "]");
}

int64_t HybridEngine::state_bytes() const {
  return snapshot_.bytes() + tensor_bytes(before_) + tensor_bytes(delta_) + tensor_bytes(predicted_) +
         tensor_bytes(first_sample_) + tensor_bytes(applied_sample_) + predictor_->state_bytes();
}

void HybridEngine::update_loss_stats(double loss) {
  if (!std::isfinite(loss)) return;
  if (std::isnan(loss_ema_)) {
    loss_ema_ = loss;
    return;
  }
  const double prev = loss_ema_;
  const double d = loss - loss_ema_;
  loss_ema_ += (1.0 - kLossEma) * d;
  loss_var_ = kLossEma * (loss_var_ + (1.0 - kLossEma) * d * d);
  loss_slope_ = kLossEma * loss_slope_ + (1.0 - kLossEma) * (loss_ema_ - prev);
}

TrainingFeatures HybridEngine::features(Trainer& trainer, const FullStepResult& r) {
  TrainingFeatures f;
  f.step = trainer.step();
  f.progress = max_steps_ > 0 ? static_cast<double>(trainer.step()) / static_cast<double>(max_steps_) : 0.0;
  f.lr = trainer.optimizer().lr();
  f.loss = r.loss;
  f.loss_ema = loss_ema_;
  f.loss_var = loss_var_;
  f.grad_norm = r.grad_norm;
  if (predictor_->wants_group_norms()) {
    std::vector<double> sq(static_cast<size_t>(num_groups_), 0.0);
    for (size_t i = 0; i < delta_.size(); ++i) {
      const double n = delta_[i].norm().item<double>();
      sq[static_cast<size_t>(group_[i])] += n * n;
    }
    for (double& s : sq) s = std::sqrt(s);
    f.group_update_norms = std::move(sq);
  }
  return f;
}

FullStepResult HybridEngine::real_step(Trainer& trainer, Phase phase, bool record, StepRecord& rec) {
  have_decision_loss_ = false;  // the weights are about to move
  const bool updates = predictor_->input() == UpdatePredictor::Input::Updates;
  // A trajectory is consecutive real steps; predicted steps, an unrecorded stretch or a stretch
  // already handed to the predictor start a new one.
  const bool fresh = !contiguous_ || ahead_ > 0 || !stretch_open_;
  const bool measure = updates && record && measure_next_ && predictor_->ready();
  if (measure) predictor_->predict_into(predicted_, measure_ahead_);
  if (record && updates) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) before_[i].copy_(params_[i]);
  }
  const FullStepResult r = trainer.full_step(phase);
  const double lr = trainer.optimizer().lr();
  if (record) {
    ++summary_.recorded_steps;
    if (fresh) {
      stretch_n_ = 0;
      ahead_ = 0;
      predictor_->reset_history();
    }
    ++stretch_n_;
    stretch_open_ = true;
    if (updates) {
      {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < params_.size(); ++i) at::sub_out(delta_[i], params_[i], before_[i]);
      }
      if (measure) {
        measure_scale_ *= lr_observed_ > 0.0 ? lr / lr_observed_ : 1.0;
        measure_prediction_error(delta_, predicted_, measure_scale_, rec);
      }
      predictor_->observe(delta_, features(trainer, r));
      lr_observed_ = lr;
      measure_next_ = false;
    } else {
      if (stretch_n_ == 1) {
        torch::NoGradGuard no_grad;
        sampler_.gather(params_, first_sample_);
      }
      predictor_->observe_weights(params_, features(trainer, r));
    }
  }
  contiguous_ = record;
  update_loss_stats(r.loss);
  rec.loss = r.loss;
  rec.grad_norm = r.grad_norm;
  rec.lr = lr;
  rec.items_per_sec = static_cast<double>(r.items);  // turned into a rate in run_step
  return r;
}

void HybridEngine::end_stretch(Trainer& trainer, StepRecord& rec) {
  predictor_->end_stretch(params_);
  if (measure_next_) {
    // The drift per step of the new stretch, at the last predict phase's scale, against the
    // update that phase applied per step.
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> drift = sampler_.make_buffers(params_);
    sampler_.gather(params_, drift);
    const double per_step = last_scale_ / static_cast<double>(std::max<int64_t>(1, stretch_n_ - 1));
    for (size_t i = 0; i < drift.size(); ++i) drift[i].sub_(first_sample_[i]).mul_(per_step);
    measure_prediction_error(drift, applied_sample_, 1.0, rec);
  }
  lr_observed_ = trainer.optimizer().lr();
  ahead_ = 0;
  measure_next_ = false;
  stretch_open_ = false;
}

void HybridEngine::measure_prediction_error(const std::vector<at::Tensor>& truth,
                                              const std::vector<at::Tensor>& predicted, double s,
                                              StepRecord& rec) {
  // Per tensor: cosine between the predicted and the true update, and |true - predicted| / |true|;
  // aggregated weighted by element count.
  torch::NoGradGuard no_grad;
  double cos_sum = 0.0, err_sum = 0.0, weight = 0.0;
  for (size_t i = 0; i < truth.size(); ++i) {
    const at::Tensor d = truth[i].reshape({-1});
    const at::Tensor p = predicted[i].reshape({-1});
    const double dp = at::dot(d, p).item<double>() * s;
    const double dd = at::dot(d, d).item<double>();
    const double pp = at::dot(p, p).item<double>() * s * s;
    const double w = static_cast<double>(params_[i].numel());
    const double cos = (dd > 0.0 && pp > 0.0) ? dp / std::sqrt(dd * pp) : 0.0;
    const double err = dd > 0.0 ? std::sqrt(std::max(0.0, dd - 2.0 * dp + pp) / dd) : 0.0;
    cos_sum += w * cos;
    err_sum += w * err;
    weight += w;
  }
  const double cos = cos_sum / weight, err = err_sum / weight;
  ctl_.on_direction_error(cos);
  rec.extra["pred_cosine"] = cos;
  rec.extra["pred_rel_error"] = err;
  rec.extra["pred_steps_ahead"] = static_cast<double>(measure_ahead_);
}

double HybridEngine::probe_loss(Trainer& trainer, const Batch& batch) {
  const double loss = eval_mode_loss(trainer.objective(), batch);
  ++summary_.verify_forwards;
  // Data-parallel: each rank holds its rows of the probe; every rank decides on the same mean.
  return trainer.collective().mean(loss, static_cast<double>(batch.input.size(0)));
}

double HybridEngine::batch_loss(Trainer& trainer, const Batch& batch) {
  // Train mode: comparable with the real steps' losses the band is built from.
  torch::NoGradGuard no_grad;
  ++summary_.verify_forwards;
  const double loss = trainer.objective().loss(batch).item<double>();
  return trainer.collective().mean(loss, static_cast<double>(batch.input.size(0)));  // as in probe_loss
}

void HybridEngine::measure_probe_before_decision(Trainer& trainer) {
  // One forward on the last phase's probe ends the full stretch: its loss decrease per second
  // and per step, paired with the loss that phase ended on. The next phase starts on a fresh
  // probe (kProbeRefreshPhases = 1) and measures its own starting loss; this one would serve
  // only if phases shared a probe.
  if (!have_probe_) return;
  const double now = probe_loss(trainer, probe_);
  if (have_end_loss_ && stretch_ms_ > 0.0 && stretch_steps_ > 0) {
    double pred_rate = pending_pred_rate_, full_rate = (end_loss_ - now) / (stretch_ms_ / 1000.0);
    Collective& ranks = trainer.collective();
    if (opt_.pay_check_clock == HybridOptions::Clock::Seconds && ranks.world_size() > 1) {
      // Each rank's clock differs: rank 0's rates decide, so every rank takes the same phase.
      std::vector<at::Tensor> rates{torch::tensor({pred_rate, full_rate}, torch::kFloat64)};
      ranks.broadcast(rates, 0);
      pred_rate = rates[0][0].item<double>();
      full_rate = rates[0][1].item<double>();
    }
    ctl_.on_rates(pred_rate, full_rate);
    probe_slope_ = (now - end_loss_) / static_cast<double>(stretch_steps_);
    have_probe_slope_ = true;
    have_end_loss_ = false;
  }
  decision_loss_ = now;
  have_decision_loss_ = true;
}

void HybridEngine::enter_predict(Trainer& trainer) {
  release_gradients(trainer);  // a checkpoint resumed into the phase may have made them again
  if (!have_probe_ || !have_decision_loss_ || phases_on_probe_ >= kProbeRefreshPhases) {
    // Several training batches in one probe: the sign of a paired loss difference on a single
    // batch is mostly that batch's noise when the true change per step is small. Copied into
    // place one batch at a time, after the old probe is gone: the step's peak holds the probe
    // and one batch, not two probes.
    // The batches are peeked, not consumed: training sees exactly the data order of plain mode,
    // and during the phase they are not yet trained on. The real steps after it train on them,
    // which makes the full steps' paired rate on this probe a little optimistic: the pay check
    // errs towards Full. A fresh probe every phase keeps verification on unseen batches.
    DataSource& data = trainer.data();
    const DataCursor cursor = data.cursor();
    probe_ = Batch{};
    int64_t filled = 0;
    for (int64_t i = 0; i < opt_.probe_batches; ++i) {
      const Batch b = trainer.next_batch();  // on the run's device, cursor advanced (restored below)
      const int64_t rows = b.input.size(0);
      if (i == 0) {
        auto sized = [&](const at::Tensor& t) {
          std::vector<int64_t> shape = t.sizes().vec();
          shape[0] = rows * opt_.probe_batches;
          return at::empty(shape, t.options());
        };
        probe_ = Batch{sized(b.input), sized(b.target)};
      }
      if (filled + rows <= probe_.input.size(0)) {
        probe_.input.narrow(0, filled, rows).copy_(b.input);
        probe_.target.narrow(0, filled, rows).copy_(b.target);
      } else {  // a larger batch than the first (rare: epoch boundaries)
        probe_ = Batch{torch::cat({probe_.input.narrow(0, 0, filled), b.input}),
                       torch::cat({probe_.target.narrow(0, 0, filled), b.target})};
      }
      filled += rows;
    }
    data.restore(cursor);
    probe_ = Batch{probe_.input.narrow(0, 0, filled), probe_.target.narrow(0, 0, filled)};
    have_probe_ = true;
    phases_on_probe_ = 0;
    decision_loss_ = probe_loss(trainer, probe_);
  }
  ++phases_on_probe_;
  have_decision_loss_ = false;
  entry_loss_ = decision_loss_;
  snapshot_.capture(state_);
  ref_ahead_ = ahead_;
  phase_start_ahead_ = ahead_;
  ref_loss_ = opt_.verify == HybridOptions::Verify::Holdout ? entry_loss_ : loss_ema_;
  phase_sum_ = 0.0;
  phase_n_ = 0;
  phase_ms_ = 0.0;
  div_.start_phase();
  if (opt_.verify == HybridOptions::Verify::Holdout) div_.observe_verified(ref_loss_);
  ++summary_.phases_predict;
}

void HybridEngine::release_gradients(Trainer& trainer) {
  // Predicted steps never read gradients: hand their memory back to the allocator's cache for the
  // phase (the next backward re-creates them from the cache). On GPT-2 small this is 475 MiB of
  // the predict step's peak.
  for (const auto& p : trainer.optimizer().parameters()) p.mutable_grad() = at::Tensor();
}

void HybridEngine::finish_predict_phase(Trainer& trainer, double final_probe_loss) {
  // Progress kept by this phase per second of it, paired with the next full stretch later.
  if (std::isnan(final_probe_loss)) {
    const auto t0 = Clock::now();
    final_probe_loss = probe_loss(trainer, probe_);
    phase_ms_ += probe_cost(t0);
  }
  pending_pred_rate_ = phase_ms_ > 0.0 ? (entry_loss_ - final_probe_loss) / (phase_ms_ / 1000.0) : 0.0;
  end_loss_ = final_probe_loss;
  have_end_loss_ = true;
  stretch_ms_ = 0.0;
  stretch_steps_ = 0;
  measure_next_ = true;
  measure_ahead_ = ahead_ + 1;
  measure_scale_ = ctl_.step_scale();
}

std::string HybridEngine::check_prediction(double actual, double required) {
  std::string why = div_.check_loss(actual);
  if (!why.empty()) return why;
  if (opt_.verify == HybridOptions::Verify::Holdout) {
    // Paired on one batch: a rise beyond the tolerance is the prediction's doing, and so is
    // falling short of what the real steps these predicted ones replace would have reached.
    if (actual > required + opt_.tolerance * std::abs(ref_loss_)) {
      std::ostringstream os;
      os.precision(6);
      os << "probe loss " << actual << " above the last verified " << ref_loss_;
      if (required < ref_loss_) os << " less the real steps' decrease (" << required << ")";
      return os.str();
    }
  } else {
    // Different batches: test the phase's mean loss against the reference with its noise. The
    // forecast does not move the band: a predictor that expects the loss to rise must not get
    // that rise accepted (tolerance is the rise allowed over the last verified loss).
    const double sd = std::sqrt(std::max(loss_var_, 0.0));
    const double mean = phase_sum_ / static_cast<double>(phase_n_);
    const double band = 2.0 * sd / std::sqrt(static_cast<double>(phase_n_)) + opt_.tolerance * std::abs(ref_loss_);
    if (mean > ref_loss_ + band) {
      std::ostringstream os;
      os.precision(6);
      os << "mean loss " << mean << " of " << phase_n_ << " predicted steps above the band "
         << ref_loss_ << " + " << band;
      return os.str();
    }
  }
  // Oscillation only on paired losses: in batch mode successive losses are different batches',
  // and their noise alone alternates with growing amplitude on about 1 check in 60.
  if (opt_.verify != HybridOptions::Verify::Holdout) return "";
  div_.observe_verified(actual);
  return div_.check_oscillation();
}

void HybridEngine::rollback(Trainer& trainer, const std::string& why, StepRecord& rec) {
  snapshot_.restore(state_);
  const int64_t lost = ahead_ - ref_ahead_;
  ahead_ = ref_ahead_;
  // The undone steps never happened: the schedule and the step budget take them back. This
  // step's own slot (the last of them) goes to the correct step that follows the rollback.
  trainer.rewind_steps(lost - 1);
  ++summary_.rollbacks;
  // The summary takes them back too (their time stays the predict phase's: it was spent).
  summary_.predicted_undone += lost;
  summary_.steps -= lost - 1;
  summary_.steps_by_phase[static_cast<int>(Phase::Predict)] -= lost - 1;
  rec.extra["rolled_back"] = 1.0;
  rec.extra["rolled_back_steps"] = static_cast<double>(lost);
  trainer.logger().on_message(Level::Info, "hybrid: step " + std::to_string(trainer.step() + 1) +
                                               ": rollback of " + std::to_string(lost) +
                                               " predicted steps: " + why);
}

bool HybridEngine::predicted_step(Trainer& trainer, StepRecord& rec) {
  const auto t0 = Clock::now();
  if (ctl_.steps_in_phase() == 0) enter_predict(trainer);
  const int64_t index = ctl_.steps_in_phase() + 1;  // 1-based within the phase
  const bool last = index >= ctl_.horizon();
  // The run's final step is always verified, so training never ends on weights nobody checked.
  const int64_t max_steps = trainer.options().max_steps;
  const bool run_end = max_steps > 0 && trainer.step() + 1 >= max_steps;

  trainer.set_lr_for_current_step();
  const double lr = trainer.optimizer().lr();
  ++ahead_;
  const double scale = (lr_observed_ > 0.0 ? lr / lr_observed_ : 1.0) * ctl_.step_scale();
  last_scale_ = scale;
  {
    torch::NoGradGuard no_grad;
    if (predictor_->input() == UpdatePredictor::Input::Updates) {
      predictor_->predict_into(predicted_, ahead_, scale);
      for (size_t i = 0; i < params_.size(); ++i) params_[i].add_(predicted_[i]);
    } else {
      sampler_.gather(params_, applied_sample_);
      predictor_->add_prediction_to(params_, ahead_, scale);
      sampler_.gather_minus(params_, applied_sample_);
    }
  }
  ++summary_.predicted_applied;
  have_decision_loss_ = false;
  rec.lr = lr;
  rec.extra["step_scale"] = scale;

  // What the loss should be: the predictor's own model if it has one, else the recent per-step
  // trend of real steps carried over the steps predicted since ref_loss_ was measured. Holdout
  // moves ref_loss_ to every accepted check; batch mode keeps the phase's starting train-loss EMA.
  const int64_t ref_at = opt_.verify == HybridOptions::Verify::Holdout ? ref_ahead_ : phase_start_ahead_;
  const double steps_since_ref = static_cast<double>(ahead_ - ref_at);
  // Holdout: real steps' paired per-step decrease of the probe loss, when one was measured.
  const double slope = opt_.verify == HybridOptions::Verify::Holdout && have_probe_slope_ ? probe_slope_ : loss_slope_;
  double predicted = ref_loss_ + slope * steps_since_ref * ctl_.step_scale();
  // Kept predicted steps use up steps of the budget and the schedule, so they must be worth
  // min_step_worth of the real steps they stand in for.
  const double required = ref_loss_ + opt_.min_step_worth * std::min(slope, 0.0) * steps_since_ref;
  // The predictor forecasts the change since its last observation (ahead 0): taken from ref_at.
  const double rel = predictor_->predicted_loss_change(ahead_);
  const double rel_ref = ref_at > 0 ? predictor_->predicted_loss_change(ref_at) : 0.0;
  if (std::isfinite(rel) && std::isfinite(rel_ref) && rel_ref > -1.0) {
    predicted = ref_loss_ * (1.0 + rel) / (1.0 + rel_ref);
  }
  rec.extra["predicted_loss"] = predicted;

  double actual = NAN;
  bool verify = false;
  if (opt_.verify == HybridOptions::Verify::Batch) {
    actual = batch_loss(trainer, trainer.next_batch());
    rec.loss = actual;
    phase_sum_ += actual;
    ++phase_n_;
    verify = true;
  } else if (index % opt_.verify_every == 0 || last || run_end || index == kFirstCheck) {
    actual = probe_loss(trainer, probe_);
    verify = true;
  }
  rec.extra["verified"] = verify ? 1.0 : 0.0;
  if (!verify) {
    phase_ms_ += step_cost(t0);
    log_transition(trainer, ctl_.on_predicted_step());
    return false;
  }

  rec.extra["actual_loss"] = actual;
  ++summary_.verifications;
  const std::string why = check_prediction(actual, required);
  // Error in units of the predicted change (holdout: the comparison is paired, noise-free) or of
  // the batch-to-batch noise (batch).
  const double unit = opt_.verify == HybridOptions::Verify::Holdout
                          ? std::max(std::abs(predicted - ref_loss_), 1e-3 * std::abs(ref_loss_) + 1e-12)
                          : std::max(std::sqrt(loss_var_), 1e-12);
  ctl_.on_loss_error(std::abs(actual - predicted) / unit);
  ctl_.set_predictor_confidence(predictor_->self_confidence());

  if (!why.empty()) {
    ctl_.on_verification(false);
    rec.extra["accepted"] = 0.0;
    rollback(trainer, why, rec);
    phase_ms_ += step_cost(t0);
    finish_predict_phase(trainer, opt_.verify == HybridOptions::Verify::Holdout ? ref_loss_ : NAN);
    log_transition(trainer, ctl_.on_rollback(ref_ahead_ - phase_start_ahead_));
    return true;
  }

  ctl_.on_verification(true);
  ++summary_.accepted;
  rec.extra["accepted"] = 1.0;
  const bool refresh = opt_.verify == HybridOptions::Verify::Holdout || phase_n_ % opt_.verify_every == 0;
  if (refresh || last || run_end) {
    summary_.predicted_kept += ahead_ - ref_ahead_;
    if (opt_.verify == HybridOptions::Verify::Holdout) ref_loss_ = actual;
    if (!last) snapshot_.capture(state_);
    ref_ahead_ = ahead_;
  }
  phase_ms_ += step_cost(t0);
  if (last) finish_predict_phase(trainer, opt_.verify == HybridOptions::Verify::Holdout ? actual : NAN);
  log_transition(trainer, ctl_.on_predicted_step());
  return false;
}

void HybridEngine::correct_after_rollback(Trainer& trainer, StepRecord& rec) {
  // The step is not lost: it becomes the first correct step, a real one from the restored point.
  const auto t0 = Clock::now();
  const bool record = predictor_->input() == UpdatePredictor::Input::Updates;
  const FullStepResult r = real_step(trainer, Phase::Correct, record, rec);
  div_.observe_real_step(r.loss, r.grad_norm);  // from the restored, verified weights
  rec.phase = Phase::Correct;
  log_transition(trainer, ctl_.on_real_step(predictor_->ready()));
  if (ctl_.phase() == Phase::Predict) release_gradients(trainer);
  stretch_ms_ += step_cost(t0);
  ++stretch_steps_;
}

StepRecord HybridEngine::run_step(Trainer& trainer) {
  ensure_buffers(trainer);
  const auto t0 = Clock::now();
  StepRecord rec;
  const Phase phase = ctl_.phase();
  rec.phase = phase;
  double predict_ms = 0.0;  // a rolled-back step's predict work: the record is the correct step's
  if (phase == Phase::Predict) {
    bool rolled_back = false;
    {
      // The predicted update, its verification forward and a rollback: what the step costs
      // without backward. A correct step after a rollback is a full step and measured as one.
      const auto scope = trainer.memory().phase(MemoryPhase::Predict);
      rolled_back = predicted_step(trainer, rec);
    }
    if (rolled_back) {
      predict_ms = ms_since(t0);
      correct_after_rollback(trainer, rec);
    }
  } else {
    // Trajectory predictors watch from the first full step on: the correct steps after a jump
    // let the optimizer settle back into the valley first.
    const bool updates = predictor_->input() == UpdatePredictor::Input::Updates;
    const bool record = ctl_.recording() && (updates || phase == Phase::Full);
    const bool first_correct = phase == Phase::Correct && ctl_.steps_in_phase() == 0;
    const FullStepResult r = real_step(trainer, phase, record, rec);
    const std::string why = div_.observe_real_step(r.loss, r.grad_norm, first_correct);
    if (!why.empty()) {
      // The weights the predict phase left passed verification yet produce an exploding
      // gradient: count it against the predictor, keep the (clipped) real step.
      ctl_.on_verification(false);
      rec.extra["divergence"] = 1.0;
      trainer.logger().on_message(Level::Warning, "hybrid: after a predict phase: " + why);
    }
    // The step's training is part of the stretch the decision's probe measures (its loss already
    // moved); the probe forward that ends the stretch is not.
    stretch_ms_ += step_cost(t0);
    ++stretch_steps_;
    if (ctl_.decision_due(updates ? predictor_->ready() : record && stretch_n_ >= 2)) {
      if (!updates) end_stretch(trainer, rec);
      measure_probe_before_decision(trainer);
    }
    ema(record ? summary_.recorded_step_ms : summary_.plain_step_ms, ms_since(t0), kTimeEma);
    log_transition(trainer, ctl_.on_real_step(predictor_->ready()));
    // Free the gradients now, not in the first predicted step: its peak would still hold them.
    if (ctl_.phase() == Phase::Predict) release_gradients(trainer);
  }
  trainer.advance_step();

  rec.step = trainer.step();
  rec.ms = ms_since(t0);
  rec.items_per_sec = rec.items_per_sec > 0.0 && rec.ms > 0.0 ? rec.items_per_sec / (rec.ms / 1000.0) : 0.0;
  rec.extra["confidence"] = ctl_.confidence();
  rec.extra["horizon"] = static_cast<double>(ctl_.horizon());
  if (!rec.extra.count("rolled_back")) rec.extra["rolled_back"] = 0.0;

  const int idx = static_cast<int>(rec.phase);
  ++summary_.steps;
  ++summary_.steps_by_phase[idx];
  summary_.ms_by_phase[static_cast<int>(Phase::Predict)] += predict_ms;
  summary_.ms_by_phase[idx] += rec.ms - predict_ms;
  return rec;
}

void HybridEngine::on_finish(Trainer& trainer) {
  HybridSummary& s = summary_;
  s.snapshot_bytes_copied = snapshot_.bytes_copied();
  s.predictor_bytes = predictor_->state_bytes();
  s.final_confidence = ctl_.confidence();
  s.final_horizon = ctl_.horizon();
  const double plain = s.plain_step_ms > 0.0 ? s.plain_step_ms : s.recorded_step_ms;
  s.estimated_saved_ms = static_cast<double>(s.predicted_kept) * plain - s.ms_by_phase[2] -
                         static_cast<double>(s.recorded_steps) * std::max(0.0, s.recorded_step_ms - plain);
}

}  // namespace ht
