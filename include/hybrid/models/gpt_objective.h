// GPT as a trainer Objective: next-token cross entropy over Batch{input [B, T], target [B, T]}.
#pragma once

#include <memory>

#include "hybrid/core/objective.h"
#include "hybrid/models/gpt.h"

namespace ht {

// loss() is GPT::loss (mean over B*T tokens); evaluate() counts tokens, not sequences.
std::unique_ptr<Objective> make_gpt_objective(std::shared_ptr<GPT> model);

}  // namespace ht
