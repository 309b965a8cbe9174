// The CLI's subcommands: train, eval, sample, info, config. They assemble library objects from
// a Config (session.cpp), run them, and print what a person needs to read.
#include "commands.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>

#include "config.h"
#include "console_logger.h"
#include "launch.h"
#include "hybrid/core/allocator.h"
#include "hybrid/core/checkpoint.h"
#include "hybrid/core/checkpoint_file.h"
#include "hybrid/core/runtime.h"
#include "hybrid/core/trainer.h"
#include "hybrid/data/byte_codec.h"
#include "hybrid/kernels/precision.h"
#include "hybrid/dist/process_group.h"
#include "hybrid/models/generate.h"
#include "hybrid/models/gpt.h"
#include "session.h"

namespace ht::cli {
namespace fs = std::filesystem;
namespace {

std::atomic<Trainer*> g_running_trainer{nullptr};
std::atomic<bool> g_interrupted{false};
// Start-up (config, data, model, resume) trains nothing and writes nothing worth keeping, and can
// take minutes on a large corpus: a signal there ends the process at once.
std::atomic<bool> g_starting_up{false};

// During training: asks the trainer to stop after the current step; fit() then evaluates and
// saves a checkpoint. During start-up: exits 130 at once (only async-signal-safe calls).
void on_signal(int) {
  g_interrupted = true;
  if (g_starting_up.load()) {
    static const char msg[] = "interrupted during start-up: nothing was trained\n";
    [[maybe_unused]] const ssize_t n = ::write(2, msg, sizeof msg - 1);
    ::_exit(kInterrupted);
  }
  if (Trainer* t = g_running_trainer.load()) t->request_stop();
}

// The checkpoint's module must be the one `requested` builds: every key that changes it (kind,
// and for a GPT the preset's shape with its model.* overrides) agrees, or CheckpointMismatch
// names the key. Compared as resolved: model.n_layer = 4 on the tiny preset (4 layers) agrees
// with 0; model.attention (another kernel) and train.precision (another compute dtype) are free to
// differ: the weights are the same fp32 tensors.
void check_same_model(const Config& stored, const Config& requested, const std::string& path) {
  auto mismatch = [&](const std::string& key, const std::string& saved, const std::string& asked) {
    std::string why = "checkpoint '" + path + "' holds a model with " + key + " = " + saved + ", this command asks for " +
                      asked;
    if (key != "model.preset" && stored.get_string("model.preset") != requested.get_string("model.preset"))
      why += " (through model.preset = " + requested.get_string("model.preset") + ", stored " +
             stored.get_string("model.preset") + ")";
    return CheckpointMismatch(why + ". The architecture keys (model.kind, model.preset, model.n_layer, model.n_head, "
                                   "model.n_embd, model.block_size, model.vocab_size) must match the checkpoint: "
                                   "drop the override, or use an out_dir of its own for another model");
  };
  const std::string kind = stored.get_string("model.kind");
  if (requested.get_string("model.kind") != kind) throw mismatch("model.kind", kind, requested.get_string("model.kind"));
  if (kind != "gpt") return;  // the image classifiers have one shape each
  const GPTConfig a = gpt_config(stored), b = gpt_config(requested);
  const std::pair<const char*, std::pair<int64_t, int64_t>> fields[] = {
      {"model.n_layer", {a.n_layer, b.n_layer}},       {"model.n_head", {a.n_head, b.n_head}},
      {"model.n_embd", {a.n_embd, b.n_embd}},          {"model.block_size", {a.block_size, b.block_size}},
      {"model.vocab_size", {a.vocab_size, b.vocab_size}}};
  for (const auto& [key, values] : fields)
    if (values.first != values.second)
      throw mismatch(key, std::to_string(values.first), std::to_string(values.second));
  if (a.dropout != b.dropout)  // set by the preset alone today
    throw mismatch("model.preset", stored.get_string("model.preset"), requested.get_string("model.preset"));
}

// The checkpoint's data cursor counts batches of one split of one dataset: every key that changes
// which items are trained on, or how many make a batch, agrees, or CheckpointMismatch names it.
// (Where the files lie, data.path and data.fashion_mnist_dir, may change.) Without this a run
// resumed with another data.probe_fraction went on over another training set in another order.
void check_same_data(const Config& stored, const Config& requested, const std::string& path) {
  auto check = [&](const char* key, const std::string& saved, const std::string& asked) {
    if (saved != asked)
      throw CheckpointMismatch("checkpoint '" + path + "' was trained with " + key + " = " + saved +
                               ", this command asks for " + asked +
                               ". The keys that choose the training data and its batches (data.dataset, data.batch_size, "
                               "data.context, data.val_fraction, data.probe_fraction) must match the checkpoint to resume "
                               "its data order: drop the override, or use an out_dir of its own for another split");
  };
  check("data.dataset", stored.get_string("data.dataset"), requested.get_string("data.dataset"));
  for (const char* key : {"data.batch_size", "data.context"})
    check(key, std::to_string(stored.get_int(key)), std::to_string(requested.get_int(key)));
  for (const char* key : {"data.val_fraction", "data.probe_fraction"})
    check(key, fmt::format("{}", stored.get_float(key)), fmt::format("{}", requested.get_float(key)));
}

Config config_of_checkpoint(const std::string& path, const std::vector<std::string>& overrides,
                            const CheckpointSummary& summary) {
  const Config stored = Config::from_stored(summary.config_text, path + " (stored config)");
  Config c = stored;
  for (const auto& o : overrides) c.set_override(o);
  check_same_model(stored, c, path);
  return c;
}

// Resuming: the newest checkpoint that reads back holds the model this config builds. Corrupt
// ones are skipped here as resume_latest skips them (it reports them). Returns a line to print
// when the run resumes in another precision than the checkpoint was trained in ("" otherwise).
std::string check_resumable_model(const Config& c, const std::vector<std::string>& saved) {
  for (const auto& path : saved) {
    CheckpointSummary summary;
    try {
      summary = inspect_checkpoint(path);
    } catch (const std::exception&) {
      continue;
    }
    const Config stored = Config::from_stored(summary.config_text, path + " (stored config)");
    check_same_model(stored, c, path);
    check_same_data(stored, c, path);
    const std::string was = stored.get_string("train.precision"), now = c.get_string("train.precision");
    if (was == now) return "";
    return "resuming '" + path + "', trained with train.precision = " + was + ", in " + now +
           ": weights and optimizer state are fp32 in both, nothing is converted; the run continues "
           "bit-exactly only within one precision";
  }
  return "";
}

// Hands the notes kernels record (an op without a bf16 kernel that ran in fp32, a GEMM that
// could not use oneDNN) to the terminal once each, as they appear during training.
class KernelNotesLogger : public Logger {
 public:
  explicit KernelNotesLogger(std::shared_ptr<Logger> out) : out_(std::move(out)) {}
  void on_step(const StepRecord&) override { flush(); }
  void on_eval(const EvalRecord&) override { flush(); }
  void flush() {
    for (const auto& note : take_kernel_notes()) out_->on_message(Level::Warning, "kernel note: " + note);
  }

