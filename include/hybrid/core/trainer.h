// The training loop's public face: its options, the seams that plug into it (step strategies,
// callbacks, metrics) and Trainer. It owns no model or data; it drives what it is given.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "hybrid/core/data.h"
#include "hybrid/core/errors.h"
#include "hybrid/core/memory_monitor.h"
#include "hybrid/core/metrics.h"
#include "hybrid/core/objective.h"
#include "hybrid/core/optimizer.h"
#include "hybrid/core/parallel.h"
#include "hybrid/core/schedule.h"

namespace ht {

struct CheckpointOptions {
  std::string dir;             // empty: no periodic checkpoints
  int64_t every_steps = 0;     // 0: off
  double every_seconds = 0.0;  // 0: off
  int keep_last = 3;
};

// What the trainer may do when a step runs out of memory, in this order: release the allocator's
// cache; turn on activation recompute (the model knows how: the app supplies the hook); split each
// batch into more micro-batches (same effective batch); finally write an emergency checkpoint and
// throw OutOfMemoryExit. The failed step is retried from the same batch, never skipped.
// With a budget, a step whose peak crosses warn_fraction of it gets a warning (once per crossing);
// crossing critical_fraction takes the first rungs before any allocation fails: release the cache,
// and if a later step is still above critical, turn on recompute. 0 < warn <= critical <= 1.
struct MemoryPressureOptions {
  bool enabled = true;
  // The run's one memory budget, in tensor bytes (0: none). The trainer sets it on the tracking
  // allocator (allocator.h; on a GPU, CUDA's caching allocator), which then refuses allocations
  // past it with an out-of-memory error. A budget without that allocator is an error, not a no-op.
  int64_t budget_bytes = 0;
  double warn_fraction = 0.85;
  double critical_fraction = 0.95;
  std::function<bool()> enable_recompute;  // returns false when there is nothing more to turn on
  // Called before a real step whose phase differs from the previous real step's (plain training
  // has only Phase::Full): lets the app choose activation recompute per phase. Predicted steps run
  // no backward, so recompute has nothing to save there.
  std::function<void(Phase phase)> on_phase;
  int64_t max_micro_splits = 64;
  // Default: <checkpoint.dir>/ckpt-<step>.ht, where resuming finds it; ./emergency.ht without a dir.
  std::string emergency_checkpoint_path;
};

struct TrainerOptions {
  int64_t max_steps = 1000;
  int64_t grad_accum = 1;      // batches per optimizer step
  int64_t micro_splits = 1;    // each batch split into this many chunks (grown under memory pressure)
  double grad_clip = 1.0;      // max global L2 norm; 0 disables
  LrSchedule schedule;         // shapes the optimizer's own rates over the run; constant by default
  int64_t eval_every = 0;      // 0: evaluate only at the end
  int64_t eval_batches = -1;   // -1: the whole validation split
  CheckpointOptions checkpoint;
  MemoryPressureOptions memory;
  std::string config_text;     // stored verbatim in checkpoints (for `info` and resume checks)
  // > 0: keep an exponential average of the weights with this decay (e.g. 0.97), updated after
  // every verified step; evaluations score it, checkpoints keep it, sampling uses it.
  double average_decay = 0.0;
  // In [0, 1], with average_decay: how much of the average's lag behind the weights evaluations
  // take back (WeightAverage: 1 = none left on a straight path). 0: the average as it is.
  double average_lag_correction = 0.0;
  // >= 0: seeds the random generators (CPU, and the device's) when the trainer is built, so
  // dropout and other draws in the loss repeat; a resumed run restores them from the checkpoint.
  int64_t seed = -1;
  // Where the model's parameters live (module.to(device) before the optimizer is built, so its
  // state is allocated there too); every batch is moved here before the loss sees it.
  c10::Device device = c10::Device(c10::kCPU);
  // Data-parallel training (the dist layer builds it): gradients are averaged over ranks, the
  // memory ladder, stop requests and timed checkpoints are agreed, rank 0 writes checkpoints.
  // Null: one process, exactly as without it.
  std::shared_ptr<DataParallel> parallel;
};

class Trainer;
class WeightAverage;
class MemoryPressurePolicy;
class CheckpointRegistry;

// A full step's result: what the hybrid engine and the trainer need to know.
struct FullStepResult {
  double loss = NAN;       // mean over micro-batches
  double grad_norm = NAN;  // global L2 norm before clipping
  int64_t items = 0;
};

// Decides what each step does. Without one the trainer runs plain full steps. The hybrid engine
// and Lookahead implement this; they call back into Trainer::full_step() for real steps.
class StepStrategy {
 public:
  virtual ~StepStrategy() = default;
  // Names the strategy's state in checkpoints ("hybrid", "lookahead"): a checkpoint of one never
  // loads into a run of another, or into a run without a strategy.
  virtual std::string name() const = 0;
  virtual StepRecord run_step(Trainer& trainer) = 0;
  virtual void save(torch::serialize::OutputArchive& archive) const = 0;
  virtual void load(torch::serialize::InputArchive& archive) = 0;
  virtual void on_finish(Trainer& /*trainer*/) {}
  virtual int64_t state_bytes() const { return 0; }  // tensors the strategy keeps between steps
  // False while the weights may still be rolled back (hybrid: predicted steps not yet verified).
  // fit() defers a due evaluation to the next verified point, so it never scores weights that
  // are then undone and no step is evaluated twice.
  virtual bool at_verified_point() const { return true; }
  virtual std::string summary_text() const { return ""; }  // what it did, a few lines; "" if nothing
};

// Hooks that can act on the run (a Logger only observes): adjust gradients, stop early, keep
// their own state. Every hook defaults to nothing. Called on the training thread, in the order
// the callbacks were added.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(Trainer& /*trainer*/) {}
  // A real step's gradients are complete (all micro-batches and accumulated batches), before
  // the norm is taken, clipping and the update. Predicted steps run no backward.
  virtual void after_backward(Trainer& /*trainer*/) {}
  virtual void after_optimizer_step(Trainer& /*trainer*/) {}
  virtual void on_step_end(Trainer& /*trainer*/, const StepRecord& /*record*/) {}
  virtual void on_eval(Trainer& /*trainer*/, const EvalRecord& /*record*/) {}
  // After the final evaluation (and before the final checkpoint).
  virtual void on_train_end(Trainer& /*trainer*/, const EvalRecord& /*last*/) {}
};

