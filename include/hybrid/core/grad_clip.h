// Gradient clipping by the global L2 norm, the trainer's way. One definition, so a program that
// replays the trainer's steps (nowcast-meta's jump scan) clips bit for bit as the run did.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace ht {

// The global L2 norm of the parameters' defined gradients (the norm of the per-tensor norms, in
// each gradient's dtype, read as double); 0 when none is defined.
double global_grad_norm(const std::vector<at::Tensor>& params);

// When max_norm > 0 and `norm` (global_grad_norm's) exceeds it, scales every defined gradient by
// max_norm / (norm + 1e-6) in place. The scale is computed in double: torch's clip_grad_norm_
// computes it in the norm's float and so rounds differently, enough to move a bf16 Muon step.
void clip_grads_to_norm(const std::vector<at::Tensor>& params, double norm, double max_norm);

}  // namespace ht
