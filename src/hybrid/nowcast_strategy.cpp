// Nowcast mode: every period, one jump of the weights predicted by a pretrained nowcaster from 5
// recorded states (NiNo's schedule), verified on a probe and undone bit-exactly when it fails.
#include "nowcast_engine.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/cpu_random_state.h"
#include "hybrid/core/allocator.h"
#include "hybrid/core/errors.h"
#include "hybrid/hybrid/nowcaster_registry.h"
#include "nowcast_cost.h"
#include "nowcast_text.h"

namespace ht {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The optimizer's whole state as bytes in a tensor (so the allocator counts them), in its own
// checkpoint format: every Optimizer has one, and load() restores it bit-exactly.
at::Tensor optimizer_snapshot(const Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream os;
  archive.save_to(os);
  const std::string bytes = os.str();
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

void restore_optimizer(Optimizer& optimizer, const at::Tensor& snapshot) {
  std::istringstream is(std::string(static_cast<const char*>(snapshot.data_ptr()), static_cast<size_t>(snapshot.numel())));
  torch::serialize::InputArchive archive;
  archive.load_from(is);
  optimizer.load(archive);
}

}  // namespace

NowcastEngine::NowcastEngine(NowcastStrategyOptions options, NowcasterFactory factory)
    : opt_((options.validate(), std::move(options))), factory_(std::move(factory)) {
  summary_.model = opt_.model;
  cap_ = opt_.horizon_max;
  if (!factory_) {
    const NowcasterSpec& spec = find_nowcaster(opt_.model);
    if (opt_.weights.empty())
      fail_option("weights", "is empty: give the path of models/" + spec.weights_file + " in the source tree");
    if (!std::ifstream(opt_.weights).good())
      fail_option("weights", "= \"" + opt_.weights + "\": cannot read the file; it should be models/" +
                          spec.weights_file + " from the source tree");
    // Reads the options when called: ensure_ready sets the device the model trains on first.
    factory_ = [this, spec](const NowcastSpec& s) { return spec.load(opt_.weights, s, opt_.model_options); };
  }
}

StepRecord NowcastEngine::run_step(Trainer& trainer) {
  const auto t0 = Clock::now();
  ensure_ready(trainer);
  StepRecord rec;
  rec.phase = Phase::Full;
  // Delayed verification: the window after a jump is over. Undone, the step count is back to
  // before the jump and this step is the jump's step, taken as a real one (states intact).
  const bool undone_late = pending_ && trainer.step() == jump_step_ + opt_.verify_after && !judge(trainer, rec);
  const int64_t s = trainer.step();  // steps done: this is step s + 1
  bool jumped = false;
  if (!undone_late && (s + 1) % interval_ == 0) {
    record(recorded_);
    if (++recorded_ == kNowcastContext) {
      recorded_ = 0;
      if (const std::string why = why_no_jump(trainer, s); !why.empty()) {
        summary_.jump_log.push_back(cat("step ", s + 1, ": not made (", why, ")"));
      } else if (skip_left_ > 0) {
        --skip_left_;
        ++summary_.skipped;
        summary_.jump_log.push_back(cat("step ", s + 1, ": skipped (backing off after ", fails_, " failed jumps)"));
      } else {
        jumped = jump(trainer, s, rec);
      }
    }
  }
  if (!jumped) {
    const auto tr = Clock::now();
    const FullStepResult r = trainer.full_step(Phase::Full);
    summary_.real_ms += ms_since(tr);
    ++real_steps_;
    rec.loss = r.loss;
    rec.grad_norm = r.grad_norm;
    rec.items_per_sec = static_cast<double>(r.items);
  }
  trainer.advance_step();
  ++summary_.steps;
  rec.step = trainer.step();
  rec.lr = trainer.optimizer().lr();
  rec.ms = ms_since(t0);
  rec.items_per_sec = rec.ms > 0.0 ? rec.items_per_sec / (rec.ms / 1000.0) : 0.0;
  return rec;
}

int64_t NowcastEngine::run_steps(const Trainer& trainer) const {
  return opt_.schedule_steps > 0 ? opt_.schedule_steps : trainer.options().max_steps;
}

std::string NowcastEngine::why_no_jump(const Trainer& trainer, int64_t s) const {
  if (opt_.last_jump_step > 0 && s + 1 > opt_.last_jump_step)
    return cat("after nowcast.last_jump_step = ", opt_.last_jump_step);
  const int64_t run = run_steps(trainer);
  const int64_t last = std::llround(opt_.last_jump_fraction * static_cast<double>(run));
  if (opt_.last_jump_fraction > 0.0 && s + 1 > last)
    return cat("after step ", last, " = nowcast.last_jump_fraction ", opt_.last_jump_fraction, " x ", run);
  return "";
}

void NowcastEngine::on_finish(Trainer& /*trainer*/) {
  summary_.horizon_cap = cap_;
  summary_.state_bytes = state_bytes();
}

void NowcastEngine::ensure_ready(Trainer& trainer) {
  if (ready_) return;
  const auto t0 = Clock::now();
  // Checked here rather than at the first verdict, a period into the run.
  if (opt_.verify && opt_.probe_holdout && trainer.data().num_probe_batches() < opt_.probe_batches)
    throw OptionsError(cat("NowcastStrategyOptions.probe_holdout: the data holds ", trainer.data().num_probe_batches(),
                           " probe batches, a verdict reads probe_batches = ", opt_.probe_batches,
                           ": hold more training data out for probes (data.probe_fraction) or lower probe_batches"));
  params_ = trainer.optimizer().parameters();
  const auto named = trainer.objective().module().named_parameters(/*recurse=*/true);
  if (named.size() != params_.size())
    throw OptionsError(cat("nowcast: the optimizer holds ", params_.size(), " parameters, the model ", named.size(),
                           ": build the optimizer over all of module->parameters(), in that order"));
  NamedShapes shapes;
  for (size_t i = 0; i < named.size(); ++i) {
    if (!named[i].value().is_same(params_[i]))
      throw OptionsError("nowcast: the optimizer's parameter " + std::to_string(i) + " is not the model's '" +
                         named[i].key() + "': build the optimizer over module->parameters(), in that order");
    if (!params_[i].is_floating_point() || params_[i].scalar_type() != at::kFloat)
      throw OptionsError("nowcast: parameter '" + named[i].key() + "' is not float32; the nowcasters read fp32 states");
    shapes.emplace_back(named[i].key(), params_[i].sizes().vec());
  }
  spec_ = opt_.architecture == "gpt2" ? nowcast_spec_gpt2(shapes, opt_.n_head) : nowcast_spec_feedforward(shapes);
  if (!params_.empty()) opt_.model_options.device = params_.front().device();
  {  // The nowcaster's limits, now, on a small layer (its weights file is read here, too).
    const auto small = factory_(nowcast_spec_feedforward({{"0.weight", {128, 128}}, {"0.bias", {128}}}));
    if (opt_.horizon_max > small->max_horizon())
      fail_option("horizon_max", cat("= ", opt_.horizon_max, ": ", small->name(), " predicts at most ",
                              small->max_horizon(), " intervals ahead"));
  }
  using S = NowcastStrategyOptions::OptimizerState;
  if (opt_.optimizer_state != S::Keep) {
    const auto change = opt_.optimizer_state == S::Reset ? Optimizer::StateChange::Reset
                                                         : Optimizer::StateChange::ScaleMomentum;
    if (!trainer.optimizer().can_change_state(change))
      throw OptionsError("nowcast: optimizer '" + trainer.optimizer().name() + "' cannot " +
                         to_string(opt_.optimizer_state) +
                         " its state after a jump: set nowcast.optimizer_state=keep or use optim.name=adamw");
  }
  horizons_ = nowcast_horizons(opt_, run_steps(trainer));
  if (opt_.horizon_by_schedule) horizons_ = schedule_horizons(horizons_, trainer.options().schedule, opt_.period);
  interval_ = opt_.period / kNowcastContext;
  in_place_ = true;
  for (const auto& p : params_) in_place_ = in_place_ && p.is_cpu() && p.is_contiguous();
  // Host memory: the nowcasters read CPU float32 states, whatever device trains.
  torch::NoGradGuard no_grad;
  for (auto& slot : states_) {
    if (slot.empty()) {
      for (const auto& p : params_) slot.push_back(at::empty(p.sizes(), p.options().device(at::kCPU)));
    } else {
      for (size_t i = 0; i < params_.size(); ++i)
        if (slot[i].sizes() != params_[i].sizes())
          throw CheckpointMismatch("nowcast: a recorded state of the checkpoint has shape " +
                                       c10::str(slot[i].sizes()) + ", the model's parameter " + std::to_string(i) +
                                       " " + c10::str(params_[i].sizes()) + ": another model",
                                   "strategy");
    }
  }
  if (!in_place_)
    for (const auto& p : params_) scratch_.push_back(at::empty(p.sizes(), p.options().device(at::kCPU)));
  summary_.setup_ms += ms_since(t0);
  ready_ = true;
}

void NowcastEngine::record(int64_t slot) {
  const auto t0 = Clock::now();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) states_[slot][i].copy_(params_[i]);
  ++summary_.recorded_states;
  summary_.record_ms += ms_since(t0);
}

