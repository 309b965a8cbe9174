// Whole-model memory benchmark of record: a GPT preset trained through the CLI's session and the
// real trainer, one row per set of memory levers: peak tensor bytes and full-step time.
//   gpt_memory_bench [--preset gpt2] [--batch 4] [--seq 1024] [--steps 2] [--budget 8GiB]
// Peak = the tracking allocator's peak over the timed steps (parameters, gradients, optimizer
// state and activations together). Rows run back to back in one process; times are medians.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include "hybrid-train/config.h"
#include "hybrid-train/session.h"
#include "hybrid/core/allocator.h"
#include "hybrid/core/runtime.h"

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string emergency_path() {
  return (std::filesystem::temp_directory_path() / "gpt_memory_bench-emergency.ht").string();
}

struct Levers {
  std::string name;
  std::vector<std::string> overrides;
};

struct Row {
  double step_ms = 0;
  int64_t peak_bytes = 0;
  int64_t resident_bytes = 0;  // between steps: parameters, gradients, optimizer state
  int64_t micro_splits = 1;    // > 1 when the pressure ladder had to split the batch
  std::string failure;
};

Row run(const std::string& preset, int64_t batch, int64_t seq, int64_t steps, int64_t budget,
        const Levers& levers) {
  ht::cli::Config c;
  for (const std::string kv :
       {"data.dataset=kjv", "model.kind=gpt", "data.val_batches=1", "run.threads=2"})
    c.set_override(kv);
  c.set_override("model.preset=" + preset);
  c.set_override("data.batch_size=" + std::to_string(batch));
  c.set_override("data.context=" + std::to_string(seq));
  c.set_override("model.block_size=" + std::to_string(seq));
  c.set_override("train.steps=" + std::to_string(steps + 1));
  for (const auto& kv : levers.overrides) c.set_override(kv);

  Row row;
  ht::release_cached_blocks();
  ht::set_memory_budget(budget);
  try {
    ht::cli::Session s = ht::cli::build_session(c, true);
    ht::TrainerOptions o = ht::cli::trainer_options(c);
    o.checkpoint.dir.clear();
    o.memory.emergency_checkpoint_path = emergency_path();
    ht::Trainer trainer(*s.objective, *s.optimizer, *s.data, o);
    trainer.train_step();  // warm-up: creates gradients and optimizer state, fills the cache
    row.resident_bytes = ht::allocator_stats().current_bytes;
    std::vector<double> ms;
    for (int64_t i = 0; i < steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      // The trainer's memory monitor resets the allocator's peak per phase: the step record
      // carries the whole step's peak.
      const ht::StepRecord r = trainer.train_step();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      row.peak_bytes = std::max(row.peak_bytes, r.peak_bytes);
    }
    std::sort(ms.begin(), ms.end());
    row.step_ms = ms[ms.size() / 2];
    row.micro_splits = trainer.options().micro_splits;
  } catch (const std::exception& e) {
    row.failure = e.what();
    std::filesystem::remove(emergency_path());  // a benchmark has no work worth keeping
  }
  ht::set_memory_budget(0);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "gpt2", budget_text = "0";
  int64_t batch = 4, seq = 1024, steps = 2;
  std::vector<std::string> only;
  CLI::App app{"GPT peak memory and step time per set of memory levers"};
  app.add_option("--preset", preset, "tiny gpt2 gpt2-medium gpt2-large gpt2-xl");
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--steps", steps, "timed steps per row (after one warm-up step)");
  app.add_option("--budget", budget_text, "allocator budget for every row (e.g. 8GiB); 0 = none");
  app.add_option("--only", only, "rows to run, by name");
  CLI11_PARSE(app, argc, argv);

  ht::install_tracking_allocator();
  ht::set_threads(2);
  int64_t budget = 0;
  try {
    budget = ht::cli::parse_size(budget_text);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_memory_bench: --budget: %s\n", e.what());
    return 2;
  }

  const std::vector<Levers> rows = {
      {"plain", {}},
      {"selective recompute", {"memory.recompute=selective"}},
      {"full recompute", {"memory.recompute=full"}},
      {"flash attention", {"model.attention=flash"}},
      {"flash + selective", {"model.attention=flash", "memory.recompute=selective"}},
      {"8-bit AdamW", {"optim.name=adamw8bit"}},
      {"all together", {"model.attention=flash", "memory.recompute=full", "optim.name=adamw8bit"}},
  };
  std::printf("# %s, B %lld, T %lld, 2 threads, budget %s; median of %lld steps after a warm-up step\n",
              preset.c_str(), static_cast<long long>(batch), static_cast<long long>(seq),
              budget > 0 ? budget_text.c_str() : "none", static_cast<long long>(steps));
  std::printf("%-20s | %11s %9s | %9s %9s | %12s\n", "levers", "peak MiB", "vs plain", "step ms",
              "vs plain", "resident MiB");
  Row plain;
  for (const auto& levers : rows) {
    if (!only.empty() && std::find(only.begin(), only.end(), levers.name) == only.end()) continue;
    const Row r = run(preset, batch, seq, steps, budget, levers);
    if (!r.failure.empty()) {
      std::printf("%-20s | failed: %s\n", levers.name.c_str(), r.failure.c_str());
      continue;
    }
    if (levers.name == "plain") plain = r;
    // Ratios only when the plain row ran in this invocation.
    auto vs_plain = [&](double value, double base) {
      return plain.peak_bytes > 0 ? fmt::format("{:8.2f}x", value / base) : fmt::format("{:>9}", "-");
    };
    std::printf("%-20s | %11.1f %s | %9.0f %s | %12.1f%s\n", levers.name.c_str(), r.peak_bytes / kMiB,
                vs_plain(r.peak_bytes, plain.peak_bytes).c_str(), r.step_ms,
                vs_plain(r.step_ms, plain.step_ms).c_str(), r.resident_bytes / kMiB,
                r.micro_splits > 1 ? fmt::format("  (ladder: {} micro-batches)", r.micro_splits).c_str() : "");
    std::fflush(stdout);
  }
  return 0;
}