// A user metric over a validation batch, called under NoGradGuard with the weights evaluations
// score: the batch's mean of the metric. Averaged over the evaluation weighted by batch rows.
using MetricFn = std::function<double(const Batch& batch)>;

class Trainer {
 public:
  // Throws OptionsError when the setup cannot work: options out of range, an optimizer over
  // parameters that are not the objective's module's, parameters on another device than
  // options.device, a budget without the tracking allocator.
  Trainer(Objective& objective, Optimizer& optimizer, DataSource& data, TrainerOptions options,
          Logger* logger = nullptr);
  ~Trainer();

  void set_strategy(std::unique_ptr<StepStrategy> strategy);
  StepStrategy* strategy() { return strategy_.get(); }
  void add_callback(std::shared_ptr<Callback> callback);
  void add_metric(const std::string& name, MetricFn metric);
  // The weight average, or null when TrainerOptions::average_decay is 0.
  const WeightAverage* weight_average() const { return average_.get(); }

  // Trains until max_steps or request_stop(). Evaluates at eval_every and at the end, saves
  // periodic checkpoints and a final one. Returns the last evaluation.
  EvalRecord fit();
  StepRecord train_step();  // one step through the strategy (or a plain full step)
  EvalRecord evaluate();  // scores the weight average when there is one
  // Every evaluation fit() made, resumed runs included (checkpoints keep the history).
  const std::vector<EvalRecord>& evaluations() const { return evaluations_; }
  // Runs fn with the weights evaluate() scores in the model (the average, if there is one), e.g.
  // to sample from them; the training weights are back in place afterwards, bit for bit.
  void with_evaluated_weights(const std::function<void()>& fn);

