// The training loop: plain full steps (or a StepStrategy's), evaluation, periodic and emergency
// checkpoints, exact resume, and the response ladder when a step runs out of memory.
#include "hybrid/core/trainer.h"

#include <cmath>
#include <filesystem>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "hybrid/core/allocator.h"
#include "hybrid/core/checkpoint_file.h"
#include "hybrid/core/eval_schedule.h"
#include "hybrid/core/weight_average.h"

namespace ht {
namespace {

std::string step_name(int64_t step) { return "step " + std::to_string(step); }

// Global L2 norm of all gradients, [] -> double. One small reduction per tensor.
double global_grad_norm(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> norms;
  norms.reserve(params.size());
  for (const auto& p : params)
    if (p.grad().defined()) norms.push_back(p.grad().norm());
  if (norms.empty()) return 0.0;
  return torch::stack(norms).norm().item<double>();
}

// Checkpoint tensors are copied into the existing parameters so the optimizer and any strategy
// keep pointing at the same storage.
void copy_model_tensors(torch::serialize::InputArchive& model, torch::nn::Module& module,
                        const std::string& path) {
  torch::NoGradGuard no_grad;
  // Every tensor is read and checked before the first is copied: a mismatch leaves the model as
  // it was.
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (model tensor, saved tensor)
  auto check = [&](const std::string& name, const at::Tensor& dst, bool is_buffer) {
    at::Tensor src;
    if (!model.try_read(name, src, is_buffer))
      throw CheckpointMismatch("checkpoint '" + path + "' has no tensor '" + name +
                               "': it was saved from a different model (check the model config)");
    if (!src.sizes().equals(dst.sizes()))
      throw CheckpointMismatch("checkpoint '" + path + "': '" + name + "' has shape " +
                               c10::str(src.sizes()) + " but the model expects " +
                               c10::str(dst.sizes()) + " (check the model config)");
    copies.emplace_back(dst, src);
  };
  for (const auto& kv : module.named_parameters()) check(kv.key(), kv.value(), false);
  for (const auto& kv : module.named_buffers()) check(kv.key(), kv.value(), true);
  for (auto& [dst, src] : copies) dst.copy_(src);
}

// Where the optimizer's parameters live: -1 for the CPU, else the CUDA device index.
int device_of(const Optimizer& optimizer) {
  const auto& params = optimizer.parameters();
  if (params.empty() || !params[0].is_cuda()) return -1;
  return params[0].get_device();
}

int64_t bytes_of(const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

// After this many consecutive steps below the warn level, a new crossing is reported again.
// Longer than a hybrid predict phase, whose steps peak far lower than the full steps around it.
constexpr int64_t kRearmSteps = 100;

void accumulate(EvalStats& into, const EvalStats& s) {
  into.loss_sum += s.loss_sum;
  into.correct += s.correct;
  into.count += s.count;
  into.has_accuracy = s.has_accuracy;
}

}  // namespace

Trainer::Trainer(Objective& objective, Optimizer& optimizer, DataSource& data,
                 TrainerOptions options, Logger* logger)
    : objective_(objective), optimizer_(optimizer), data_(data), options_(std::move(options)),
      logger_(logger), memory_(device_of(optimizer)) {
  if (options_.max_steps < 0) throw std::invalid_argument("trainer: max_steps must be >= 0");
  if (options_.grad_accum < 1) throw std::invalid_argument("trainer: grad_accum must be >= 1");
  if (options_.micro_splits < 1) throw std::invalid_argument("trainer: micro_splits must be >= 1");
  options_.schedule.validate();
  const double warn = options_.memory.warn_fraction, critical = options_.memory.critical_fraction;
  if (!(warn > 0.0 && warn <= critical && critical <= 1.0))
    throw std::invalid_argument("trainer: memory thresholds need 0 < warn_fraction <= critical_fraction <= 1, got " +
                                std::to_string(warn) + " and " + std::to_string(critical));
  if (!logger_) {
    null_logger_ = std::make_unique<Logger>();
    logger_ = null_logger_.get();
  }
  last_checkpoint_time_ = std::chrono::steady_clock::now();
  if (options_.average_decay != 0.0) average_ = std::make_unique<WeightAverage>(objective_.module(), options_.average_decay);
  if (device_of(optimizer) >= 0 && !memory_.uses_device_allocator())
    logger_->on_message(Level::Warning,
                        "the parameters are on a GPU but this build has no HT_WITH_CUDA: memory figures "
                        "count CPU tensors only");
}

Trainer::~Trainer() = default;

void Trainer::set_strategy(std::unique_ptr<StepStrategy> strategy) { strategy_ = std::move(strategy); }

void Trainer::set_lr_for_current_step() { optimizer_.set_lr(options_.schedule.at(step_)); }

void Trainer::rewind_steps(int64_t n) {
  if (n < 0 || n > step_)
    throw std::invalid_argument("trainer: cannot rewind " + std::to_string(n) + " steps at step " +
                                std::to_string(step_));
  step_ -= n;
  // A checkpoint written inside the undone steps must not stop the periodic save at its step.
  last_checkpoint_step_ = std::min(last_checkpoint_step_, step_);
}

double Trainer::forward_loss(const Batch& batch) {
  torch::NoGradGuard no_grad;
  return objective_.loss(batch).item<double>();
}

FullStepResult Trainer::full_step_once() {
  set_lr_for_current_step();
  optimizer_.zero_grad();
  FullStepResult r;
  double loss_sum = 0.0;
  for (int64_t a = 0; a < options_.grad_accum; ++a) {
    const Batch batch = data_.next_train_batch();
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
        loss = objective_.loss(chunk);
        value = loss.item<double>();
      }
      if (!std::isfinite(value))
        throw TrainingError(step_name(step_ + 1) + ": the training loss is " + std::to_string(value) +
                            ". Lower the learning rate, keep grad_clip on, or check the data.");
      {
        const auto phase = memory_.phase(MemoryPhase::Backward);
        (loss * weight).backward();
      }
      loss_sum += value * weight;
    }
    r.items += data_.items_per_batch();
  }
  r.loss = loss_sum;
  const auto phase = memory_.phase(MemoryPhase::Optimizer);  // norm, clipping and the update
  r.grad_norm = global_grad_norm(optimizer_.parameters());
  if (!std::isfinite(r.grad_norm))
    throw TrainingError(step_name(step_ + 1) + ": the gradient norm is " +
                        std::to_string(r.grad_norm) +
                        " (the loss was finite). Lower the learning rate or enable grad_clip.");
  if (options_.grad_clip > 0 && r.grad_norm > options_.grad_clip) {
    torch::NoGradGuard no_grad;
    const double scale = options_.grad_clip / (r.grad_norm + 1e-6);
    for (const auto& p : optimizer_.parameters())
      if (p.grad().defined()) p.grad().mul_(scale);
  }
  try {
    optimizer_.step();
  } catch (const c10::OutOfMemoryError& e) {
    // Not retryable: an optimizer that allocates while it writes (a wrapped torch::optim one, or
    // ours on a non-contiguous or CUDA tensor) may have updated some tensors already, and a
    // second step would apply their update twice. Nor is this state worth an emergency save.
    throw TrainingError(step_name(step_ + 1) + ": out of memory inside the optimizer update (" +
                        e.what_without_backtrace() +
                        "); the weights may be partly updated. Resume from the last periodic "
                        "checkpoint with a larger memory.budget or a smaller model.");
  }
  return r;
}

