// The CPU generator's state, read and set under its lock: what recompute replays, what an
// evaluation or an undone nowcast window puts back so later draws are unchanged.
#pragma once

#include <ATen/core/Tensor.h>

namespace ht {

at::Tensor cpu_random_state();
void set_cpu_random_state(const at::Tensor& state);

}  // namespace ht
