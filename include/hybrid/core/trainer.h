// The training loop: steps (full or strategy-driven), evaluation, checkpoints, resume.
// It owns no model or data; it drives an Objective, an Optimizer and a DataSource it is given.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "hybrid/core/data.h"
#include "hybrid/core/memory_monitor.h"
#include "hybrid/core/metrics.h"
#include "hybrid/core/objective.h"
#include "hybrid/core/optimizer.h"
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
  int64_t budget_bytes = 0;        // 0: the allocator's budget (set_memory_budget), if any
  double warn_fraction = 0.85;
  double critical_fraction = 0.95;
  std::function<bool()> enable_recompute;  // returns false when there is nothing more to turn on
  // Called before a full step whose phase ("warmup", "full", "correct"; plain training: "full")
  // differs from the previous full step's: lets the app choose activation recompute per phase.
  // Predicted steps run no backward, so recompute has nothing to save there.
  std::function<void(const std::string& phase)> on_phase;
  int64_t max_micro_splits = 64;
  // Default: <checkpoint.dir>/ckpt-<step>.ht, where resuming finds it; ./emergency.ht without a dir.
  std::string emergency_checkpoint_path;
};

struct TrainerOptions {
  int64_t max_steps = 1000;
  int64_t grad_accum = 1;      // batches per optimizer step
  int64_t micro_splits = 1;    // each batch split into this many chunks (grown under memory pressure)
  double grad_clip = 1.0;      // max global L2 norm; 0 disables
  LrSchedule schedule;
  int64_t eval_every = 0;      // 0: evaluate only at the end
  int64_t eval_batches = -1;   // -1: the whole validation split
  CheckpointOptions checkpoint;
  MemoryPressureOptions memory;
  std::string config_text;     // stored verbatim in checkpoints (for `info` and resume checks)
  // > 0: keep an exponential average of the weights with this decay (e.g. 0.97), updated after
  // every verified step; evaluations score it, checkpoints keep it, sampling uses it.
  double average_decay = 0.0;
};

class TrainingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown after the pressure ladder is exhausted; the emergency checkpoint holds all progress.
class OutOfMemoryExit : public TrainingError {
 public:
  OutOfMemoryExit(const std::string& msg, std::string checkpoint)
      : TrainingError(msg), checkpoint_path(std::move(checkpoint)) {}
  std::string checkpoint_path;
};

class Trainer;
class WeightAverage;

// A full step's result: what the hybrid engine and the trainer need to know.
struct FullStepResult {
  double loss = NAN;       // mean over micro-batches
  double grad_norm = NAN;  // global L2 norm before clipping
  int64_t items = 0;
};

// Decides what each step does. Without one the trainer runs plain full steps. The hybrid engine
// implements this; it calls back into Trainer::full_step() for real steps.
class StepStrategy {
 public:
  virtual ~StepStrategy() = default;
  virtual StepRecord run_step(Trainer& trainer) = 0;
  virtual void save(torch::serialize::OutputArchive& archive) const = 0;
  virtual void load(torch::serialize::InputArchive& archive) = 0;
  virtual void on_finish(Trainer& /*trainer*/) {}
  virtual int64_t state_bytes() const { return 0; }  // tensors the strategy keeps between steps
  // False while the weights may still be rolled back (hybrid: predicted steps not yet verified).
  // fit() defers a due evaluation to the next verified point, so it never scores weights that
  // are then undone and no step is evaluated twice.
  virtual bool at_verified_point() const { return true; }
};

// What a checkpoint holds, read without building the model (for `hybrid-train info`).
struct CheckpointSummary {
  int64_t step = 0;
  std::string config_text;
  DataCursor cursor;
  int64_t file_bytes = 0;
  int64_t parameter_tensors = 0;
  int64_t parameter_elements = 0;
  bool has_strategy = false;
  bool has_average = false;
};
CheckpointSummary inspect_checkpoint(const std::string& path);
// Copies a checkpoint's model tensors into `module` in place (for eval and sampling); the
// parameters from its weight average when it holds one and `prefer_average` is set.
void load_checkpoint_weights(const std::string& path, torch::nn::Module& module, bool prefer_average = true);

class Trainer {
 public:
  Trainer(Objective& objective, Optimizer& optimizer, DataSource& data, TrainerOptions options,
          Logger* logger = nullptr);
  ~Trainer();

