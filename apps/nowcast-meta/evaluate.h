// nowcast-meta eval: our nowcaster against the released WNN+ and "no jump" on tasks the corpus never
// saw (the benchmarks' FM-16 and tiny GPT on KJV), offline on one recorded trajectory each.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ht::meta {

struct EvalTask {
  std::string name;      // "fm16", "gpt-tiny-kjv"
  int64_t interval = 200;  // steps between recorded states (period / 5)
  int64_t states = 45;
  std::vector<int64_t> jump_at = {4, 9, 19};  // state indices t: the context is t-4..t
  std::vector<int64_t> horizons = {1, 2, 4, 8, 16, 32, 40};
  int64_t val_batches = 8;  // the loss at a set of weights: this many validation batches
};

struct EvalRow {
  std::string task;
  int64_t step = 0;  // training steps at the jump (state t)
  int64_t k = 0;
  // Mean over parameter tensors of mean((prediction - real future)^2) / std^2, std the tensor's
  // over its 5 context states (the nowcasters' normalisation).
  double nmse_none = 0, nmse_wnn = 0, nmse_own = 0;
  // Validation loss at the weights now, at each prediction and at the real future weights.
  double loss_now = 0, loss_none = 0, loss_wnn = 0, loss_own = 0, loss_true = 0;
};

// The benchmark tasks as bench/bench_tasks.h builds them under NiNo's protocol (constant AdamW):
// "fm16" (lr 6e-3, batch 128) and "gpt-tiny-kjv" (4 x 128, lr 3e-3, batch 16 x 128).
// Trains one, records a state every interval steps, then scores every (t, k) that fits.
std::vector<EvalRow> evaluate_task(const EvalTask& task, const std::string& own_weights,
                                   const std::string& wnn_weights, const std::string& fashion_mnist_dir,
                                   const std::function<void(const std::string&)>& progress);

}  // namespace ht::meta