FullStepResult Trainer::full_step(const std::string& phase) {
  if (phase != last_phase_) {
    if (options_.memory.on_phase) options_.memory.on_phase(phase);
    last_phase_ = phase;
  }
  const DataCursor start = data_.cursor();
  for (int attempt = 0;; ++attempt) {
    try {
      return full_step_once();
    } catch (const c10::OutOfMemoryError& e) {
      if (!options_.memory.enabled) throw;
      // Forward or backward failed (the update's own failure is not retried, above): nothing
      // was applied. Rewind the data and retry.
      data_.restore(start);
      optimizer_.zero_grad();
      respond_to_memory_pressure(e.what_without_backtrace(), attempt);
    }
  }
}

void Trainer::respond_to_memory_pressure(const std::string& what, int attempt) {
  const std::string where = step_name(step_ + 1) + ": out of memory; ";
  // Rung 1: the freed temporaries of the failed attempt sit in the cache. With nothing released
  // (a CPU budget counts live bytes only) the same attempt would fail again: go on to rung 2.
  if (attempt == 0) {
    const int64_t released = memory_.release_cached();
    if (released > 0) {
      logger_->on_message(Level::Warning, where + "released " + std::to_string(released >> 20) +
                                              " MiB of cached blocks, retrying");
      return;
    }
  }
  if (try_enable_recompute()) {  // rung 2
    logger_->on_message(Level::Warning, where + "activation recompute turned on, retrying");
    return;
  }
  // Rung 3, while there is something left to split: a chunk has at least one row.
  const bool can_split = last_batch_rows_ == 0 || options_.micro_splits < last_batch_rows_;
  if (can_split && options_.micro_splits * 2 <= options_.memory.max_micro_splits) {  // rung 3
    options_.micro_splits *= 2;
    logger_->on_message(Level::Warning, where + "splitting each batch into " +
                                            std::to_string(options_.micro_splits) +
                                            " micro-batches (same effective batch), retrying");
    return;
  }
  exit_out_of_memory(where + "still failing with recompute and " +
                     std::to_string(std::min(options_.micro_splits, std::max<int64_t>(last_batch_rows_, 1))) +
                     " micro-batches (" + what + ")");  // rung 4
}

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
  throw OutOfMemoryExit(what + ". All progress is saved in '" + path +
                            "'. Raise memory.budget, lower the batch size or sequence length, or "
                            "use a smaller model; then resume from that checkpoint.",
                        path);
}