double NowcastEngine::tolerance_at(int64_t k) const {
  if (!opt_.tolerance_by_horizon) return opt_.tolerance;
  return opt_.tolerance * static_cast<double>(k) / static_cast<double>(opt_.horizon_max);
}

std::string NowcastEngine::ahead_text(int64_t k) const {
  return cat(k * interval_, opt_.horizon_by_schedule ? " steps ahead at the states' pace" : " steps ahead");
}

int64_t NowcastEngine::horizon_at(int64_t s) const {
  const int64_t j = std::min<int64_t>(static_cast<int64_t>(horizons_.size()) - 1, s / opt_.period);
  return std::min(horizons_[static_cast<size_t>(j)], cap_);
}

Batch NowcastEngine::peek_probe(Trainer& trainer) {
  DataSource& data = trainer.data();
  if (opt_.probe_holdout && held_out_probe_.input.defined()) return held_out_probe_;
  const DataCursor cursor = data.cursor();
  std::vector<at::Tensor> inputs, targets;
  for (int64_t i = 0; i < opt_.probe_batches; ++i) {
    Batch b = opt_.probe_holdout ? data.probe_batch(i) : trainer.next_batch();
    inputs.push_back(b.input);
    targets.push_back(b.target);
  }
  Batch probe{torch::cat(inputs), torch::cat(targets)};
  if (opt_.probe_holdout) {
    probe.input = probe.input.to(trainer.options().device);
    probe.target = probe.target.to(trainer.options().device);
    return held_out_probe_ = probe;
  }
  data.restore(cursor);
  return probe;
}

