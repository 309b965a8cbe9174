// The toy problem with the reference AdamW: everything a Trainer needs, built from one seed, so
// two runs made alike start from the same weights and see the same batches.
#pragma once

#include <memory>

#include "hybrid/core/trainer.h"
#include "support/reference_optimizers.h"
#include "support/toy_problem.h"

namespace ht::testing {

struct ToyAdamWRun {
  std::shared_ptr<ToyNet> net;
  std::unique_ptr<Objective> objective;
  std::unique_ptr<Optimizer> optimizer;
  ToyData data;
  explicit ToyAdamWRun(double lr = 0.05, uint64_t seed = 1) {
    torch::manual_seed(seed);
    net = std::make_shared<ToyNet>();
    objective = toy_objective(net);
    ReferenceAdamWOptions o;
    o.lr = lr;
    optimizer = reference_adamw(net->parameters(), o);
  }
  std::unique_ptr<Trainer> trainer(TrainerOptions o = {}) {
    return std::make_unique<Trainer>(*objective, *optimizer, data, std::move(o));
  }
};

}  // namespace ht::testing