 private:
  std::shared_ptr<Logger> out_;
};

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

// Runs one stage of start-up; running out of memory there is reported with the stage and the
// budget (exit 5), not as whatever error the stage would wrap it in.
template <typename F>
auto in_stage(const std::string& stage, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::OutOfMemoryError& e) {
    throw OutOfMemoryError(stage + ": " + e.what_without_backtrace() + "; " + memory_budget_text() +
                           ": raise it (0 = no budget), or lower data.batch_size or the model size");
  }
}

std::string sample_text(GPT& gpt, const Config& c, const SampleOptions& o) {
  const std::string prompt = o.prompt.empty() ? c.get_string("sample.prompt") : o.prompt;
  const at::Tensor encoded = encode_bytes(prompt);  // [len]
  std::vector<int64_t> tokens(encoded.data_ptr<int64_t>(), encoded.data_ptr<int64_t>() + encoded.numel());
  const int64_t n = o.tokens > 0 ? o.tokens : c.get_int("sample.tokens");
  const double temperature = o.temperature >= 0 ? o.temperature : c.get_float("sample.temperature");
  const int64_t top_k = o.top_k >= 0 ? o.top_k : c.get_int("sample.top_k");
  // Byte ids only: with a GPT-2 preset on text bytes the vocabulary is larger than 256.
  const std::vector<int64_t> out = generate(gpt, tokens, n, temperature, top_k, o.seed, kByteVocab);
  return decode_bytes(out);
}

}  // namespace