double NowcastEngine::probe_loss(Trainer& trainer, const Batch& probe) {
  const double loss = eval_mode_loss(trainer.objective(), probe);
  // Data-parallel: each rank holds its rows of the probe; every rank keeps or undoes a jump on
  // the same mean, so the replicas stay identical without sending any weights.
  return trainer.collective().mean(loss, static_cast<double>(probe.input.size(0)));
}

bool NowcastEngine::all_finite() const {
  for (const auto& p : params_)
    if (!torch::isfinite(p).all().item<bool>()) return false;
  return true;
}

NowcastModel& NowcastEngine::model() {
  if (!model_) {
    const auto t0 = Clock::now();
    const int64_t before = allocator_stats().current_bytes;
    model_ = factory_(spec_);
    kept_bytes_ = std::max<int64_t>(0, allocator_stats().current_bytes - before);
    summary_.setup_ms += ms_since(t0);
  }
  return *model_;
}

void NowcastEngine::predict_into_params(int64_t k) {
  const auto tj = Clock::now();
  std::vector<std::vector<at::Tensor>> states(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    for (int t = 0; t < kNowcastContext; ++t) states[i].push_back(states_[t][i]);
  std::vector<at::Tensor>& predicted = in_place_ ? params_ : scratch_;  // host tensors either way
  model().predict(states, k, predicted);
  if (opt_.jump_scale != 1.0 || opt_.jump_norm_scale != 1.0 || !jump_kinds_.all()) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      const at::Tensor& last = states_[kNowcastContext - 1][i];
      if (!jump_kinds_.moves(spec_.params[i].kind)) {
        predicted[i].copy_(last);
        continue;
      }
      if (opt_.jump_scale != 1.0) predicted[i].sub_(last).mul_(opt_.jump_scale).add_(last);
      if (opt_.jump_norm_scale != 1.0) {
        const double before = last.norm().item<double>(), after = predicted[i].norm().item<double>();
        if (after > 0.0) predicted[i].mul_((before + opt_.jump_norm_scale * (after - before)) / after);
      }
    }
  }
  if (!in_place_) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(scratch_[i]);
  }
  summary_.predict_ms += ms_since(tj);
}

