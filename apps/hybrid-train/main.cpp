// hybrid-train: the command-line front end. Parses subcommands with CLI11, runs them, and maps
// failures to exit codes scripts can rely on (see commands.h).
#include <cstdio>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include "commands.h"
#include "config.h"
#include "hybrid/core/allocator.h"
#include "hybrid/core/checkpoint_file.h"
#include "hybrid/core/metrics.h"
#include "hybrid/core/trainer.h"
#include "hybrid/dist/process_group.h"
#include "session.h"

using namespace ht::cli;

namespace {

// The library names the checkpoint part that does not fit; the CLI names its setting for it.
std::string mismatch_hint(const std::string& part) {
  if (part == "strategy") return " (set run.mode, and its hybrid.* or lookahead.* keys, as it was written with)";
  if (part == "optimizer") return " (set optim.name and its options to those it was written with)";
  if (part == "average") return " (set train.average_decay as it was written with)";
  if (part == "model") return " (the model.* keys must be those it was written with)";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  ht::install_tracking_allocator();  // before any tensor exists, so every byte is counted

  CLI::App app{"hybrid-train: train GPT-2 and image models with LibTorch, plainly or with predicted steps"};
  app.require_subcommand(1);

  std::vector<std::string> train_args;
  int nproc = 1;
  auto* train = app.add_subcommand("train", "train a model: hybrid-train train [--nproc N] [CONFIG.toml] [section.key=value ...]");
  train->add_option("args", train_args, "a config file from configs/, then overrides such as train.steps=500");
  train->add_option("--nproc", nproc, "data-parallel: start N local processes (each trains on 1/N of every batch)")
      ->check(CLI::Range(1, 1024));

  std::string eval_ckpt;
  std::vector<std::string> eval_overrides;
  auto* eval = app.add_subcommand("eval", "evaluate a checkpoint on its validation data");
  eval->add_option("checkpoint", eval_ckpt, "checkpoint file (.ht)")->required();
  eval->add_option("overrides", eval_overrides, "overrides such as data.val_batches=-1");

  std::string sample_ckpt;
  SampleOptions sample_opts;
  auto* sample = app.add_subcommand("sample", "generate text from a GPT checkpoint");
  sample->add_option("checkpoint", sample_ckpt, "checkpoint file (.ht)")->required();
  sample->add_option("--prompt", sample_opts.prompt, "text to continue");
  sample->add_option("--tokens", sample_opts.tokens, "tokens to generate")->check(CLI::Range(1, 100000));
  sample->add_option("--temperature", sample_opts.temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  sample->add_option("--top-k", sample_opts.top_k, "0 = all tokens")->check(CLI::Range(0, 1000000));
  sample->add_option("--seed", sample_opts.seed, "sampling seed");

  std::string info_ckpt;
  auto* info = app.add_subcommand("info", "describe a checkpoint: step, model, data position, config");
  info->add_option("checkpoint", info_ckpt, "checkpoint file (.ht)")->required();

  std::vector<std::string> config_args;
  bool list_keys = false;
  auto* config = app.add_subcommand("config", "print the resolved config, or every key with --keys");
  config->add_option("args", config_args, "a config file, then overrides");
  config->add_flag("--keys", list_keys, "list every key with its default and allowed values");

  std::vector<std::string> plan_args;
  std::string plan_budget;
  auto* plan = app.add_subcommand("plan", "estimate peak memory and the settings that fit a budget");
  plan->add_option("args", plan_args, "a config file, then overrides");
  plan->add_option("--budget", plan_budget, "memory to fit: bytes, 8GiB, or a fraction of RAM (default memory.budget)");
  int plan_nproc = 1;
  plan->add_option("--nproc", plan_nproc, "also show one rank's memory with N data-parallel processes")
      ->check(CLI::Range(1, 1024));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kOk : kBadUsage;
  }

  try {
    if (*train) return nproc > 1 ? run_train_launcher(nproc, train_args) : run_train(train_args);
    if (*eval) return run_eval(eval_ckpt, eval_overrides);
    if (*sample) return run_sample(sample_ckpt, sample_opts);
    if (*info) return run_info(info_ckpt);
    if (*config) return run_config(config_args, list_keys);
    if (*plan) return run_plan(plan_args, plan_budget, plan_nproc);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "%sconfig error: %s\n", rank_prefix().c_str(), e.what());
    return kBadUsage;
  } catch (const DataError& e) {
    std::fprintf(stderr, "%sdata error: %s\n", rank_prefix().c_str(), e.what());
    return kDataUnavailable;
  } catch (const ht::CheckpointMismatch& e) {
    std::fprintf(stderr, "%scheckpoint error: %s%s\n", rank_prefix().c_str(), e.what(), mismatch_hint(e.part).c_str());
    return kBadCheckpoint;
  } catch (const ht::CheckpointError& e) {
    std::fprintf(stderr, "%scheckpoint error: %s\n", rank_prefix().c_str(), e.what());
    return kBadCheckpoint;
  } catch (const ht::OutOfMemoryExit& e) {
    std::fprintf(stderr, "%sout of memory: %s\n", rank_prefix().c_str(), e.what());
    return kOutOfMemory;
  } catch (const OutOfMemoryError& e) {
    std::fprintf(stderr, "%sout of memory while %s\n", rank_prefix().c_str(), e.what());
    return kOutOfMemory;
  } catch (const c10::OutOfMemoryError& e) {  // a stage no in_stage() names
    std::fprintf(stderr, "%sout of memory: %s; %s: raise it (0 = no budget), or lower data.batch_size or the model size\n", rank_prefix().c_str(),
                 e.what_without_backtrace(), memory_budget_text().c_str());
    return kOutOfMemory;
  } catch (const ht::MetricsWriteError& e) {
    std::fprintf(stderr, "%smetrics error: %s. Checkpoints already written are intact: make room and run the "
                 "same command again to resume\n", rank_prefix().c_str(), e.what());
    return kTrainingFailed;
  } catch (const ht::dist::DistributedError& e) {
    std::fprintf(stderr, "%sdistributed error: %s\n", rank_prefix().c_str(), e.what());
    return kDistributedFailure;
  } catch (const ht::TrainingError& e) {
    std::fprintf(stderr, "%straining stopped: %s\n", rank_prefix().c_str(), e.what());
    return kTrainingFailed;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%serror: %s\n", rank_prefix().c_str(), e.what());
    return kBadUsage;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "%serror: %s\n", rank_prefix().c_str(), e.what_without_backtrace());
    return kTrainingFailed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%serror: %s\n", rank_prefix().c_str(), e.what());
    return kTrainingFailed;
  }
  return kBadUsage;
}
