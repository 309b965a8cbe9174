// The training loop: steps (full or strategy-driven), evaluation, checkpoints, resume.
// It owns no model or data; it drives an Objective, an Optimizer and a DataSource it is given.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "hybrid/core/data.h"
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

struct TrainerOptions {
  int64_t max_steps = 1000;
  int64_t grad_accum = 1;      // micro-batches per optimizer step
  double grad_clip = 1.0;      // max global L2 norm; 0 disables
  LrSchedule schedule;
  int64_t eval_every = 0;      // 0: evaluate only at the end
  int64_t eval_batches = -1;   // -1: the whole validation split
  CheckpointOptions checkpoint;
  std::string config_text;     // stored verbatim in checkpoints (for `info` and resume checks)
};

class TrainingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Trainer;

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
};

class Trainer {
 public:
  Trainer(Objective& objective, Optimizer& optimizer, DataSource& data, TrainerOptions options,
          Logger* logger = nullptr);
  ~Trainer();

  void set_strategy(std::unique_ptr<StepStrategy> strategy);
  StepStrategy* strategy() { return strategy_.get(); }

  // Trains until max_steps or request_stop(). Evaluates at eval_every and at the end, saves
  // periodic checkpoints and a final one. Returns the last evaluation.
  EvalRecord fit();
  StepRecord train_step();  // one step through the strategy (or a plain full step)
  EvalRecord evaluate();

  // Forward + backward + clip + optimizer step on the next grad_accum batches. Sets the lr from
  // the schedule. Throws TrainingError on a non-finite loss or gradient, naming the step.
  FullStepResult full_step();
  void set_lr_for_current_step();

  void save_checkpoint(const std::string& path);
  void load_checkpoint(const std::string& path);
  // Loads the newest checkpoint in dir that reads back intact; corrupt ones are reported through
  // the logger and skipped. Returns the path used, or "" if there was none.
  std::string resume_latest(const std::string& dir);
  // Periodic saving, as configured (step count, wall clock). Called by fit() after each step.
  void maybe_checkpoint();

  void request_stop() { stop_requested_ = true; }
  int64_t step() const { return step_; }
  void advance_step() { ++step_; }

  Objective& objective() { return objective_; }
  Optimizer& optimizer() { return optimizer_; }
  DataSource& data() { return data_; }
  const TrainerOptions& options() const { return options_; }
  TrainerOptions& mutable_options() { return options_; }
  Logger& logger() { return *logger_; }

 private:
  Objective& objective_;
  Optimizer& optimizer_;
  DataSource& data_;
  TrainerOptions options_;
  Logger* logger_;
  std::unique_ptr<Logger> null_logger_;
  std::unique_ptr<StepStrategy> strategy_;
  int64_t step_ = 0;
  std::atomic<bool> stop_requested_{false};
  std::chrono::steady_clock::time_point last_checkpoint_time_;
  int64_t last_checkpoint_step_ = 0;
};

}  // namespace ht