void NowcastEngine::load_params(const std::vector<at::Tensor>& from) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(from[i]);
}

std::vector<int64_t> NowcastEngine::candidates(int64_t k) const {
  std::vector<int64_t> ks = {k};
  const int64_t hi = std::min(opt_.horizon_max, cap_);
  for (int64_t f = 2; static_cast<int64_t>(ks.size()) < opt_.horizon_search && f <= 64; f *= 2) {
    for (const int64_t c : {std::min(k * f, hi), std::max<int64_t>(1, k / f)})
      if (static_cast<int64_t>(ks.size()) < opt_.horizon_search && std::find(ks.begin(), ks.end(), c) == ks.end())
        ks.push_back(c);
  }
  return ks;
}

bool NowcastEngine::jump(Trainer& trainer, int64_t s, StepRecord& rec) {
  if (opt_.verify && opt_.verify_after > 0) return jump_to_judge_later(trainer, s, rec);
  const auto scope = trainer.memory().phase(MemoryPhase::Predict);
  const int64_t k_schedule = horizon_at(s);
  ++summary_.jumps;
  double before = NAN, after = NAN;
  int64_t k = k_schedule;
  bool keep = true;
  if (opt_.verify) {
    auto tp = Clock::now();
    const Batch probe = peek_probe(trainer);
    before = probe_loss(trainer, probe);
    summary_.probe_ms += ms_since(tp);
    // Each candidate horizon on the same probe; the lowest loss wins (ties: the earlier).
    const std::vector<int64_t> ks = opt_.horizon_search > 1 ? candidates(k_schedule) : std::vector<int64_t>{k_schedule};
    std::string tried;
    for (size_t c = 0; c < ks.size(); ++c) {
      if (c > 0) restore_params();
      predict_into_params(ks[c]);
      tp = Clock::now();
      const double loss = probe_loss(trainer, probe);
      summary_.probe_ms += ms_since(tp);
      if (ks.size() > 1) tried += cat(c ? ", " : " (tried k ", ks[c], ": ", fixed(loss, 5));
      if (std::isfinite(loss) && (c == 0 || !(loss >= after))) {
        after = loss;
        k = ks[c];
      }
    }
    if (ks.size() > 1) tried += ")";
    keep = std::isfinite(after) && after <= before + tolerance_at(k) * std::abs(before);
    if (keep && k != ks.back()) {  // the parameters hold the last candidate's prediction
      restore_params();
      predict_into_params(k);
    }
    rec.extra["probe_before"] = before;
    rec.extra["probe_after"] = after;
    summary_.jump_log.push_back(cat("step ", s + 1, ": k ", k, " (", ahead_text(k), "): probe loss ",
                                    fixed(before, 5), " -> ", fixed(after, 5), ": ", keep ? "kept" : "undone",
                                    tried));
  } else {
    predict_into_params(k);
    keep = all_finite();
    summary_.jump_log.push_back(cat("step ", s + 1, ": k ", k, " (", ahead_text(k), "), unverified: ",
                                    keep ? "kept" : "undone (not finite)"));
  }
  rec.extra["nowcast_jump"] = 1.0;
  rec.extra["horizon"] = static_cast<double>(k);
  rec.extra["accepted"] = keep ? 1.0 : 0.0;
  trainer.logger().on_message(Level::Info, "nowcast: " + summary_.jump_log.back());
  if (!keep) {
    restore_params();
    count_failure(k_schedule);
    return false;
  }
  count_success(k);
  change_optimizer_state(trainer);
  rec.phase = Phase::Predict;
  rec.loss = after;  // the probe's: training batches, eval mode (NaN unverified)
  return true;
}

