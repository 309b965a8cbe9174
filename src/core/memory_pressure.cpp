// The memory-pressure ladder: release the allocator's cache, turn on activation recompute, split
// the batch into micro-batches, and, past the last rung, let the trainer save and exit.
#include "memory_pressure.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <torch/torch.h>

namespace ht {
namespace {

// After this many consecutive steps below the warn level, a new crossing is reported again.
// Longer than a hybrid predict phase, whose steps peak far lower than the full steps around it.
constexpr int64_t kRearmSteps = 100;

}  // namespace

MemoryPressurePolicy::MemoryPressurePolicy(const MemoryPressureOptions& options, MemoryMonitor& monitor,
                                           Logger& logger)
    : options_(options), monitor_(monitor), logger_(logger) {}

bool MemoryPressurePolicy::try_enable_recompute() {
  if (recompute_tried_) return false;
  recompute_tried_ = true;
  recompute_on_ = options_.enable_recompute && options_.enable_recompute();
  return recompute_on_;
}

bool MemoryPressurePolicy::agree(Collective& ranks, bool retry, int64_t& micro_splits, std::string* why) {
  // [gave up (as rank + 1, so rank 0 counts), splits, recompute on]; the max of each over ranks.
  std::vector<at::Tensor> state{torch::tensor({retry ? 0.0 : static_cast<double>(ranks.rank() + 1),
                                               static_cast<double>(micro_splits), recompute_on_ ? 1.0 : 0.0},
                                              torch::kFloat64)};
  ranks.allreduce_max(state);
  const auto s = state[0];
  micro_splits = static_cast<int64_t>(s[1].item<double>());
  if (s[2].item<double>() > 0 && !recompute_tried_) try_enable_recompute();
  const auto gave_up = static_cast<int>(s[0].item<double>()) - 1;
  if (gave_up < 0) return true;
  if (retry) *why = "rank " + std::to_string(gave_up) + " is out of memory with every rung of the ladder taken";
  return false;
}

bool MemoryPressurePolicy::respond(const std::string& where, int attempt, int64_t batch_rows,
                                   int64_t& micro_splits, std::string* why) {
  // Rung 1: the freed temporaries of the failed attempt sit in the cache. With nothing released
  // (a CPU budget counts live bytes only) the same attempt would fail again: go on to rung 2.
  if (attempt == 0) {
    const int64_t released = monitor_.release_cached();
    if (released > 0) {
      logger_.on_message(Level::Warning, where + "released " + std::to_string(released >> 20) +
                                             " MiB of cached blocks, retrying");
      return true;
    }
  }
  if (try_enable_recompute()) {  // rung 2
    logger_.on_message(Level::Warning, where + "activation recompute turned on, retrying");
    return true;
  }
  // Rung 3, while there is something left to split: a chunk has at least one row.
  const bool can_split = batch_rows == 0 || micro_splits < batch_rows;
  if (can_split && micro_splits * 2 <= options_.max_micro_splits) {
    micro_splits *= 2;
    logger_.on_message(Level::Warning, where + "splitting each batch into " + std::to_string(micro_splits) +
                                           " micro-batches (same effective batch), retrying");
    return true;
  }
  *why = "still failing with recompute and " +
         std::to_string(std::min(micro_splits, std::max<int64_t>(batch_rows, 1))) + " micro-batches";
  return false;  // rung 4 is the trainer's: it holds what the emergency checkpoint saves
}

void MemoryPressurePolicy::watch(const StepRecord& rec, int64_t budget) {
  if (budget <= 0) return;
  const double share = static_cast<double>(rec.peak_bytes) / static_cast<double>(budget);
  if (share < options_.warn_fraction) {
    if (level_ > 0 && ++steps_below_warn_ >= kRearmSteps) level_ = 0;
    return;
  }
  steps_below_warn_ = 0;
  const bool critical = share >= options_.critical_fraction;
  if (level_ >= (critical ? 3 : 1)) return;  // already reported and acted on
  std::ostringstream os;
  os.precision(3);
  os << "step " << rec.step << ": tensor memory peaked at " << mib_text(rec.peak_bytes) << ", "
     << std::round(1000.0 * share) / 10.0 << "% of the " << mib_text(budget) << " budget (above "
     << (critical ? "critical_fraction " : "warn_fraction ")
     << (critical ? options_.critical_fraction : options_.warn_fraction) << ")";
  if (!critical) {
    level_ = 1;
  } else if (!options_.enabled) {
    level_ = 3;
    os << "; memory pressure handling is off";
  } else if (level_ < 2) {
    level_ = 2;
    os << "; released " << mib_text(monitor_.release_cached()) << " of cached blocks";
  } else {  // still critical after the cache was released
    level_ = 3;
    os << (try_enable_recompute() ? " again; activation recompute turned on"
                                  : " again; no activation recompute left to turn on");
  }
  logger_.on_message(Level::Warning, os.str());
}

}  // namespace ht