std::string memory_budget_text() {
  const int64_t budget = allocator_stats().budget_bytes;
  if (budget <= 0) return "no memory.budget is set (the system refused the memory)";
  return "memory.budget = " + (budget >= (1 << 20) ? mib(budget) : std::to_string(budget) + " B");
}

namespace {

std::string g_rank_prefix;

// Ranks other than 0 print no progress (rank 0 speaks for the job): their warnings and errors
// go to stderr, marked with the rank.
class RankLogger final : public Logger {
 public:
  void on_message(Level level, const std::string& text) override {
    if (level == Level::Warning || level == Level::Error)
      std::fprintf(stderr, "%swarning: %s\n", g_rank_prefix.c_str(), text.c_str());
  }
};

// run.threads = 0 means all cores, shared by the processes of this machine.
int thread_count(const Config& c, const dist::DistEnvironment& env) {
  const int asked = static_cast<int>(c.get_int("run.threads"));
  if (asked > 0) return asked;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / env.local_world_size);
}

int train(const Config& c, dist::ProcessGroup* group) {
  const bool lead = !group || group->rank() == 0;  // rank 0 prints and writes metrics
  set_memory_budget(c.get_bytes("memory.budget"));
  TrainerOptions options = trainer_options(c);  // config errors before any data is loaded
  if (c.get_string("run.mode") == "nowcast") build_strategy(c);  // its keys and weights file, too
  std::vector<SkippedCheckpoint> skipped;
  const auto saved = list_checkpoints(options.checkpoint.dir, &skipped);
  for (const auto& f : skipped)
    if (lead)
      std::fprintf(stderr, "warning: skipping '%s': %s; it is not a checkpoint this run can use (rename or move it)\n",
                   f.path.c_str(), f.reason.c_str());
  const bool resuming = c.get_bool("checkpoint.resume") && !saved.empty();
  if (!c.get_bool("checkpoint.resume") && !saved.empty())
    throw ConfigError("checkpoint.resume = false, but '" + options.checkpoint.dir + "' holds " +
                      std::to_string(saved.size()) + " checkpoint(s) of an earlier run (newest '" +
                      saved.front() + "'); a fresh run there would mix with them. Move them away or "
                      "set run.out_dir to another directory");
  const std::string precision_switch = resuming ? check_resumable_model(c, saved) : "";
  Session s = in_stage("loading the data and building the model",
                       [&] { return build_session(c, /*with_data=*/true, /*load_init_from=*/!resuming, group); });
  if (!s.precision_warning.empty()) std::fprintf(stderr, "%swarning: %s\n", g_rank_prefix.c_str(), s.precision_warning.c_str());
  if (!precision_switch.empty() && lead) std::printf("%s\n", precision_switch.c_str());
  set_recompute_hooks(s, c, options);
  const fs::path out_dir = c.get_string("run.out_dir");
  fs::create_directories(out_dir);

  auto console = std::make_shared<ConsoleLogger>(options.max_steps, c.get_int("run.log_every"));
  MultiLogger logger;
  std::shared_ptr<KernelNotesLogger> notes;  // kernels that ran another way than asked, said once
  if (lead) {
    logger.add(console);
    logger.add(make_jsonl_logger((out_dir / "metrics.jsonl").string(), /*append=*/resuming));
    notes = std::make_shared<KernelNotesLogger>(console);
    logger.add(notes);
  } else {
    logger.add(std::make_shared<RankLogger>());
  }
  if (group) set_data_parallel(s, c, *group, options, &logger);  // broadcasts rank 0's weights

  Trainer trainer(*s.objective, *s.optimizer, *s.data, options, &logger);
  trainer.set_strategy(build_strategy(c, &s));
  for (auto& callback : build_callbacks(c, s)) trainer.add_callback(callback);
  if (lead) {
    std::printf("model   %s\ndata    %s\nrun     %s mode, %s, %d threads, output in %s\n", s.model_summary.c_str(),
                s.data_summary.c_str(), c.get_string("run.mode").c_str(), s.optimizer->name().c_str(),
                at::get_num_threads(), out_dir.c_str());
    if (group)
      std::printf("ranks   %d processes (%s), batch %lld per step shared among them%s\n", group->world_size(),
                  group->backend().c_str(), static_cast<long long>(c.get_int("data.batch_size")),
                  c.get_bool("dist.shard_optimizer") ? ", AdamW moments sharded (ZeRO-1)" : "");
  }
  if (resuming) {
    const std::string from = in_stage("resuming from '" + options.checkpoint.dir + "'",
                                      [&] { return trainer.resume_latest(options.checkpoint.dir); });
    if (from.empty())
      throw CheckpointError("no readable checkpoint in '" + options.checkpoint.dir +
                            "' (each one's problem is listed above); move them away, or set "
                            "run.out_dir to another directory to start over");
    if (trainer.step() >= options.max_steps && lead)
      std::printf("the checkpoint is already at step %lld of %lld: raise train.steps to train further\n",
                  static_cast<long long>(trainer.step()), static_cast<long long>(options.max_steps));
  }
  console->set_total_steps(options.max_steps, trainer.step());

  g_running_trainer = &trainer;
  g_starting_up = false;  // from here a signal stops training at the next step, with a checkpoint
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t first_step = trainer.step();
  const EvalRecord final_eval = trainer.fit();
  g_running_trainer = nullptr;
  if (notes) notes->flush();
  if (group) group->shutdown();  // every rank is done with collectives; only rank 0 goes on
  if (!lead) return g_interrupted ? kInterrupted : kOk;
  logger.on_message(Level::Info, trainer.memory_summary().to_string());  // terminal and metrics.jsonl
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const AllocatorStats mem = allocator_stats();
  std::printf("\ntrained steps %lld-%lld in %.1f s (%.1f steps/s); tensor memory %s now\n",
              static_cast<long long>(first_step), static_cast<long long>(trainer.step()), seconds,
              (trainer.step() - first_step) / std::max(seconds, 1e-9), mib(mem.current_bytes).c_str());
  std::printf("validation loss %.4f", final_eval.val_loss);
  if (std::isfinite(final_eval.accuracy)) std::printf(", accuracy %.2f %%", 100.0 * final_eval.accuracy);
  if (s.gpt && s.byte_level) std::printf(" (%.3f bits per byte)", final_eval.val_loss / std::log(2.0));
  std::printf("\ncheckpoints in %s, metrics in %s\n", options.checkpoint.dir.c_str(),
              (out_dir / "metrics.jsonl").c_str());
  if (s.gpt && s.byte_level) {
    // From the weights the validation loss above scored (the average, if there is one), as
    // `hybrid-train sample` would. A sample that fails costs the run nothing: it is saved.
    try {
      std::string text;
      trainer.with_evaluated_weights([&] { text = sample_text(*s.gpt, c, SampleOptions{}); });
      std::printf("\nsample (prompt \"%s\", temperature %.2f, top-k %lld):\n%s\n",
                  c.get_string("sample.prompt").c_str(), c.get_float("sample.temperature"),
                  static_cast<long long>(c.get_int("sample.top_k")), text.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "no sample: %s\n", e.what());
    }
  }
  if (g_interrupted) {
    std::printf("interrupted: progress saved; run the same command again to resume\n");
    return kInterrupted;
  }
  return kOk;
}

}  // namespace