  void set_strategy(std::unique_ptr<StepStrategy> strategy);
  StepStrategy* strategy() { return strategy_.get(); }
  // The weight average, or null when TrainerOptions::average_decay is 0.
  const WeightAverage* weight_average() const { return average_.get(); }

  // Trains until max_steps or request_stop(). Evaluates at eval_every and at the end, saves
  // periodic checkpoints and a final one. Returns the last evaluation.
  EvalRecord fit();
  StepRecord train_step();  // one step through the strategy (or a plain full step)
  EvalRecord evaluate();  // scores the weight average when there is one
  // Runs fn with the weights evaluate() scores in the model (the average, if there is one), e.g.
  // to sample from them; the training weights are back in place afterwards, bit for bit.
  void with_evaluated_weights(const std::function<void()>& fn);

  // Forward + backward + clip + optimizer step on the next grad_accum batches. Sets the lr from
  // the schedule. Throws TrainingError on a non-finite loss or gradient, naming the step.
  // Under memory pressure it walks the ladder in MemoryPressureOptions and retries.
  // `phase` names the step for MemoryPressureOptions::on_phase.
  FullStepResult full_step(const std::string& phase = "full");
  void set_lr_for_current_step();
  // Loss of a batch without building a graph (verification forwards, predict steps).
  double forward_loss(const Batch& batch);

  void save_checkpoint(const std::string& path);
  void load_checkpoint(const std::string& path);
  // Loads the newest checkpoint in dir that reads back intact; corrupt ones are reported through
  // the logger and skipped. Returns the path used, or "" if there was none.
  std::string resume_latest(const std::string& dir);
  // Periodic saving, as configured (step count, wall clock). Called by fit() after each step.
  void maybe_checkpoint();
  void save_emergency_checkpoint(const std::string& path);
  // Rung 4 of the ladder, also for an evaluation that fails at single rows: saves the emergency
  // checkpoint and throws OutOfMemoryExit naming it.
  [[noreturn]] void exit_out_of_memory(const std::string& what);

  void request_stop() { stop_requested_ = true; }
  int64_t step() const { return step_; }
  void advance_step() { ++step_; }
  // Takes back n steps that a strategy undid (predicted steps rolled back): they never happened,
  // so the learning-rate schedule and the step budget do not count them.
  void rewind_steps(int64_t n);

  Objective& objective() { return objective_; }
  Optimizer& optimizer() { return optimizer_; }
  DataSource& data() { return data_; }
  const TrainerOptions& options() const { return options_; }
  TrainerOptions& mutable_options() { return options_; }
  Logger& logger() { return *logger_; }
  // Per-phase peaks of the current step (strategies mark their own phases) and of the run.
  MemoryMonitor& memory() { return memory_; }
  MemorySummary memory_summary() const;
  int64_t memory_budget() const;  // options' budget, else the allocator's; 0 = none

 private:
  Objective& objective_;
  Optimizer& optimizer_;
  DataSource& data_;
  TrainerOptions options_;
  Logger* logger_;
  std::unique_ptr<Logger> null_logger_;
  std::unique_ptr<StepStrategy> strategy_;
  std::unique_ptr<WeightAverage> average_;
  int64_t step_ = 0;
  std::atomic<bool> stop_requested_{false};
  std::chrono::steady_clock::time_point last_checkpoint_time_;
  int64_t last_checkpoint_step_ = 0;
  int64_t pending_eval_step_ = 0;  // an evaluation due but waiting for verified weights (fit)
  bool recompute_tried_ = false;  // the ladder's second rung is taken once per run
  std::string last_phase_;        // of the last full step, for MemoryPressureOptions::on_phase
  int64_t last_batch_rows_ = 0;   // rows of the last batch drawn: the ladder cannot split past it
  MemoryMonitor memory_;
  // Budget watch: 0 normal, 1 above warn, 2 above critical (cache released), 3 recompute tried.
  int memory_level_ = 0;
  int64_t steps_below_warn_ = 0;  // consecutive; the level re-arms after enough of them

  FullStepResult full_step_once();
  EvalRecord evaluate_weights();  // evaluate() on the model's current weights
  EvalRecord evaluate_or_exit();  // evaluate(); out of memory there ends the run as rung 4 does
  StepRecord plain_step();
  void respond_to_memory_pressure(const std::string& what, int attempt);
  void watch_memory_budget(const StepRecord& rec);
  bool try_enable_recompute();
};

}  // namespace ht