  // Forward + backward + clip + optimizer step on the next grad_accum batches. Sets the lr from
  // the schedule. Throws TrainingError on a non-finite loss or gradient, a loss that is not a
  // scalar or a loss function that fails, naming the step and the batch. Under memory pressure
  // it walks the ladder in MemoryPressureOptions and retries. `phase` is passed to on_phase.
  FullStepResult full_step(Phase phase = Phase::Full);
  void set_lr_for_current_step();
  Batch next_batch();  // the next training batch, on the trainer's device

  void save_checkpoint(const std::string& path);
  // Restores everything a checkpoint holds. Throws CheckpointError for a file that cannot be
  // read and CheckpointMismatch for one of another model, optimizer or step strategy.
  void load_checkpoint(const std::string& path);
  // Loads the newest checkpoint in dir that reads back intact; corrupt ones are reported through
  // the logger and skipped. Returns the path used, or "" if dir holds none. A dir that does not
  // exist is a CheckpointError (a mistyped path must not silently start over).
  std::string resume_latest(const std::string& dir);
  // Periodic saving, as configured (step count, wall clock). Called by fit() after each step.
  void maybe_checkpoint();
  void save_emergency_checkpoint(const std::string& path);
  // Rung 4 of the ladder, also for an evaluation that fails at single rows: saves the emergency
  // checkpoint and throws OutOfMemoryExit naming it.
  [[noreturn]] void exit_out_of_memory(const std::string& what);

  void request_stop() { stop_requested_ = true; }
  bool stop_requested() const { return stop_requested_; }
  int64_t step() const { return step_; }
  void advance_step() { ++step_; }
  // Takes back n steps that a strategy undid (predicted steps rolled back): they never happened,
  // so the learning-rate schedule and the step budget do not count them.
  void rewind_steps(int64_t n);

  Objective& objective() { return objective_; }
  Optimizer& optimizer() { return optimizer_; }
  DataSource& data() { return data_; }
  const TrainerOptions& options() const { return options_; }
  Logger& logger() { return *logger_; }
  // Per-phase peaks of the current step (strategies mark their own phases) and of the run.
  MemoryMonitor& memory() { return memory_; }
  MemorySummary memory_summary() const;
  int64_t memory_budget() const;  // the budget in force; 0 = none
  // The process group of a data-parallel run, or single_process(): strategies average their
  // verification losses and broadcast their wall-clock decisions through it.
  Collective& collective();

 private:
  Objective& objective_;
  Optimizer& optimizer_;
  DataSource& data_;
  TrainerOptions options_;
  Logger* logger_;
  std::unique_ptr<Logger> null_logger_;
  std::unique_ptr<StepStrategy> strategy_;
  std::unique_ptr<WeightAverage> average_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<std::pair<std::string, MetricFn>> metrics_;
  std::vector<EvalRecord> evaluations_;
  int64_t step_ = 0;
  std::atomic<bool> stop_requested_{false};
  std::chrono::steady_clock::time_point last_checkpoint_time_;
  int64_t last_checkpoint_step_ = 0;
  int64_t pending_eval_step_ = 0;  // an evaluation due but waiting for verified weights (fit)
  Phase last_phase_ = Phase::Full;  // of the last real step, for MemoryPressureOptions::on_phase
  bool phase_announced_ = false;
  bool timed_checkpoint_due_ = false;  // data-parallel: rank 0's clock, agreed after each step
  int64_t last_batch_rows_ = 0;    // rows of the last batch drawn: the ladder cannot split past it
  MemoryMonitor memory_;
  std::unique_ptr<MemoryPressurePolicy> pressure_;
  bool owns_budget_ = false;    // options set the budget; the destructor restores budget_before_
  int64_t budget_before_ = 0;

  FullStepResult full_step_once();
  void agree_after_step();  // data-parallel: stop requests and rank 0's checkpoint clock
  EvalRecord evaluate_weights();  // evaluate() on the model's current weights
  EvalRecord evaluate_or_exit();  // evaluate(); out of memory there ends the run as rung 4 does
  void record_evaluation(const EvalRecord& record);
  StepRecord plain_step();
  void save_final_checkpoint();
  std::unique_ptr<CheckpointRegistry> checkpoint_parts();  // what a checkpoint of this run holds
};

}  // namespace ht
