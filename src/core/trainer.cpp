// The training loop, top to bottom: fit() -> train_step() -> full_step(): forward, backward,
// clip, update, with the memory-pressure ladder around each step. Evaluation, checkpoints and the
// ladder's rungs live in evaluation.cpp, trainer_checkpoint.cpp and memory_pressure.cpp.
#include "hybrid/core/trainer.h"

#include <cmath>
#include <sstream>
#include <unordered_set>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/torch.h>

#include "core/eval_schedule.h"
#include "hybrid/core/allocator.h"
#include "hybrid/core/checkpoint_file.h"
#include "hybrid/core/grad_clip.h"
#include "hybrid/core/weight_average.h"
#include "memory_pressure.h"

namespace ht {
namespace {

int64_t bytes_of(const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

// "step 12 (batch 3 of epoch 0)": where a failure happened, so the batch can be found again.
std::string where(int64_t step, const DataCursor& batch) {
  return "step " + std::to_string(step) + " (batch " + std::to_string(batch.position) + " of epoch " +
         std::to_string(batch.epoch) + ")";
}

// The optimizer must update the objective's module: an optimizer built over another module's
// parameters trains nothing the loss sees, and checkpoints would save the wrong weights.
void check_optimizer_owns_module(Objective& objective, const Optimizer& optimizer) {
  std::unordered_set<const void*> ours;
  for (const auto& p : objective.module().parameters()) ours.insert(p.unsafeGetTensorImpl());
  int64_t foreign = 0;
  for (const auto& p : optimizer.parameters())
    if (!ours.count(p.unsafeGetTensorImpl())) ++foreign;
  if (foreign > 0)
    throw OptionsError("trainer: " + std::to_string(foreign) + " of the optimizer's " +
                       std::to_string(optimizer.parameters().size()) +
                       " parameters are not the objective's module's: build the optimizer over "
                       "module->parameters() of the module the loss calls");
}

// "cuda" means the current CUDA device, which is where module->to("cuda") put the parameters:
// name its index, so the parameters' device and the memory counters' device are the same one.
TrainerOptions with_device_index(TrainerOptions o) {
  if (!o.device.is_cpu() && !o.device.has_index())
    o.device = c10::Device(o.device.type(), c10::impl::getDeviceGuardImpl(o.device.type())->getDevice().index());
  return o;
}

void check_device(Objective& objective, const c10::Device& device) {
  for (const auto& p : objective.module().parameters())
    if (p.device() != device)
      throw OptionsError("trainer: the model's parameters are on " + p.device().str() + " but the run's device is " +
                         device.str() + ": move the module there (module->to(device)) before building the optimizer");
}

}  // namespace

Trainer::Trainer(Objective& objective, Optimizer& optimizer, DataSource& data, TrainerOptions options,
                 Logger* logger)
    : objective_(objective), optimizer_(optimizer), data_(data), options_(with_device_index(std::move(options))),
      logger_(logger), memory_(options_.device.is_cuda() ? options_.device.index() : -1) {
  if (options_.max_steps < 0) throw OptionsError("trainer: max_steps must be >= 0");
  if (options_.grad_accum < 1) throw OptionsError("trainer: grad_accum must be >= 1");
  if (options_.micro_splits < 1) throw OptionsError("trainer: micro_splits must be >= 1");
  if (!(options_.grad_clip >= 0)) throw OptionsError("trainer: grad_clip must be >= 0 (0: off)");
  if (options_.eval_every < 0) throw OptionsError("trainer: eval_every must be >= 0 (0: only at the end)");
  if (options_.checkpoint.keep_last < 1) throw OptionsError("trainer: checkpoint.keep_last must be >= 1");
  if (options_.checkpoint.every_steps < 0 || !(options_.checkpoint.every_seconds >= 0))
    throw OptionsError("trainer: checkpoint.every_steps and every_seconds must be >= 0 (0: off)");
  if (!(options_.average_decay == 0.0 || (options_.average_decay > 0.0 && options_.average_decay < 1.0)))
    throw OptionsError("trainer: average_decay must be 0 (off) or in (0, 1)");
  if (!(options_.average_lag_correction >= 0.0 && options_.average_lag_correction <= 1.0))
    throw OptionsError("trainer: average_lag_correction must be in [0, 1]");
  if (options_.average_lag_correction > 0.0 && options_.average_decay == 0.0)
    throw OptionsError("trainer: average_lag_correction corrects the weight average: set average_decay too, or the correction to 0");
  try {
    options_.schedule.validate();
  } catch (const std::invalid_argument& e) {
    throw OptionsError(e.what());
  }
  if (options_.schedule.total_steps == 0) options_.schedule.total_steps = options_.max_steps;
  const double warn = options_.memory.warn_fraction, critical = options_.memory.critical_fraction;
  if (!(warn > 0.0 && warn <= critical && critical <= 1.0))
    throw OptionsError("trainer: memory thresholds need 0 < warn_fraction <= critical_fraction <= 1, got " +
                       std::to_string(warn) + " and " + std::to_string(critical));
  check_optimizer_owns_module(objective_, optimizer_);
  check_device(objective_, options_.device);
  if (options_.memory.budget_bytes > 0) {
    budget_before_ = memory_.budget();
    memory_.set_budget(options_.memory.budget_bytes);
    owns_budget_ = true;
  }
  if (options_.seed >= 0) torch::manual_seed(static_cast<uint64_t>(options_.seed));
  if (!logger_) {
    null_logger_ = std::make_unique<Logger>();
    logger_ = null_logger_.get();
  }
  pressure_ = std::make_unique<MemoryPressurePolicy>(options_.memory, memory_, *logger_);
  last_checkpoint_time_ = std::chrono::steady_clock::now();
  if (options_.average_decay != 0.0) average_ = std::make_unique<WeightAverage>(objective_.module(), options_.average_decay, options_.average_lag_correction);
  if (options_.device.is_cuda() && !memory_.uses_device_allocator())
    logger_->on_message(Level::Warning,
                        "the parameters are on a GPU but this build has no HT_WITH_CUDA: memory figures "
                        "count CPU tensors only");
}

// The allocator's budget is the process's: a trainer that set one puts the previous one back.
Trainer::~Trainer() {
  if (owns_budget_) memory_.set_budget(budget_before_);
}

void Trainer::set_strategy(std::unique_ptr<StepStrategy> strategy) { strategy_ = std::move(strategy); }
void Trainer::add_callback(std::shared_ptr<Callback> callback) { callbacks_.push_back(std::move(callback)); }

void Trainer::add_metric(const std::string& name, MetricFn metric) {
  if (name.empty() || !metric) throw OptionsError("trainer: a metric needs a name and a function");
  for (const auto& m : metrics_)
    if (m.first == name) throw OptionsError("trainer: metric '" + name + "' is added twice");
  metrics_.emplace_back(name, std::move(metric));
}

void Trainer::set_lr_for_current_step() {
  optimizer_.schedule_lr([&](double base_lr) { return options_.schedule.at(base_lr, step_); });
}

void Trainer::rewind_steps(int64_t n) {
  if (n < 0 || n > step_)
    throw std::invalid_argument("trainer: cannot rewind " + std::to_string(n) + " steps at step " +
                                std::to_string(step_));
  step_ -= n;
  // A checkpoint written inside the undone steps must not stop the periodic save at its step.
  last_checkpoint_step_ = std::min(last_checkpoint_step_, step_);
}

Batch Trainer::next_batch() {
  Batch b = data_.next_train_batch();
  if (b.input.device() != options_.device) b.input = b.input.to(options_.device);
  if (b.target.defined() && b.target.device() != options_.device) b.target = b.target.to(options_.device);
  return b;
}

// ---- the loop --------------------------------------------------------------------------------

EvalRecord Trainer::fit() {
  EvalRecord last;
  EvalSchedule evals(options_.eval_every);
  // From the checkpoint this run resumed from, unless this run does not evaluate periodically.
  if (options_.eval_every > 0) evals.restore_due(pending_eval_step_);
  for (auto& c : callbacks_) c->on_train_begin(*this);
  while (step_ < options_.max_steps && !stop_requested_) {
    StepRecord rec = train_step();
    logger_->on_step(rec);
    for (auto& c : callbacks_) c->on_step_end(*this, rec);
    agree_after_step();
    const bool verified = !strategy_ || strategy_->at_verified_point();
    // The run's end is evaluated below, after on_finish.
    const bool evaluate_now = evals.evaluate_now(step_, verified) && step_ < options_.max_steps;
    pending_eval_step_ = evals.due();
    if (evaluate_now) record_evaluation(evaluate_or_exit());
    maybe_checkpoint();
  }
  if (strategy_) {
    strategy_->on_finish(*this);
    const std::string summary = strategy_->summary_text();
    if (!summary.empty()) logger_->on_message(Level::Info, summary);
  }
  last = evaluate_or_exit();
  record_evaluation(last);
  for (auto& c : callbacks_) c->on_train_end(*this, last);
  save_final_checkpoint();
  return last;
}

StepRecord Trainer::train_step() {
  memory_.begin_step();
  StepRecord rec = strategy_ ? strategy_->run_step(*this) : plain_step();
  // Predicted weights join the average only once verified: a rollback never has to undo it.
  if (average_ && (!strategy_ || strategy_->at_verified_point())) average_->update();
  memory_.end_step(rec);
  // Data-parallel: the budget watch acts on the largest rank's peak, so every rank takes its
  // rungs together (its recompute would otherwise differ between ranks).
  const int64_t budget = memory_budget();
  if (options_.parallel && budget > 0) rec.peak_bytes = static_cast<int64_t>(collective().max(static_cast<double>(rec.peak_bytes)));
  pressure_->watch(rec, budget);
  if (options_.parallel) options_.parallel->annotate(rec);
  return rec;
}

Collective& Trainer::collective() { return options_.parallel ? options_.parallel->collective() : single_process(); }

void Trainer::agree_after_step() {
  if (!options_.parallel) return;
  options_.parallel->after_step(step_);
  // A signal may reach one rank only, and only rank 0's clock decides a timed checkpoint: one
  // small collective agrees both, so every rank stops or saves after the same step.
  const auto& c = options_.checkpoint;
  const bool due = collective().rank() == 0 && !c.dir.empty() && c.every_seconds > 0 &&
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint_time_).count() >=
                       c.every_seconds;
  std::vector<at::Tensor> flags{torch::tensor({stop_requested_ ? 1.0 : 0.0, due ? 1.0 : 0.0}, torch::kFloat64)};
  collective().allreduce_max(flags);
  if (flags[0][0].item<double>() > 0) stop_requested_ = true;
  timed_checkpoint_due_ = flags[0][1].item<double>() > 0;
}

StepRecord Trainer::plain_step() {
  const auto t0 = std::chrono::steady_clock::now();
  const FullStepResult r = full_step();
  advance_step();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  StepRecord rec;
  rec.step = step_;
  rec.phase = Phase::Full;
  rec.loss = r.loss;
  rec.lr = optimizer_.lr();
  rec.grad_norm = r.grad_norm;
  rec.ms = ms;
  rec.items_per_sec = ms > 0 ? r.items / (ms / 1000.0) : 0.0;
  return rec;
}

FullStepResult Trainer::full_step(Phase phase) {
  if (!phase_announced_ || phase != last_phase_) {
    if (options_.memory.on_phase) options_.memory.on_phase(phase);
    last_phase_ = phase;
    phase_announced_ = true;
  }
  const DataCursor start = data_.cursor();
  for (int attempt = 0;; ++attempt) {
    try {
      return full_step_once();
    } catch (const c10::OutOfMemoryError& e) {
      if (!options_.memory.enabled) throw;
      // Forward or backward failed (the update's own failure is not retried, below): nothing
      // was applied. Rewind the data and retry after the next rung of the ladder.
      data_.restore(start);
      optimizer_.zero_grad();
      std::string why;
      const std::string at = "step " + std::to_string(step_ + 1) + ": out of memory; ";
      bool retry = pressure_->respond(at, attempt, last_batch_rows_, options_.micro_splits, &why);
      // Data-parallel: every rank failed this step together (finish_backward); they retry it alike.
      if (options_.parallel) retry = pressure_->agree(collective(), retry, options_.micro_splits, &why);
      if (!retry) exit_out_of_memory(at + why + " (" + e.what_without_backtrace() + ")");  // rung 4
    }
  }
}

FullStepResult Trainer::full_step_once() {
  set_lr_for_current_step();
  optimizer_.zero_grad();
  FullStepResult r;
  double loss_sum = 0.0;
  DataParallel* parallel = options_.parallel.get();
  try {
  for (int64_t a = 0; a < options_.grad_accum; ++a) {
    const DataCursor cursor = data_.cursor();
    const Batch batch = next_batch();
    const int64_t rows = batch.input.size(0);
    last_batch_rows_ = rows;
    const int64_t splits = std::min<int64_t>(options_.micro_splits, rows);
    // Chunks weighted by their share of rows, so any split gives the same mean-loss gradient.
    const auto inputs = batch.input.tensor_split(splits);
    const auto targets = batch.target.tensor_split(splits);
    for (int64_t s = 0; s < splits; ++s) {
      const Batch chunk{inputs[s], targets[s]};
      const double weight = static_cast<double>(chunk.input.size(0)) / rows / options_.grad_accum;
      at::Tensor loss;
      double value = 0.0;
      {
        const auto phase = memory_.phase(MemoryPhase::Forward);
        try {
          loss = objective_.loss(chunk);
        } catch (const c10::OutOfMemoryError&) {
          throw;  // the ladder's
        } catch (const c10::Error& e) {
          throw TrainingError(where(step_ + 1, cursor) + ": the loss function failed: " + e.what_without_backtrace());
        }
        if (loss.numel() != 1)
          throw TrainingError(where(step_ + 1, cursor) + ": the loss function returned a tensor of shape " +
                              c10::str(loss.sizes()) + "; it must return a scalar (reduce it, e.g. with mean())");
        value = loss.item<double>();
      }
      if (!std::isfinite(value))
        throw TrainingError(where(step_ + 1, cursor) + ": the training loss is " + std::to_string(value) +
                            ". Lower the learning rate, keep gradient clipping on, or check the data.");
      {
        const auto phase = memory_.phase(MemoryPhase::Backward);
        if (parallel) parallel->before_backward(a + 1 == options_.grad_accum && s + 1 == splits);
        (loss.reshape({}) * weight).backward();
      }
      loss_sum += value * weight;
    }
    r.items += data_.items_per_batch();
  }
  } catch (const c10::OutOfMemoryError&) {
    if (parallel) parallel->abort_backward();  // the other ranks learn it in finish_backward
    throw;
  }
  // Data-parallel: the gradients become the average over ranks, the loss the global mean.
  r.loss = parallel ? parallel->finish_backward(loss_sum) : loss_sum;
  for (auto& c : callbacks_) c->after_backward(*this);
  const auto phase = memory_.phase(MemoryPhase::Optimizer);  // norm, clipping and the update
  r.grad_norm = global_grad_norm(optimizer_.parameters());
  if (!std::isfinite(r.grad_norm))
    throw TrainingError("step " + std::to_string(step_ + 1) + ": the gradient norm is " +
                        std::to_string(r.grad_norm) +
                        " (the loss was finite). Lower the learning rate or enable gradient clipping.");
  clip_grads_to_norm(optimizer_.parameters(), r.grad_norm, options_.grad_clip);
  try {
    optimizer_.step();
  } catch (const c10::OutOfMemoryError& e) {
    // Not retryable: an optimizer that allocates while it writes (a wrapped torch::optim one, or
    // ours on a non-contiguous or CUDA tensor) may have updated some tensors already, and a
    // second step would apply their update twice. Nor is this state worth an emergency save.
    throw TrainingError("step " + std::to_string(step_ + 1) + ": out of memory inside the optimizer update (" +
                        e.what_without_backtrace() +
                        "); the weights may be partly updated. Resume from the last periodic "
                        "checkpoint with a larger memory budget or a smaller model.");
  }
  for (auto& c : callbacks_) c->after_optimizer_step(*this);
  return r;
}

// ---- memory ----------------------------------------------------------------------------------

void Trainer::exit_out_of_memory(const std::string& what) {
  // Without an explicit path the state goes where resuming looks: a regular checkpoint of this
  // step, so rerunning the same command continues from it.
  std::string path = options_.memory.emergency_checkpoint_path;
  if (path.empty())
    path = options_.checkpoint.dir.empty() ? std::string("emergency.ht")
                                           : checkpoint_path(options_.checkpoint.dir, step_);
  save_emergency_checkpoint(path);
  last_checkpoint_step_ = step_;
  logger_->on_checkpoint(path, step_);
  throw OutOfMemoryExit(what + ". All progress is saved in '" + path + "'. Raise the memory budget (" +
                            mib_text(memory_budget()) + " now), lower the batch size or sequence length, or "
                            "use a smaller model; then resume from that checkpoint.",
                        path);
}

void Trainer::save_emergency_checkpoint(const std::string& path) {
  // Releasing the cache first gives serialisation the room it needs; the archive's buffers
  // must not fail the save that rescues the run, so the budget is lifted while it writes.
  memory_.release_cached();
  const int64_t budget = memory_.budget();
  memory_.set_budget(0);
  try {
    save_checkpoint(path);
  } catch (...) {
    memory_.set_budget(budget);
    throw;
  }
  memory_.set_budget(budget);
}

int64_t Trainer::memory_budget() const { return memory_.budget(); }

MemorySummary Trainer::memory_summary() const {
  MemorySummary s;
  for (const auto& p : objective_.module().parameters()) {
    s.parameter_bytes += bytes_of(p);
    s.gradient_bytes += bytes_of(p.grad());
  }
  for (const auto& b : objective_.module().buffers()) s.parameter_bytes += bytes_of(b);
  s.optimizer_bytes = optimizer_.state_bytes();
  s.strategy_bytes = strategy_ ? strategy_->state_bytes() : 0;
  s.average_bytes = average_ ? average_->bytes() : 0;
  s.peak_bytes = memory_.run_peak_bytes();
  const int64_t resident = memory_.run_peak_resident_bytes();
  const int64_t known = s.parameter_bytes + s.gradient_bytes + s.optimizer_bytes + s.strategy_bytes + s.average_bytes;
  s.other_bytes = std::max<int64_t>(0, resident - known);
  s.activation_bytes = std::max<int64_t>(0, s.peak_bytes - resident);
  for (int p = 0; p < kMemoryPhases; ++p)
    s.phase_peak_bytes[p] = memory_.run_phase_peak_bytes(static_cast<MemoryPhase>(p));
  s.budget_bytes = memory_budget();
  s.steps = memory_.steps();
  return s;
}

}  // namespace ht