EvalRecord Trainer::evaluate_or_exit() {
  try {
    return evaluate();
  } catch (const c10::OutOfMemoryError& e) {
    if (!options_.memory.enabled) throw;
    // Evaluation already split its batches down to single rows: nothing is left to try.
    exit_out_of_memory("evaluation at step " + std::to_string(step_) + ": out of memory with " +
                       "batches split to single rows (" + e.what_without_backtrace() + ")");
  }
}

void Trainer::save_emergency_checkpoint(const std::string& path) {
  // Releasing the cache first gives serialisation the room it needs.
  release_cached_blocks();
  const int64_t budget = allocator_stats().budget_bytes;
  set_memory_budget(0);  // the archive's buffers must not fail the save that rescues the run
  try {
    save_checkpoint(path);
  } catch (...) {
    set_memory_budget(budget);
    throw;
  }
  set_memory_budget(budget);
}

bool Trainer::try_enable_recompute() {
  if (recompute_tried_) return false;
  recompute_tried_ = true;
  return options_.memory.enable_recompute && options_.memory.enable_recompute();
}

int64_t Trainer::memory_budget() const {
  if (options_.memory.budget_bytes > 0) return options_.memory.budget_bytes;
  return memory_.uses_device_allocator() ? 0 : allocator_stats().budget_bytes;
}

// Acts on the step's peak before an allocation fails: warn once per crossing, and above the
// critical level take the ladder's first rungs early (they cost no accuracy).
void Trainer::watch_memory_budget(const StepRecord& rec) {
  const int64_t budget = memory_budget();
  if (budget <= 0) return;
  const auto& m = options_.memory;
  const double share = static_cast<double>(rec.peak_bytes) / static_cast<double>(budget);
  if (share < m.warn_fraction) {
    if (memory_level_ > 0 && ++steps_below_warn_ >= kRearmSteps) memory_level_ = 0;
    return;
  }
  steps_below_warn_ = 0;
  const bool critical = share >= m.critical_fraction;
  if (memory_level_ >= (critical ? 3 : 1)) return;  // already reported and acted on
  std::ostringstream os;
  os.precision(3);
  os << step_name(step_) << ": tensor memory peaked at " << mib_text(rec.peak_bytes) << ", "
     << std::round(1000.0 * share) / 10.0 << "% of the " << mib_text(budget) << " budget (above "
     << (critical ? "critical_fraction " : "warn_fraction ") << (critical ? m.critical_fraction : m.warn_fraction)
     << ")";
  if (!critical) {
    memory_level_ = 1;
  } else if (!m.enabled) {
    memory_level_ = 3;
    os << "; memory pressure handling is off";
  } else if (memory_level_ < 2) {
    memory_level_ = 2;
    os << "; released " << mib_text(memory_.release_cached()) << " of cached blocks";
  } else {  // still critical after the cache was released
    memory_level_ = 3;
    os << (try_enable_recompute() ? " again; activation recompute turned on"
                                  : " again; no activation recompute left to turn on");
  }
  logger_->on_message(Level::Warning, os.str());
}

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