void NowcastEngine::count_failure(int64_t k_schedule) {
  ++summary_.undone;
  shorten_horizon(k_schedule);
}

void NowcastEngine::shorten_horizon(int64_t k_schedule) {
  cap_ = std::max<int64_t>(1, k_schedule / 2);  // below horizon_min too: the schedule's floor, not the cap's
  ++fails_;
  if (fails_ >= 2) skip_left_ = (int64_t{1} << std::min<int64_t>(fails_ - 1, 30)) - 1;
}

void NowcastEngine::count_success(int64_t k) {
  ++summary_.kept;
  summary_.horizon_steps_kept += k * interval_;
  cap_ = std::min(opt_.horizon_max, cap_ * 2);
  fails_ = 0;
}

void NowcastEngine::fit_plain_exponent(Trainer& trainer, int64_t jump_step) {
  const auto tp = Clock::now();
  exponent_fitted_ = true;
  const Batch probe = peek_probe(trainer);
  std::vector<double> losses;
  std::vector<int64_t> steps;
  for (int64_t t = 0; t < kNowcastContext; ++t) {
    load_params(states_[t]);
    losses.push_back(probe_loss(trainer, probe));
    steps.push_back(jump_step - (kNowcastContext - 1 - t) * interval_);
  }
  plain_exponent_ = fit_power_exponent(losses, steps);
  summary_.plain_exponent = plain_exponent_;
  summary_.probe_ms += ms_since(tp);
  std::string line = cat("step ", jump_step, ": plain's probe loss ");
  for (size_t i = 0; i < losses.size(); ++i) line += cat(i ? ", " : "", fixed(losses[i], 5), " at ", steps[i]);
  summary_.jump_log.push_back(line + (std::isfinite(plain_exponent_)
                                          ? cat(": falls as step^-", fixed(plain_exponent_, 3))
                                          : std::string(": not falling; the verdicts use the trend")));
  trainer.logger().on_message(Level::Info, "nowcast: " + summary_.jump_log.back());
}

bool NowcastEngine::jump_to_judge_later(Trainer& trainer, int64_t s, StepRecord& rec) {
  // The window and the step that judges it must fit in the run.
  if (trainer.options().max_steps - (s + 1) <= opt_.verify_after) {
    ++summary_.too_late;
    summary_.jump_log.push_back(cat("step ", s + 1, ": not made, ", trainer.options().max_steps - (s + 1),
                                    " steps left to judge it in (verify_after ", opt_.verify_after, ")"));
    return false;
  }
  // Another failure - its prediction and window - must fit in the redo budget (0 or 1: no
  // limit) with what was spent, and with what kept jumps paid in.
  const bool limited = opt_.redo_budget > 0.0 && opt_.redo_budget < 1.0;
  const int64_t budget = static_cast<int64_t>(opt_.redo_budget * static_cast<double>(trainer.options().max_steps)) +
                         summary_.redo_credit;
  const int64_t cost = limited ? prediction_cost_steps(trainer) : 0;
  if (limited && summary_.steps_redone + summary_.steps_behind + summary_.overhead_steps + cost + opt_.verify_after >
                     budget) {
    ++summary_.over_budget;
    summary_.jump_log.push_back(
        cost + opt_.verify_after > budget
            ? cat("step ", s + 1, ": not made, a prediction costs ~", cost, " steps here and a window ",
                  opt_.verify_after, ": more than the redo budget (", budget, " steps)")
            : cat("step ", s + 1, ": not made, the redo budget (", budget, " steps) is spent"));
    return false;
  }
  const auto scope = trainer.memory().phase(MemoryPhase::Predict);
  const int64_t k = horizon_at(s);
  ++summary_.jumps;
  cursor_ = trainer.data().cursor();
  optimizer_snapshot_ = optimizer_snapshot(trainer.optimizer());
  summary_.optimizer_snapshot_bytes = std::max<int64_t>(summary_.optimizer_snapshot_bytes, optimizer_snapshot_.nbytes());
  random_state_ = cpu_random_state();
  if (opt_.plain_model == "power" && !exponent_fitted_) fit_plain_exponent(trainer, s + 1);
  predict_into_params(k);
  summary_.overhead_steps += cost;
  rec.extra["nowcast_jump"] = 1.0;
  rec.extra["horizon"] = static_cast<double>(k);
  if (!all_finite()) {
    restore_params();
    optimizer_snapshot_ = at::Tensor();
    count_failure(k);
    summary_.jump_log.push_back(cat("step ", s + 1, ": k ", k, ": undone (not finite)"));
    rec.extra["accepted"] = 0.0;
    trainer.logger().on_message(Level::Info, "nowcast: " + summary_.jump_log.back());
    return false;
  }
  pending_ = true;
  trend_from_ = 0;  // all five states are this period's
  jump_step_ = s + 1;
  pending_k_ = k;
  change_optimizer_state(trainer);
  rec.phase = Phase::Predict;
  rec.extra["pending"] = 1.0;
  return true;
}

