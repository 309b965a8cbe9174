// The CLI's subcommands: train, eval, sample, info, config. They assemble library objects from
// a Config (session.cpp), run them, and print what a person needs to read.
#include "commands.h"

#include <csignal>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <torch/torch.h>

#include "config.h"
#include "console_logger.h"
#include "hybrid/core/allocator.h"
#include "hybrid/core/checkpoint.h"
#include "hybrid/core/checkpoint_file.h"
#include "hybrid/core/runtime.h"
#include "hybrid/core/trainer.h"
#include "hybrid/data/byte_codec.h"
#include "hybrid/models/generate.h"
#include "hybrid/models/gpt.h"
#include "session.h"

namespace ht::cli {
namespace fs = std::filesystem;
namespace {

std::atomic<Trainer*> g_running_trainer{nullptr};
std::atomic<bool> g_interrupted{false};

// Asks the trainer to stop after the current step; fit() then evaluates and saves a checkpoint.
void on_signal(int) {
  g_interrupted = true;
  if (Trainer* t = g_running_trainer.load()) t->request_stop();
}

Config config_of_checkpoint(const std::string& path, const std::vector<std::string>& overrides,
                            const CheckpointSummary& summary) {
  Config c = Config::from_string(summary.config_text, path + " (stored config)");
  for (const auto& o : overrides) c.set_override(o);
  return c;
}

// The closing sample of `train` runs after hours of training: its keys are checked before.
void check_sample_keys(const Config& c) {
  if (c.get_string("sample.prompt").empty())
    throw ConfigError("sample.prompt is empty: the sample needs at least one byte to start from");
  if (c.get_int("sample.tokens") < 0) throw ConfigError("sample.tokens must be >= 0");
  if (c.get_float("sample.temperature") < 0) throw ConfigError("sample.temperature must be >= 0 (0 = greedy)");
  if (c.get_int("sample.top_k") < 0) throw ConfigError("sample.top_k must be >= 0 (0 = all tokens)");
}

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

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

int run_train(const std::vector<std::string>& args) {
  const Config c = load_config(args);
  const int threads = set_threads(static_cast<int>(c.get_int("run.threads")));
  set_memory_budget(c.get_bytes("memory.budget"));
  TrainerOptions options = trainer_options(c);  // config errors before any data is loaded
  check_sample_keys(c);
  const auto saved = list_checkpoints(options.checkpoint.dir);
  const bool resuming = c.get_bool("checkpoint.resume") && !saved.empty();
  if (!c.get_bool("checkpoint.resume") && !saved.empty())
    throw ConfigError("checkpoint.resume = false, but '" + options.checkpoint.dir + "' holds " +
                      std::to_string(saved.size()) + " checkpoint(s) of an earlier run (newest '" +
                      saved.front() + "'); a fresh run there would mix with them. Move them away or "
                      "set run.out_dir to another directory");
  Session s = build_session(c, /*with_data=*/true, /*load_init_from=*/!resuming);
  set_recompute_hooks(s, c, options);
  const fs::path out_dir = c.get_string("run.out_dir");
  fs::create_directories(out_dir);

  auto console = std::make_shared<ConsoleLogger>(options.max_steps, c.get_int("run.log_every"));
  MultiLogger logger;
  logger.add(console);
  logger.add(make_jsonl_logger((out_dir / "metrics.jsonl").string(), /*append=*/resuming));

  Trainer trainer(*s.objective, *s.optimizer, *s.data, options, &logger);
  trainer.set_strategy(build_strategy(c));
  std::printf("model   %s\ndata    %s\nrun     %s mode, %s, %d threads, output in %s\n", s.model_summary.c_str(),
              s.data_summary.c_str(), c.get_string("run.mode").c_str(), s.optimizer->name().c_str(), threads,
              out_dir.c_str());
  if (resuming) {
    const std::string from = trainer.resume_latest(options.checkpoint.dir);
    if (from.empty())
      throw CheckpointError("no readable checkpoint in '" + options.checkpoint.dir +
                            "' (each one's problem is listed above); move them away, or set "
                            "run.out_dir to another directory to start over");
    if (trainer.step() >= options.max_steps)
      std::printf("the checkpoint is already at step %lld of %lld: raise train.steps to train further\n",
                  static_cast<long long>(trainer.step()), static_cast<long long>(options.max_steps));
  }
  console->set_total_steps(options.max_steps, trainer.step());

  g_running_trainer = &trainer;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t first_step = trainer.step();
  const EvalRecord final_eval = trainer.fit();
  g_running_trainer = nullptr;
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

int run_eval(const std::string& checkpoint, const std::vector<std::string>& overrides) {
  const CheckpointSummary summary = inspect_checkpoint(checkpoint);
  const Config c = config_of_checkpoint(checkpoint, overrides, summary);
  set_threads(static_cast<int>(c.get_int("run.threads")));
  Session s = build_session(c, /*with_data=*/true, /*load_init_from=*/false);
  // Weights only (the average, if the run kept one): evaluation needs no optimizer state, and
  // the training data position need not fit data.* overrides such as another batch size.
  load_checkpoint_weights(checkpoint, *s.module);
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
  set_threads(static_cast<int>(c.get_int("run.threads")));
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
    std::printf("%-26s %-12s %s%s\n", k.key.c_str(), ("= " + k.default_value).c_str(), k.help.c_str(),
                allowed.empty() ? "" : (" [" + allowed + "]").c_str());
  }
  return kOk;
}

}  // namespace ht::cli