StepRecord Trainer::train_step() {
  memory_.begin_step();
  StepRecord rec = strategy_ ? strategy_->run_step(*this) : plain_step();
  // Predicted weights join the average only once verified: a rollback never has to undo it.
  if (average_ && (!strategy_ || strategy_->at_verified_point())) average_->update();
  memory_.end_step(rec);
  watch_memory_budget(rec);
  return rec;
}

StepRecord Trainer::plain_step() {
  const auto t0 = std::chrono::steady_clock::now();
  const FullStepResult r = full_step();
  advance_step();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  StepRecord rec;
  rec.step = step_;
  rec.phase = "full";
  rec.loss = r.loss;
  rec.lr = optimizer_.lr();
  rec.grad_norm = r.grad_norm;
  rec.ms = ms;
  rec.items_per_sec = ms > 0 ? r.items / (ms / 1000.0) : 0.0;
  return rec;
}

EvalRecord Trainer::evaluate() {
  // Evaluating must not change what training does next: an objective that draws random numbers
  // while it scores (noise, sampling) would otherwise shift every later draw, and a run that
  // evaluated at step N would differ from one resumed there.
  struct KeepRng {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    at::Tensor state;
    KeepRng() {
      std::lock_guard<std::mutex> lock(gen.mutex());
      state = gen.get_state();
    }
    ~KeepRng() {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state);
    }
  } keep_rng;
  EvalRecord r;
  with_evaluated_weights([&] { r = evaluate_weights(); });
  return r;
}

void Trainer::with_evaluated_weights(const std::function<void()>& fn) {
  if (!average_ || average_->updates() == 0) return fn();
  // The average in the weights' place; swapping back is exact, also after an error.
  struct Swapped {
    WeightAverage& average;
    explicit Swapped(WeightAverage& a) : average(a) { average.swap(); }
    ~Swapped() { average.swap(); }
  } swapped(*average_);
  fn();
}

EvalRecord Trainer::evaluate_weights() {
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  auto& module = objective_.module();
  // Back to training mode however evaluation ends (an out-of-memory error included).
  struct EvalMode {
    torch::nn::Module& module;
    const bool was_training;
    explicit EvalMode(torch::nn::Module& m) : module(m), was_training(m.is_training()) { m.eval(); }
    ~EvalMode() { module.train(was_training); }
  } eval_mode(module);
  EvalStats total;
  int64_t n = data_.num_val_batches();
  if (options_.eval_batches >= 0) n = std::min(n, options_.eval_batches);
  for (int64_t i = 0; i < n; ++i) {
    const Batch batch = data_.val_batch(i);
    // Under memory pressure evaluation splits its batches too (sums are split-invariant).
    for (int64_t splits = options_.micro_splits;; splits *= 2) {
      try {
        const int64_t chunks = std::min<int64_t>(splits, batch.input.size(0));
        const auto inputs = batch.input.tensor_split(chunks);
        const auto targets = batch.target.tensor_split(chunks);
        EvalStats part;
        for (int64_t c = 0; c < chunks; ++c) accumulate(part, objective_.evaluate(Batch{inputs[c], targets[c]}));
        accumulate(total, part);
        break;
      } catch (const c10::OutOfMemoryError&) {
        memory_.release_cached();
        if (!options_.memory.enabled || splits >= batch.input.size(0)) throw;
      }
    }
  }
  EvalRecord rec;
  rec.step = step_;
  rec.items = total.count;
  if (total.count > 0) {
    rec.val_loss = total.loss_sum / static_cast<double>(total.count);
    if (total.has_accuracy) rec.accuracy = total.correct / static_cast<double>(total.count);
  }
  rec.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return rec;
}