bool NowcastEngine::judge(Trainer& trainer, StepRecord& rec) {
  const auto scope = trainer.memory().phase(MemoryPhase::Predict);
  pending_ = false;
  const auto tp = Clock::now();
  const Batch probe = peek_probe(trainer);  // after the window: neither side trained on them this epoch
  const double now = probe_loss(trainer, probe);
  std::vector<at::Tensor> current;  // the window's weights, while the older ones are scored
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : params_) current.push_back(p.detach().clone());
  }
  // The probe losses of the last trend_states (or power_level_states) states before the jump,
  // oldest first (the last is the weights the jump started from, which stay loaded for an undo).
  const int64_t scored = std::max(opt_.trend_states, opt_.power_level_states);
  std::vector<double> all_losses;
  std::vector<int64_t> steps;
  for (int64_t t = std::max(kNowcastContext - scored, trend_from_); t < kNowcastContext; ++t) {
    load_params(states_[t]);
    all_losses.push_back(probe_loss(trainer, probe));
    steps.push_back(jump_step_ - (kNowcastContext - 1 - t) * interval_);
  }
  summary_.probe_ms += ms_since(tp);
  const auto last = [&](int64_t n) {  // the last n of them (fewer where a checkpoint had fewer)
    const size_t from = all_losses.size() - std::min<size_t>(all_losses.size(), static_cast<size_t>(n));
    return std::make_pair(std::vector<double>(all_losses.begin() + from, all_losses.end()),
                          std::vector<int64_t>(steps.begin() + from, steps.end()));
  };
  const std::vector<double> losses = last(opt_.trend_states).first;
  const int64_t window = opt_.verify_after + 1;  // the jump's step and the real steps after it
  PlainGuess guess = guess_plain(losses, interval_, window);
  std::string level_note;
  if (std::isfinite(plain_exponent_)) {
    const auto [level_losses, level_steps] = last(opt_.power_level_states);
    const double level = power_level(level_losses, level_steps, plain_exponent_, jump_step_);
    guess = guess_plain_power(std::isfinite(level) ? level : losses.back(), plain_exponent_, jump_step_, window);
    if (level_losses.size() > 1 && std::isfinite(level))
      level_note = cat(", its level from ", level_losses.size(), " states (", fixed(losses.back(), 5), " the last)");
  }
  const double before = guess.before, plain = guess.after;
  const bool passed = std::isfinite(now) && now <= plain + tolerance_at(pending_k_) * std::abs(before);
  // Failed, but below where it started: keeping it costs its lag behind plain, undoing the whole
  // window again (keep_progress).
  const bool behind = !passed && opt_.keep_progress && std::isfinite(now) && now < before;
  const bool keep = passed || behind;
  int64_t lead = 0, lag = 0;
  if (passed) {
    load_params(current);
    count_success(pending_k_);
    if (opt_.redo_credit) {
      lead = std::min(steps_ahead_of_plain(guess, now, window), pending_k_ * interval_);
      summary_.redo_credit += lead;
    }
  } else if (behind) {
    load_params(current);
    ++summary_.kept;
    ++summary_.kept_behind;
    shorten_horizon(pending_k_);
    lag = steps_behind_plain(guess, now, window);
    summary_.steps_behind += lag;
  } else {  // the weights are the pre-jump ones already
    restore_optimizer(trainer.optimizer(), optimizer_snapshot_);
    trainer.data().restore(cursor_);
    set_cpu_random_state(random_state_);
    trainer.rewind_steps(window);
    recorded_ = 0;  // where the jump left it: its step was the 5th recording
    summary_.steps_redone += opt_.verify_after;
    count_failure(pending_k_);
  }
  optimizer_snapshot_ = at::Tensor();
  random_state_ = at::Tensor();
  summary_.jump_log.push_back(cat("step ", jump_step_, ": k ", pending_k_, " (", ahead_text(pending_k_),
                                  "), judged ", opt_.verify_after, " steps later: probe loss ",
                                  fixed(now, 5), " against plain's ~", fixed(plain, 5), " (", describe_trend(losses, guess) + level_note,
                                  "): ",
                                  passed ? "kept" : behind ? "kept, though behind plain" : "undone",
                                  lead > 0 ? cat(", ~", lead, " steps ahead of plain") : std::string(),
                                  behind ? cat(" by ~", lag, " steps (undoing would cost ", window, ")") : std::string()));
  trainer.logger().on_message(Level::Info, "nowcast: " + summary_.jump_log.back());
  rec.extra["judged"] = 1.0;
  rec.extra["accepted"] = keep ? 1.0 : 0.0;
  if (behind) rec.extra["behind"] = 1.0;
  rec.extra["probe_before"] = before;
  rec.extra["probe_after"] = now;
  rec.extra["probe_plain"] = plain;
  return keep;
}

