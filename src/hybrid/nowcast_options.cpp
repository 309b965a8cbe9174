// Nowcast mode's options: their checks, NiNo's decaying horizon schedule (and its reading under a
// learning-rate schedule), and the run's summary as text. No tensors: the engine is nowcast_strategy.cpp.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "hybrid/core/errors.h"
#include "hybrid/core/memory_monitor.h"
#include "hybrid/hybrid/nowcast_strategy.h"
#include "hybrid/hybrid/nowcaster_registry.h"
#include "nowcast_text.h"

namespace ht {

void NowcastStrategyOptions::validate() const {
  find_nowcaster(model);
  if (period < kNowcastContext || period % kNowcastContext != 0)
    fail_option("period", "= " + std::to_string(period) + ": must be a positive multiple of 5 (a state every period / 5 steps)");
  if (horizon_min < 1) fail_option("horizon_min", "= " + std::to_string(horizon_min) + ": must be >= 1");
  if (horizon_max < horizon_min)
    fail_option("horizon_max", "= " + std::to_string(horizon_max) + ": must be >= NowcastStrategyOptions.horizon_min (" +
                               std::to_string(horizon_min) + ")");
  if (!(horizon_power > 0.0 && std::isfinite(horizon_power)))
    fail_option("horizon_power", cat("= ", horizon_power, ": must be > 0 (NiNo's is 2)"));
  if (schedule_steps < 0) fail_option("schedule_steps", "must be >= 0 (0: the run's max_steps)");
  if (last_jump_step < 0) fail_option("last_jump_step", cat("= ", last_jump_step, ": must be >= 0 (0: no limit)"));
  if (!(last_jump_fraction >= 0.0 && last_jump_fraction <= 1.0))
    fail_option("last_jump_fraction", cat("= ", last_jump_fraction, ": must be in [0, 1] (0: no limit; 0.5: no jump after mid-run)"));
  if (probe_batches < 1) fail_option("probe_batches", "= " + std::to_string(probe_batches) + ": must be >= 1");
  if (horizon_search < 1 || horizon_search > 16)
    fail_option("horizon_search", "= " + std::to_string(horizon_search) + ": must be in [1, 16] (1 = the schedule's k only)");
  if (horizon_search > 1 && !verify) fail_option("horizon_search", "needs verify: the probe chooses among the horizons");
  // The verdict needs the two states before the jump (slots 3 and 4), which the window's own
  // recordings (slots 0, 1, 2) must not reach: it ends before the 4th recording after the jump.
  if (verify_after < 0 || verify_after >= (kNowcastContext - 1) * (period / kNowcastContext))
    fail_option("verify_after", cat("= ", verify_after, ": must be in [0, 4 x period / 5 = ",
                             (kNowcastContext - 1) * (period / kNowcastContext),
                             ") (0: judge a jump right away; the window must end before the 4th state recorded after it)"));
  if (verify_after > 0 && !verify) fail_option("verify_after", "needs verify (it delays the verification)");
  const int64_t window_recordings = verify_after / (period / kNowcastContext);
  if (trend_states < 2 || trend_states > kNowcastContext - window_recordings)
    fail_option("trend_states", cat("= ", trend_states, ": must be in [2, ", kNowcastContext - window_recordings,
                             "] (5 states less the ", window_recordings, " the window of verify_after ", verify_after,
                             " records over)"));
  if (plain_model != "trend" && plain_model != "power")
    fail_option("plain_model", "= \"" + plain_model + "\": must be \"trend\" or \"power\"");
  if (power_level_states < 1 || power_level_states > kNowcastContext - window_recordings)
    fail_option("power_level_states", cat("= ", power_level_states, ": must be in [1, ", kNowcastContext - window_recordings,
                                   "] (5 states less the ", window_recordings, " the window of verify_after ", verify_after,
                                   " records over)"));
  if (power_level_states > 1 && plain_model != "power")
    fail_option("power_level_states", cat("= ", power_level_states, " needs plain_model = \"power\" (it sets that power's level)"));
  if (plain_model == "power" && verify_after == 0)
    fail_option("plain_model", "= \"power\" needs delayed verification (verify_after > 0): it guesses plain's progress over the window");
  if (keep_progress && verify_after == 0)
    fail_option("keep_progress", "needs delayed verification (verify_after > 0): it keeps jumps whose window is spent");
  if (!(redo_budget >= 0.0 && redo_budget <= 1.0))
    fail_option("redo_budget", cat("= ", redo_budget, ": must be in [0, 1] (a share of the run's steps)"));
  if (verify_after > 0 && horizon_search > 1)
    fail_option("horizon_search", "must be 1 with verify_after > 0: the search compares horizons right after the jump");
  if (!(tolerance >= 0.0 && tolerance <= 1.0))
    fail_option("tolerance", cat("= ", tolerance, ": must be in [0, 1] (a share of the probe loss)"));
  if (!(jump_norm_scale >= 0.0 && jump_norm_scale <= 1.0))
    fail_option("jump_norm_scale", cat("= ", jump_norm_scale,
                                       ": must be in [0, 1] (1: the prediction's norm, 0: the norm before the jump)"));
  if (!(jump_scale > 0.0 && jump_scale <= 4.0))
    fail_option("jump_scale", cat("= ", jump_scale, ": must be in (0, 4] (1: the prediction itself)"));
  try {
    JumpKinds::parse(jump_kinds);
  } catch (const NowcastError& e) {
    fail_option("jump_kinds", cat("= \"", jump_kinds, "\": ", e.what()));
  }
  if (!(momentum_scale >= 0.0 && momentum_scale <= 1.0))
    fail_option("momentum_scale", cat("= ", momentum_scale, ": must be in [0, 1]"));
  if (architecture != "feedforward" && architecture != "gpt2")
    fail_option("architecture", "= \"" + architecture + "\": must be \"feedforward\" (MLP, CNN) or \"gpt2\"");
  if (architecture == "gpt2" && n_head < 1)
    fail_option("n_head", "= " + std::to_string(n_head) + ": a gpt2 architecture needs its attention heads (>= 1)");
  if (model_options.chunk_rows < 1) fail_option("model_options.chunk_rows", "must be >= 1");
}

NowcastStrategyOptions::OptimizerState parse_optimizer_state(const std::string& name) {
  if (name == "keep") return NowcastStrategyOptions::OptimizerState::Keep;
  if (name == "reset") return NowcastStrategyOptions::OptimizerState::Reset;
  if (name == "rescale") return NowcastStrategyOptions::OptimizerState::Rescale;
  throw OptionsError("NowcastStrategyOptions.optimizer_state = \"" + name + "\": must be keep, reset or rescale");
}

const char* to_string(NowcastStrategyOptions::OptimizerState state) {
  switch (state) {
    case NowcastStrategyOptions::OptimizerState::Keep: return "keep";
    case NowcastStrategyOptions::OptimizerState::Reset: return "reset";
    case NowcastStrategyOptions::OptimizerState::Rescale: return "rescale";
  }
  return "keep";
}

std::vector<int64_t> nowcast_horizons(const NowcastStrategyOptions& o, int64_t run_steps) {
  // NiNo (optim/nino.py): np.linspace(max ** (1/p), min ** (1/p), n) ** p, rounded half to even.
  const int64_t n = std::max<int64_t>(1, run_steps / o.period);
  const double a = std::pow(static_cast<double>(o.horizon_max), 1.0 / o.horizon_power);
  const double b = std::pow(static_cast<double>(o.horizon_min), 1.0 / o.horizon_power);
  std::vector<int64_t> k(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    // numpy's linspace: start + j * step, the last value exactly `stop`.
    const double x = j == n - 1 && n > 1 ? b : a + static_cast<double>(j) * ((b - a) / static_cast<double>(std::max<int64_t>(1, n - 1)));
    const double v = std::nearbyint(std::pow(x, o.horizon_power));  // FE_TONEAREST: half to even
    k[static_cast<size_t>(j)] = std::clamp<int64_t>(static_cast<int64_t>(v), o.horizon_min, o.horizon_max);
  }
  return k;
}

std::vector<int64_t> schedule_horizons(const std::vector<int64_t>& horizons, const LrSchedule& schedule, int64_t period) {
  const int64_t interval = period / kNowcastContext;
  // The mean relative rate over steps [from, to): the distance plain's updates cover there, per step.
  const auto mean_rate = [&](int64_t from, int64_t to) {
    double sum = 0.0;
    for (int64_t u = from; u < to; ++u) sum += schedule.at(1.0, u);
    return sum / static_cast<double>(std::max<int64_t>(1, to - from));
  };
  std::vector<int64_t> scaled(horizons.size());
  for (size_t j = 0; j < horizons.size(); ++j) {
    const int64_t jump = static_cast<int64_t>(j + 1) * period - 1;  // the 0-based step the jump replaces
    const double recorded = mean_rate(jump - (kNowcastContext - 1) * interval, jump);
    const double ahead = mean_rate(jump, jump + horizons[j] * interval);
    const double k = static_cast<double>(horizons[j]) * ahead / std::max(recorded, 1e-12);
    scaled[j] = std::clamp<int64_t>(std::llround(k), 1, horizons[j]);
  }
  return scaled;
}

std::string NowcastSummary::to_string() const {
  std::ostringstream os;
  os << "nowcast (" << model << "): " << steps << " steps, " << jumps << " jumps: " << kept << " kept";
  if (kept_behind > 0) os << " (" << kept_behind << " of them behind plain, ~" << steps_behind << " steps in all)";
  os << ", " << undone << " undone, " << skipped << " skipped while backing off; " << horizon_steps_kept
     << " steps jumped by kept jumps; horizon cap at the end " << horizon_cap << "\n";
  if (steps_redone > 0 || too_late > 0 || optimizer_snapshot_bytes > 0)
    os << "  delayed verification: " << steps_redone << " steps redone after undone jumps, " << too_late
       << " jumps not made (too close to the end to judge), " << over_budget
       << " not made (redo budget spent); " << redo_credit << " steps paid into the budget by kept jumps; "
       << overhead_steps << " steps' time charged to it for predictions; optimizer snapshot "
       << mib_text(optimizer_snapshot_bytes) << "\n";
  os << "  time: setup " << fixed(setup_ms, 0) << " ms, predictions " << fixed(predict_ms, 0) << " ms, probes "
     << fixed(probe_ms, 0) << " ms, recording " << fixed(record_ms, 0) << " ms, real steps " << fixed(real_ms, 0)
     << " ms; state " << mib_text(state_bytes);
  for (const auto& line : jump_log) os << "\n  " << line;
  return os.str();
}

}  // namespace ht