EvalRecord Trainer::fit() {
  EvalRecord last;
  EvalSchedule evals(options_.eval_every);
  // From the checkpoint this run resumed from, unless this run does not evaluate periodically.
  if (options_.eval_every > 0) evals.restore_due(pending_eval_step_);
  while (step_ < options_.max_steps && !stop_requested_) {
    StepRecord rec = train_step();
    logger_->on_step(rec);
    const bool verified = !strategy_ || strategy_->at_verified_point();
    // The run's end is evaluated below, after on_finish.
    const bool evaluate_now = evals.evaluate_now(step_, verified) && step_ < options_.max_steps;
    pending_eval_step_ = evals.due();
    if (evaluate_now) {
      last = evaluate_or_exit();
      logger_->on_eval(last);
    }
    maybe_checkpoint();
  }
  if (strategy_) strategy_->on_finish(*this);
  last = evaluate_or_exit();
  logger_->on_eval(last);
  if (!options_.checkpoint.dir.empty() && last_checkpoint_step_ != step_) {
    const std::string path = checkpoint_path(options_.checkpoint.dir, step_);
    save_checkpoint(path);
    prune_checkpoints(options_.checkpoint.dir, options_.checkpoint.keep_last, path);
    last_checkpoint_step_ = step_;
    logger_->on_checkpoint(path, step_);
  }
  return last;
}

void Trainer::maybe_checkpoint() {
  const auto& c = options_.checkpoint;
  if (c.dir.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  const bool by_steps = c.every_steps > 0 && step_ % c.every_steps == 0;
  const bool by_time = c.every_seconds > 0 &&
                       std::chrono::duration<double>(now - last_checkpoint_time_).count() >= c.every_seconds;
  if (!(by_steps || by_time) || last_checkpoint_step_ == step_) return;
  const std::string path = checkpoint_path(c.dir, step_);
  save_checkpoint(path);
  prune_checkpoints(c.dir, c.keep_last, path);
  last_checkpoint_time_ = now;
  last_checkpoint_step_ = step_;
  logger_->on_checkpoint(path, step_);
}

// ---- checkpoints -----------------------------------------------------------------------------

void Trainer::save_checkpoint(const std::string& path) {
  torch::NoGradGuard no_grad;
  torch::serialize::OutputArchive root;
  root.write("format_version", torch::tensor(static_cast<int64_t>(1)));
  root.write("step", torch::tensor(step_));
  root.write("config", c10::IValue(options_.config_text));
  root.write("micro_splits", torch::tensor(options_.micro_splits));
  if (pending_eval_step_ > 0) root.write("pending_eval", torch::tensor(pending_eval_step_));

  torch::serialize::OutputArchive model;
  for (const auto& kv : objective_.module().named_parameters()) model.write(kv.key(), kv.value());
  for (const auto& kv : objective_.module().named_buffers()) model.write(kv.key(), kv.value(), true);
  root.write("model", model);

  torch::serialize::OutputArchive opt;
  optimizer_.save(opt);
  root.write("optimizer", opt);

  const DataCursor cur = data_.cursor();
  root.write("data", torch::tensor({static_cast<int64_t>(cur.seed), cur.epoch, cur.position}));
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    root.write("rng", gen.get_state());
  }
  if (strategy_) {
    torch::serialize::OutputArchive s;
    strategy_->save(s);
    root.write("strategy", s);
  }
  if (average_) {
    torch::serialize::OutputArchive a;
    average_->save(a);
    root.write("average", a);
  }
  std::string payload;
  root.save_to([&](const void* data, size_t n) {
    payload.append(static_cast<const char*>(data), n);
    return n;
  });
  write_checkpoint_file(path, payload);
}

