// The trainer's checkpoints: the parts it registers (model, optimizer, progress, data cursor,
// RNG, step strategy, weight average, evaluation history), saving, loading and resuming.
#include <filesystem>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "hybrid/core/checkpoint.h"
#include "hybrid/core/checkpoint_file.h"
#include "hybrid/core/trainer.h"
#include "hybrid/core/weight_average.h"

#if defined(HT_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace ht {
namespace {

// A fresh tensor per read: reading into a defined tensor would try to resize its storage.
at::Tensor read_tensor(torch::serialize::InputArchive& a, const char* key) {
  at::Tensor t;
  a.read(key, t);
  return t;
}

void save_generator(torch::serialize::OutputArchive& a, const char* key, at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  a.write(key, gen.get_state());
}

void load_generator(torch::serialize::InputArchive& a, const char* key, at::Generator gen) {
  const at::Tensor state = read_tensor(a, key);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// The history as columns: [n] tensors of steps, losses, accuracies, items and each user metric.
void save_history(torch::serialize::OutputArchive& a, const std::vector<EvalRecord>& history) {
  const auto n = static_cast<int64_t>(history.size());
  auto steps = torch::empty({n}, torch::kInt64), items = torch::empty({n}, torch::kInt64);
  auto loss = torch::empty({n}, torch::kFloat64), acc = torch::empty({n}, torch::kFloat64);
  std::map<std::string, at::Tensor> metrics;
  for (int64_t i = 0; i < n; ++i) {
    const EvalRecord& r = history[static_cast<size_t>(i)];
    steps[i] = r.step;
    items[i] = r.items;
    loss[i] = r.val_loss;
    acc[i] = r.accuracy;
    for (const auto& [name, value] : r.metrics) {
      auto& column = metrics[name];
      if (!column.defined()) column = torch::full({n}, NAN, torch::kFloat64);
      column[i] = value;
    }
  }
  a.write("step", steps);
  a.write("items", items);
  a.write("val_loss", loss);
  a.write("accuracy", acc);
  std::string names;
  for (const auto& [name, column] : metrics) {
    names += (names.empty() ? "" : "\n") + name;
    a.write("metric." + name, column);
  }
  a.write("metric_names", c10::IValue(names));
}

std::vector<EvalRecord> load_history(torch::serialize::InputArchive& a) {
  const at::Tensor steps = read_tensor(a, "step"), items = read_tensor(a, "items");
  const at::Tensor loss = read_tensor(a, "val_loss"), acc = read_tensor(a, "accuracy");
  c10::IValue names_value;
  a.read("metric_names", names_value);
  std::vector<std::pair<std::string, at::Tensor>> metrics;
  std::stringstream names(names_value.toStringRef());
  for (std::string name; std::getline(names, name);)
    if (!name.empty()) metrics.emplace_back(name, read_tensor(a, ("metric." + name).c_str()));
  std::vector<EvalRecord> history(static_cast<size_t>(steps.numel()));
  for (int64_t i = 0; i < steps.numel(); ++i) {
    EvalRecord& r = history[static_cast<size_t>(i)];
    r.step = steps[i].item<int64_t>();
    r.items = items[i].item<int64_t>();
    r.val_loss = loss[i].item<double>();
    r.accuracy = acc[i].item<double>();
    for (const auto& [name, column] : metrics)
      if (!std::isnan(column[i].item<double>())) r.metrics[name] = column[i].item<double>();
  }
  return history;
}

}  // namespace

std::unique_ptr<CheckpointRegistry> Trainer::checkpoint_parts() {
  auto parts = std::make_unique<CheckpointRegistry>();
  parts->add(model_part(objective_.module()));
  parts->add({"optimizer", "optimizer state (" + optimizer_.name() + ")",
              [this](auto& a) { optimizer_.save(a); }, [this](auto& a) { optimizer_.load(a); }, {}, {}});
  // Where the run stands besides the step (stored in the file's header): micro-batch splits the
  // memory ladder grew to, and an evaluation that fell due while weights were unverified (so a
  // resumed run scores the same steps as a straight one).
  parts->add({"progress", "training progress",
              [this](auto& a) {
                a.write("micro_splits", torch::tensor(options_.micro_splits));
                a.write("pending_eval", torch::tensor(pending_eval_step_));
              },
              [this](auto& a) {
                options_.micro_splits = std::max(options_.micro_splits, read_tensor(a, "micro_splits").template item<int64_t>());
                pending_eval_step_ = read_tensor(a, "pending_eval").template item<int64_t>();
              },
              {}, {}});
  parts->add({"data", "data position",
              [this](auto& a) {
                const DataCursor c = data_.cursor();
                a.write("cursor", torch::tensor({static_cast<int64_t>(c.seed), c.epoch, c.position}));
              },
              [this](auto& a) {
                const at::Tensor c = read_tensor(a, "cursor");  // [3]: seed, epoch, position
                data_.restore(DataCursor{static_cast<uint64_t>(c[0].template item<int64_t>()),
                                         c[1].template item<int64_t>(), c[2].template item<int64_t>()});
              },
              {}, {}});
  // The generators of every device in use: the CPU's always, the GPU's when training there.
  parts->add({"rng", "random generator states",
              [this](auto& a) {
                save_generator(a, "cpu", at::detail::getDefaultCPUGenerator());
#if defined(HT_WITH_CUDA)
                if (options_.device.is_cuda())
                  save_generator(a, "cuda", at::cuda::detail::getDefaultCUDAGenerator(options_.device.index()));
#endif
                if (options_.parallel) options_.parallel->save_rank_states(a);  // every rank's
              },
              [this](auto& a) {
                load_generator(a, "cpu", at::detail::getDefaultCPUGenerator());
#if defined(HT_WITH_CUDA)
                if (options_.device.is_cuda())
                  load_generator(a, "cuda", at::cuda::detail::getDefaultCUDAGenerator(options_.device.index()));
#endif
                if (options_.parallel) options_.parallel->load_rank_states(a);  // this rank's
              },
              {}, {}});
  if (strategy_) {
    const std::string name = strategy_->name();
    parts->add({"strategy", name + " state",
                [this, name](auto& a) {
                  a.write("name", c10::IValue(name));
                  strategy_->save(a);
                },
                [this](auto& a) { strategy_->load(a); }, {},
                [name](auto& a) {
                  c10::IValue saved;
                  a.read("name", saved);
                  if (saved.toStringRef() != name)
                    throw CheckpointMismatch("the checkpoint holds " + saved.toStringRef() + " state but this run uses " +
                                             name + ": resume it with the step strategy it was written with");
                }});
  }
  if (average_) {
    parts->add({"average", "weight average", [this](auto& a) { average_->save(a); },
                [this](auto& a) { average_->load(a, "the checkpoint's weight average"); },
                [this] {
                  // Saved without averaging: the average starts from these weights at the next step.
                  average_->reset();
                  logger_->on_message(Level::Info, "the checkpoint has no weight average: it starts over from here");
                },
                {}});
  }
  parts->add({"evaluations", "evaluation history", [this](auto& a) { save_history(a, evaluations_); },
              [this](auto& a) { evaluations_ = load_history(a); }, [this] { evaluations_.clear(); }, {}});
  return parts;
}

void Trainer::save_checkpoint(const std::string& path) {
  // Data-parallel: every rank takes part (the replicas are compared, sharded state gathered),
  // rank 0 writes, and no rank goes on before the file is complete.
  DataParallel* parallel = options_.parallel.get();
  if (parallel) parallel->before_checkpoint(step_);
  if (!parallel || parallel->writes_checkpoints()) checkpoint_parts()->save(path, step_, options_.config_text);
  if (parallel) parallel->after_checkpoint();
}

void Trainer::load_checkpoint(const std::string& path) {
  const CheckpointReader file(path);
  checkpoint_parts()->load(file);
  step_ = file.step();
  last_checkpoint_step_ = step_;
  last_checkpoint_time_ = std::chrono::steady_clock::now();
}

std::string Trainer::resume_latest(const std::string& dir) {
  if (!std::filesystem::is_directory(dir))
    throw CheckpointError("no checkpoint directory '" + dir +
                          "': check the path (a new run creates it with its first checkpoint)");
  for (const auto& path : list_checkpoints(dir)) {
    try {
      load_checkpoint(path);
      // Data-parallel: a rank that read another file (out_dir not shared between machines) stops here.
      if (options_.parallel) options_.parallel->after_resume(step_);
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

void Trainer::maybe_checkpoint() {
  const auto& c = options_.checkpoint;
  if (c.dir.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  const bool by_steps = c.every_steps > 0 && step_ % c.every_steps == 0;
  // Data-parallel: rank 0's clock, agreed after the step (agree_after_step).
  const bool by_time = options_.parallel ? timed_checkpoint_due_
                                         : c.every_seconds > 0 && std::chrono::duration<double>(
                                                                      now - last_checkpoint_time_).count() >= c.every_seconds;
  if (!(by_steps || by_time) || last_checkpoint_step_ == step_) return;
  const std::string path = checkpoint_path(c.dir, step_);
  save_checkpoint(path);
  prune_checkpoints(c.dir, c.keep_last, path);
  last_checkpoint_time_ = now;
  last_checkpoint_step_ = step_;
  logger_->on_checkpoint(path, step_);
}

void Trainer::save_final_checkpoint() {
  const auto& c = options_.checkpoint;
  if (c.dir.empty() || last_checkpoint_step_ == step_) return;
  const std::string path = checkpoint_path(c.dir, step_);
  save_checkpoint(path);
  prune_checkpoints(c.dir, c.keep_last, path);
  last_checkpoint_step_ = step_;
  logger_->on_checkpoint(path, step_);
}

}  // namespace ht
