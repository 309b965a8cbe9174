// The response to memory pressure as one policy object: the ladder a step that ran out of memory
// climbs, and the budget watch that takes its first rungs before an allocation fails.
#pragma once

#include <cstdint>
#include <string>

#include "hybrid/core/metrics.h"
#include "hybrid/core/parallel.h"
#include "hybrid/core/trainer.h"

namespace ht {

class MemoryPressurePolicy {
 public:
  MemoryPressurePolicy(const MemoryPressureOptions& options, MemoryMonitor& monitor, Logger& logger);

  // After the forward or backward of a step ran out of memory (attempt 0 is the first failure of
  // the step; nothing was applied). Takes the next rung and returns true to retry the step, or
  // returns false when the ladder is exhausted (rung 4: the caller saves and exits) with *why set.
  // micro_splits is the trainer's split count (rung 3 doubles it); batch_rows bounds it.
  bool respond(const std::string& where, int attempt, int64_t batch_rows, int64_t& micro_splits,
               std::string* why);
  // After each step, with the budget in force: warn once per crossing of warn_fraction; above
  // critical_fraction release the cache, and if still critical later, turn on recompute.
  void watch(const StepRecord& rec, int64_t budget);
  // Data-parallel, after respond() on every rank: the furthest rung any rank took is taken by
  // all (the most micro-batch splits, recompute if any rank turned it on); none retries once any
  // rank's ladder is exhausted. Returns whether to retry; *why says which rank gave up.
  bool agree(Collective& ranks, bool retry, int64_t& micro_splits, std::string* why);

 private:
  bool try_enable_recompute();  // rung 2, taken once per run

  const MemoryPressureOptions& options_;
  MemoryMonitor& monitor_;
  Logger& logger_;
  bool recompute_tried_ = false;
  bool recompute_on_ = false;  // the hook turned recompute on
  // Budget watch: 0 normal, 1 above warn, 2 above critical (cache released), 3 recompute tried.
  int level_ = 0;
  int64_t steps_below_warn_ = 0;  // consecutive; the level re-arms after enough of them
};

}  // namespace ht
