// `hybrid-train plan`: maps a Config onto the memory planner's inputs (the same keys session.cpp
// reads) so the estimate describes exactly the run `train` would start.
#pragma once

#include <string>

#include "config.h"
#include "hybrid/models/memory_plan.h"

namespace ht::cli {

struct PlanInputs {
  std::string kind;  // model.kind
  Config config;     // the model.* settings the model registry reads
  GPTConfig gpt;     // when kind = gpt
  TrainShape shape;
  MemoryLevers levers;
};

PlanInputs plan_inputs(const Config& config);
MemoryEstimate estimate_memory(const PlanInputs& inputs);

}  // namespace ht::cli
