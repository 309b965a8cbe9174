// Nowcast mode's state: what a checkpoint keeps of the engine (resume mid-period and inside a
// verdict's window bit-exactly) and the host memory the planner counts for it.
#include <algorithm>
#include <cmath>
#include <string>

#include <torch/serialize/archive.h>

#include "archive_io.h"
#include "hybrid/core/errors.h"
#include "hybrid/hybrid/nowcaster_registry.h"
#include "hybrid/hybrid/predictor_registry.h"  // parameter_copies_bytes
#include "nowcast_engine.h"
#include "nowcast_text.h"

namespace ht {

int64_t NowcastEngine::state_bytes() const {
  int64_t b = kept_bytes_;
  for (const auto& slot : states_)
    for (const auto& t : slot) b += t.defined() ? t.nbytes() : 0;
  for (const auto& t : scratch_) b += t.nbytes();
  if (optimizer_snapshot_.defined()) b += optimizer_snapshot_.nbytes();
  return b;
}

void NowcastEngine::save(torch::serialize::OutputArchive& a) const {
  archive_io::put(a, "model", opt_.model);
  archive_io::put(a, "period", opt_.period);
  archive_io::put(a, "recorded", recorded_);
  archive_io::put(a, "cap", cap_);
  archive_io::put(a, "fails", fails_);
  archive_io::put(a, "skip_left", skip_left_);
  for (int64_t t = 0; t < recorded_; ++t) archive_io::put_tensors(a, "state" + std::to_string(t), states_[t]);
  archive_io::put(a, "jumps", summary_.jumps);
  archive_io::put(a, "kept", summary_.kept);
  archive_io::put(a, "undone", summary_.undone);
  archive_io::put(a, "skipped", summary_.skipped);
  archive_io::put(a, "recorded_states", summary_.recorded_states);
  archive_io::put(a, "horizon_steps_kept", summary_.horizon_steps_kept);
  archive_io::put(a, "steps_redone", summary_.steps_redone);
  archive_io::put(a, "too_late", summary_.too_late);
  archive_io::put(a, "over_budget", summary_.over_budget);
  archive_io::put(a, "redo_credit", summary_.redo_credit);
  archive_io::put(a, "overhead_steps", summary_.overhead_steps);
  archive_io::put(a, "kept_behind", summary_.kept_behind);
  archive_io::put(a, "exponent_fitted", static_cast<int64_t>(exponent_fitted_));
  archive_io::put(a, "plain_exponent", std::isfinite(plain_exponent_) ? plain_exponent_ : -1.0);
  archive_io::put(a, "steps_behind", summary_.steps_behind);
  // A checkpoint inside a delayed-verification window keeps what judging and undoing need.
  archive_io::put(a, "pending", pending_);
  if (pending_) {
    archive_io::put(a, "jump_step", jump_step_);
    archive_io::put(a, "pending_k", pending_k_);
    archive_io::put(a, "cursor_seed", static_cast<int64_t>(cursor_.seed));
    archive_io::put(a, "cursor_epoch", cursor_.epoch);
    archive_io::put(a, "cursor_position", cursor_.position);
    a.write("optimizer_snapshot", optimizer_snapshot_);
    a.write("random_state", random_state_);
    // The states before the jump that the window has not recorded over: the verdict's trend.
    for (int64_t t = std::max(recorded_, trend_from_); t < kNowcastContext; ++t)
      archive_io::put_tensors(a, "state" + std::to_string(t), states_[t]);
  }
}

void NowcastEngine::load(torch::serialize::InputArchive& a) {
  const std::string model = archive_io::get_string(a, "model");
  const int64_t period = archive_io::get_int(a, "period");
  if (model != opt_.model || period != opt_.period)
    throw CheckpointMismatch(cat("the checkpoint's nowcast state was written with nowcast.model=", model,
                                 " nowcast.period=", period, ", this run has ", opt_.model, " and ", opt_.period,
                                 ": resume with the same settings"),
                             "strategy");
  recorded_ = archive_io::get_int(a, "recorded");
  cap_ = archive_io::get_int(a, "cap");
  fails_ = archive_io::get_int(a, "fails");
  skip_left_ = archive_io::get_int(a, "skip_left");
  for (int64_t t = 0; t < recorded_; ++t) archive_io::get_tensors_into(a, "state" + std::to_string(t), states_[t]);
  summary_.jumps = archive_io::get_int(a, "jumps");
  summary_.kept = archive_io::get_int(a, "kept");
  summary_.undone = archive_io::get_int(a, "undone");
  summary_.skipped = archive_io::get_int(a, "skipped");
  summary_.recorded_states = archive_io::get_int(a, "recorded_states");
  summary_.horizon_steps_kept = archive_io::get_int(a, "horizon_steps_kept");
  summary_.steps_redone = archive_io::get_int(a, "steps_redone");
  summary_.too_late = archive_io::get_int(a, "too_late");
  summary_.over_budget = archive_io::get_int(a, "over_budget");
  summary_.redo_credit = archive_io::get_int_or(a, "redo_credit", 0);  // none paid in before it existed
  summary_.overhead_steps = archive_io::get_int_or(a, "overhead_steps", 0);  // none charged before it existed
  summary_.kept_behind = archive_io::get_int_or(a, "kept_behind", 0);      // nor kept behind plain
  exponent_fitted_ = archive_io::get_int_or(a, "exponent_fitted", 0) != 0;  // nor a power fitted
  if (exponent_fitted_) {
    const double b = archive_io::get_double(a, "plain_exponent");
    plain_exponent_ = b > 0.0 ? b : NAN;
    summary_.plain_exponent = plain_exponent_;
  }
  summary_.steps_behind = archive_io::get_int_or(a, "steps_behind", 0);
  pending_ = archive_io::get_bool(a, "pending");
  if (pending_) {
    jump_step_ = archive_io::get_int(a, "jump_step");
    pending_k_ = archive_io::get_int(a, "pending_k");
    cursor_.seed = static_cast<uint64_t>(archive_io::get_int(a, "cursor_seed"));
    cursor_.epoch = archive_io::get_int(a, "cursor_epoch");
    cursor_.position = archive_io::get_int(a, "cursor_position");
    optimizer_snapshot_ = archive_io::get_tensor(a, "optimizer_snapshot");
    random_state_ = archive_io::get_tensor(a, "random_state");
    // Slots 3 and 4 always; the older ones (the trend's) where the writer kept them: a
    // checkpoint from before trend_states holds 3 and 4 only, and its verdict fits those.
    trend_from_ = kNowcastContext - 2;
    for (int64_t t = kNowcastContext - 1; t >= recorded_; --t) {
      const std::string key = "state" + std::to_string(t);
      if (t >= kNowcastContext - 2) {
        archive_io::get_tensors_into(a, key, states_[t]);
      } else if (archive_io::get_tensors_into_if_present(a, key, states_[t])) {
        trend_from_ = t;
      } else {
        break;
      }
    }
  }
}

int64_t nowcast_state_bytes(const std::vector<int64_t>& numels, const NowcastStrategyOptions& options) {
  int64_t bytes = parameter_copies_bytes(numels, kNowcastContext) + find_nowcaster(options.model).kept_bytes(numels);
  // Delayed verification keeps the optimizer's state over each window: AdamW's two moments (its
  // archive adds a few KiB of names and scalars; an 8-bit AdamW keeps less).
  if (options.verify && options.verify_after > 0) bytes += parameter_copies_bytes(numels, 2);
  return bytes;
}

int64_t nowcast_jump_bytes(const std::vector<int64_t>& numels, const NowcastStrategyOptions& options) {
  const int64_t predict = find_nowcaster(options.model).jump_bytes(numels, options.model_options, options.architecture);
  // Delayed verification's verdict holds one more copy of the weights while older ones are scored.
  if (options.verify && options.verify_after > 0) return std::max(predict, parameter_copies_bytes(numels, 1));
  return predict;
}

}  // namespace ht