const std::string& rank_prefix() { return g_rank_prefix; }

int run_train(const std::vector<std::string>& args) {
  // Before the slow start-up, so SIGINT and SIGTERM give 130 wherever they land (SIGTERM's
  // default action was exit status 143 until training began).
  g_starting_up = true;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const dist::DistEnvironment env = dist::environment_from_env();
  if (env.distributed()) g_rank_prefix = "[rank " + std::to_string(env.rank) + "] ";
  const Config c = load_config(args);
  set_threads(thread_count(c, env), c.get_bool("run.flush_denormal"));
  if (!env.distributed()) return train(c, nullptr);
  dist::ProcessGroupOptions po;
  po.env = env;
  po.backend = c.get_string("dist.backend");
  po.timeout_seconds = c.get_float("dist.timeout");
  std::unique_ptr<dist::ProcessGroup> group = dist::ProcessGroup::create(po);
  try {
    return train(c, group.get());
  } catch (const dist::DistributedError&) {
    throw;  // another rank's failure (or the replicas'): this rank did nothing wrong to report
  } catch (const std::exception& e) {
    // The other ranks will find this rank gone: they name it and quote this message.
    group->report_failure(e.what());
    throw;
  }
}

int run_train_launcher(int nproc, const std::vector<std::string>& args) {
  if (dist::environment_from_env().distributed())
    throw ConfigError("--nproc starts local processes itself; under a launcher that set WORLD_SIZE leave it out");
  const Config c = load_config(args);  // a bad config is reported once, not by every rank
  // Each rank notices a failed one within dist.timeout plus a few heartbeats.
  return launch_local(nproc, args, c.get_float("dist.timeout") + 30.0);
}