void Trainer::load_checkpoint(const std::string& path) {
  const std::string payload = read_checkpoint_file(path);
  torch::serialize::InputArchive root;
  root.load_from(payload.data(), payload.size());
  torch::NoGradGuard no_grad;

  // What can be checked without changing anything is checked first; a mismatch found while
  // loading a part (an optimizer of another kind) leaves the trainer partly loaded, which the
  // error says.
  torch::serialize::InputArchive strategy_archive;
  const bool has_strategy = root.try_read("strategy", strategy_archive);
  if (strategy_ && !has_strategy)
    throw CheckpointMismatch("checkpoint '" + path + "' was written by a run without a step "
                             "strategy (plain mode); resume it in the mode it was saved in");
  auto load_part = [&](const char* what, const std::function<void()>& load) {
    try {
      load();
    } catch (const CheckpointError&) {
      throw;
    } catch (const std::exception& e) {
      throw CheckpointMismatch("checkpoint '" + path + "': its " + what + " does not fit this run (" +
                               e.what() + "); the trainer is partly loaded, do not train on");
    }
  };

  torch::serialize::InputArchive model;
  root.read("model", model);
  copy_model_tensors(model, objective_.module(), path);

  torch::serialize::InputArchive opt;
  root.read("optimizer", opt);
  load_part("optimizer state", [&] { optimizer_.load(opt); });

  // A fresh tensor per read: reading into a defined tensor would try to resize its storage.
  auto read = [&](const char* key) {
    at::Tensor t;
    root.read(key, t);
    return t;
  };
  step_ = read("step").item<int64_t>();
  at::Tensor pending;  // absent: no evaluation was waiting (or a file from before it was saved)
  pending_eval_step_ = root.try_read("pending_eval", pending) ? pending.item<int64_t>() : 0;
  options_.micro_splits = std::max(options_.micro_splits, read("micro_splits").item<int64_t>());
  const at::Tensor cursor = read("data");  // [3]: seed, epoch, position
  data_.restore(DataCursor{static_cast<uint64_t>(cursor[0].item<int64_t>()), cursor[1].item<int64_t>(),
                           cursor[2].item<int64_t>()});
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(read("rng"));
  }
  if (strategy_) load_part("step-strategy state", [&] { strategy_->load(strategy_archive); });
  if (average_) {
    torch::serialize::InputArchive a;
    if (root.try_read("average", a)) {
      load_part("weight average", [&] { average_->load(a, "checkpoint '" + path + "'"); });
    } else {
      // Saved without averaging: the average starts from these weights at the next step.
      average_->reset();
      logger_->on_message(Level::Info, "checkpoint '" + path + "' has no weight average: it starts over from here");
    }
  }
  last_checkpoint_step_ = step_;
  last_checkpoint_time_ = std::chrono::steady_clock::now();
}

std::string Trainer::resume_latest(const std::string& dir) {
  for (const auto& path : list_checkpoints(dir)) {
    try {
      load_checkpoint(path);
      logger_->on_message(Level::Info, "resumed from '" + path + "' at step " + std::to_string(step_));
      return path;
    } catch (const CheckpointMismatch&) {
      throw;  // an older checkpoint of this directory would not fit either
    } catch (const CheckpointError& e) {
      logger_->on_message(Level::Warning, std::string(e.what()) + "; trying the previous checkpoint");
    }
  }
  return "";
}

}  // namespace ht

namespace ht {

void load_checkpoint_weights(const std::string& path, torch::nn::Module& module, bool prefer_average) {
  const std::string payload = read_checkpoint_file(path);
  torch::serialize::InputArchive root, model, average;
  root.load_from(payload.data(), payload.size());
  root.read("model", model);
  copy_model_tensors(model, module, path);
  if (prefer_average && root.try_read("average", average)) {
    WeightAverage::read_into(average, module, "checkpoint '" + path + "'");
  }
}

CheckpointSummary inspect_checkpoint(const std::string& path) {
  const std::string payload = read_checkpoint_file(path);
  torch::serialize::InputArchive root;
  root.load_from(payload.data(), payload.size());
  auto read = [&](const char* key) {
    at::Tensor t;
    root.read(key, t);
    return t;
  };
  CheckpointSummary s;
  s.file_bytes = static_cast<int64_t>(payload.size());
  s.step = read("step").item<int64_t>();
  c10::IValue config;
  root.read("config", config);
  s.config_text = config.toStringRef();
  const at::Tensor cursor = read("data");
  s.cursor = DataCursor{static_cast<uint64_t>(cursor[0].item<int64_t>()), cursor[1].item<int64_t>(),
                        cursor[2].item<int64_t>()};
  torch::serialize::InputArchive model;
  root.read("model", model);
  for (const auto& key : model.keys()) {
    at::Tensor t;
    if (model.try_read(key, t)) {
      ++s.parameter_tensors;
      s.parameter_elements += t.numel();
    }
  }
  torch::serialize::InputArchive strategy;
  s.has_strategy = root.try_read("strategy", strategy);
  torch::serialize::InputArchive average;
  s.has_average = root.try_read("average", average);
  return s;
}

}  // namespace ht
