// The benchmark tasks of record (MLP / CNN on Fashion-MNIST, tiny GPT on KJV) as CLI configs,
// shared by hybrid_bench and direction_scan so both measure exactly the same training runs.
#pragma once

#include <string>

#include "hybrid-train/config.h"

// The settings of configs/, shortened so several modes x seeds fit in minutes. Learning rates are
// plain mode's best on a grid at these lengths (bench/baseline_lr.sh, bench/results/baseline_lr.log):
// a speedup over an untuned baseline would only measure the learning rate. GPT: 0.01-0.012 end
// level or lower in the median, but 0.012 diverges in one seed of three; 0.008 keeps a margin.
inline ht::cli::Config task_config(const std::string& task, int64_t steps) {
  ht::cli::Config c;
  auto set = [&](const std::string& kv) { c.set_override(kv); };
  if (task == "gpt") {
    for (auto kv : {"data.dataset=kjv", "model.kind=gpt", "model.preset=tiny", "data.batch_size=16",
                    "data.context=128", "data.val_batches=8", "optim.lr=0.008", "optim.beta2=0.95",
                    "schedule.warmup_steps=50"})
      set(kv);
  } else {
    for (auto kv : {"data.dataset=fashion-mnist", "data.batch_size=128", "data.val_batches=20", "optim.beta2=0.999",
                    "optim.weight_decay=0.01", "schedule.warmup_steps=50"})
      set(kv);
    set(task == "mlp" ? "optim.lr=0.004" : "optim.lr=0.008");
    set("model.kind=" + task);
  }
  set("train.steps=" + std::to_string(steps));
  set("run.threads=2");
  return c;
}

inline bool known_task(const std::string& task) { return task == "mlp" || task == "gpt" || task == "cnn"; }