int run_eval(const std::string& checkpoint, const std::vector<std::string>& overrides) {
  const CheckpointSummary summary = inspect_checkpoint(checkpoint);
  const Config c = config_of_checkpoint(checkpoint, overrides, summary);
  set_threads(static_cast<int>(c.get_int("run.threads")), c.get_bool("run.flush_denormal"));
  Session s = in_stage("loading the data and building the model",
                       [&] { return build_session(c, /*with_data=*/true, /*load_init_from=*/false); });
  // Weights only (the average, if the run kept one): evaluation needs no optimizer state, and
  // the training data position need not fit data.* overrides such as another batch size.
  in_stage("loading '" + checkpoint + "'", [&] { load_checkpoint_weights(checkpoint, *s.module); });
  Trainer trainer(*s.objective, *s.optimizer, *s.data, trainer_options(c));
  const EvalRecord r = trainer.evaluate();
  std::printf("%s at step %lld: validation loss %.4f over %lld items", checkpoint.c_str(),
              static_cast<long long>(summary.step), r.val_loss,
              static_cast<long long>(r.items));
  if (std::isfinite(r.accuracy)) std::printf(", accuracy %.2f %%", 100.0 * r.accuracy);
  std::printf("\n");
  return kOk;
}

int run_sample(const std::string& checkpoint, const SampleOptions& options) {
  const Config c = config_of_checkpoint(checkpoint, {}, inspect_checkpoint(checkpoint));
  set_threads(static_cast<int>(c.get_int("run.threads")), c.get_bool("run.flush_denormal"));
  Session s = build_session(c, /*with_data=*/false, /*load_init_from=*/false);
  if (!s.gpt) throw ConfigError("sample needs a GPT checkpoint; this one holds a " + c.get_string("model.kind"));
  if (c.get_string("data.dataset") == "tokens")
    throw ConfigError("sample prints text for byte-level models only; this one was trained on token ids");
  load_checkpoint_weights(checkpoint, *s.gpt);
  std::printf("%s\n", sample_text(*s.gpt, c, options).c_str());
  return kOk;
}

int run_info(const std::string& checkpoint) {
  const CheckpointSummary s = inspect_checkpoint(checkpoint);
  std::printf("checkpoint   %s (%s)\nstep         %lld\nparameters   %lld tensors, %.3fM elements\n"
              "data cursor  seed %llu, epoch %lld, batch %lld\nstrategy     %s\nweight avg   %s\n\n[stored config]\n%s",
              checkpoint.c_str(), mib(s.file_bytes).c_str(), static_cast<long long>(s.step),
              static_cast<long long>(s.parameter_tensors), s.parameter_elements / 1e6,
              static_cast<unsigned long long>(s.cursor.seed), static_cast<long long>(s.cursor.epoch),
              static_cast<long long>(s.cursor.position), s.strategy.empty() ? "none (plain)" : s.strategy.c_str(),
              s.has_average ? "yes (eval and sample use it)" : "no", s.config_text.c_str());
  return kOk;
}

int run_config(const std::vector<std::string>& args, bool list_keys) {
  const Config c = load_config(args);
  if (!list_keys) {
    std::printf("%s", c.to_toml().c_str());
    return kOk;
  }
  for (const auto& k : config_schema()) {
    std::string allowed;
    for (const auto& a : k.allowed) allowed += (allowed.empty() ? "" : "|") + a;
    if (k.range.declared()) allowed = k.range.describe(k.type);
    std::printf("%-26s %-12s %s%s\n", k.key.c_str(), ("= " + k.default_value).c_str(), k.help.c_str(),
                allowed.empty() ? "" : (" [" + allowed + "]").c_str());
  }
  return kOk;
}

}  // namespace ht::cli