int64_t NowcastEngine::prediction_cost_steps(Trainer& trainer) {
  if (real_steps_ < 10) return 0;
  if (ms_per_scalar_ < 0.0) {
    const auto t0 = Clock::now();
    ms_per_scalar_ = opt_.prediction_ms_per_scalar >= 0.0 ? opt_.prediction_ms_per_scalar
                                                          : nowcaster_ms_per_scalar(factory_);
    summary_.setup_ms += ms_since(t0);
  }
  int64_t scalars = 0;
  for (const auto& p : params_) scalars += p.numel();
  const double step_ms = summary_.real_ms / static_cast<double>(real_steps_);
  const double steps = ms_per_scalar_ * static_cast<double>(scalars) / std::max(step_ms, 1e-6);
  return std::llround(trainer.collective().mean(steps));
}

int64_t NowcastEngine::steps_ahead_of_plain(const PlainGuess& plain, double now, int64_t window) {
  if (!(now < plain.after)) return 0;
  const double n = plain.steps_to(now, window);
  return std::isfinite(n) ? std::max<int64_t>(0, static_cast<int64_t>(n) - window) : 0;
}

int64_t NowcastEngine::steps_behind_plain(const PlainGuess& plain, double now, int64_t window) {
  const double n = plain.steps_to(now, window);
  return std::isfinite(n) ? std::clamp<int64_t>(window - static_cast<int64_t>(n), 0, window) : window;
}

void NowcastEngine::change_optimizer_state(Trainer& trainer) {
  using S = NowcastStrategyOptions::OptimizerState;
  if (opt_.optimizer_state == S::Keep) return;
  // (ensure_ready checked that the optimizer can.)
  trainer.optimizer().change_state(opt_.optimizer_state == S::Reset ? Optimizer::StateChange::Reset
                                                                    : Optimizer::StateChange::ScaleMomentum,
                                   opt_.momentum_scale);
}

std::unique_ptr<NowcastStrategy> make_nowcast_strategy(const NowcastStrategyOptions& options,
                                                       NowcasterFactory factory) {
  return std::make_unique<NowcastEngine>(options, std::move(factory));
}

}  // namespace ht
