// nowcast-meta tune: loss-aware tuning of a meta-trained nowcaster on fresh corpus runs (full
// states kept), and its score on held-out runs against the weights it started from.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "corpus.h"
#include "hybrid/hybrid/nowcast_meta.h"

namespace ht::meta {

// Trains `task` keeping every interval's full state, then calls `use` with the run (probes:
// validation batches of the task's data, at most as many as its validation split holds). The run
// lives only for the call. average_half_lives: the weights' moving averages kept beside the states.
void with_recorded_run(const CorpusTask& task, const std::string& fashion_mnist_dir, const std::string& text_path,
                       int64_t probes, const std::function<void(const LossTuneRun&)>& use,
                       const std::vector<int64_t>& average_half_lives = {});

struct HeldOutScore {
  double ratio_start = 0, ratio_tuned = 0;  // mean probe-loss ratio (prediction / now) over the grid
  std::string table;                        // one markdown row per (t, k)
};

// Scores both weights on a grid (t: the middle and last state; k: 1, 5, 10, 20, 40) of one run.
HeldOutScore score_held_out(const LossTuner& start, const LossTuner& tuned, const LossTuneRun& run,
                            const std::string& task);

}  // namespace ht::meta
