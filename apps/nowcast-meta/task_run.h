// One corpus task ready to train (its session's data, the model, objective, optimizer and trainer):
// what recording a trajectory and loss-aware tuning both start from.
#pragma once

#include <memory>
#include <string>

#include "corpus.h"
#include "hybrid-train/session.h"
#include "hybrid/core/trainer.h"
#include "hybrid/models/image_classifier.h"

namespace ht::meta {

struct TaskRun {
  cli::Session session;  // the data; for a GPT also the model, objective and optimizer
  std::shared_ptr<ImageClassifier> net;  // MLP / CNN tasks: the model (the session's is replaced)
  std::unique_ptr<Objective> own_objective;
  std::unique_ptr<Optimizer> own_optimizer;
  Objective* objective = nullptr;  // whichever of the two is in use
  Optimizer* optimizer = nullptr;
  std::unique_ptr<Trainer> trainer;
  NowcastSpec spec;  // the parameters' kinds, in optimizer order
  LrSchedule schedule;  // the trainer's, its total_steps resolved to the task's length
};

// val_batches: validation batches the session's data serves (the loss-aware tuner's probes).
std::unique_ptr<TaskRun> open_task(const CorpusTask& task, const std::string& fashion_mnist_dir,
                                   const std::string& text_path, int64_t val_batches);

}  // namespace ht::meta
