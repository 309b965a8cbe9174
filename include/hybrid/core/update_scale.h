// Scales the optimizer's update of chosen slices of chosen parameters for the first steps of a
// run: a step size per part of a tensor, which an optimizer's parameter groups cannot express.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "hybrid/core/trainer.h"

namespace ht {

// Indices [begin, end) along `dim` of the optimizer's parameter `index` (its position in
// Optimizer::parameters()).
struct ParamSlice {
  int64_t index = 0;
  int64_t dim = 0;
  int64_t begin = 0, end = 0;
};

// After each optimizer step before `until_step` (0: every step), the slices' update u becomes
// factor * u: slice = before + factor * (after - before). With AdamW that is the slices' learning
// rate (and decoupled decay) times `factor`; the optimizer's moments are its own, unscaled.
// Why: the tiny GPT's loss plateau at the bigram level ends when attention starts to read the byte
// before, and the query and key weights set how fast the attention maps form - a lever on that
// exit, measured slower than plain there (BENCHMARKS.md 9, "What the plateau is"). Keeps a copy of
// the slices until until_step and no state that outlives a step: checkpoints and resume are unaffected.
class UpdateScaleCallback : public Callback {
 public:
  UpdateScaleCallback(std::vector<ParamSlice> slices, double factor, int64_t until_step);
  void after_backward(Trainer& trainer) override;        // before the update: keep the slices
  void after_optimizer_step(Trainer& trainer) override;  // rescale the update they got

 private:
  bool active(const Trainer& trainer) const;
  std::vector<ParamSlice> slices_;
  double factor_;
  int64_t until_step_;
  std::vector<at::Tensor> before_;  // a copy of each slice, allocated at the first scaled step
  bool taken_ = false;              // before_ holds this step's slices
};

}  // namespace ht
