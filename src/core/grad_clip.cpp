// Gradient clipping by the global L2 norm (grad_clip.h): the trainer's full step and any replay
// of it call these two functions.
#include "hybrid/core/grad_clip.h"

#include <ATen/ATen.h>

namespace ht {

double global_grad_norm(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> norms;  // one small reduction per tensor
  norms.reserve(params.size());
  for (const auto& p : params)
    if (p.grad().defined()) norms.push_back(p.grad().norm());
  if (norms.empty()) return 0.0;
  return at::stack(norms).norm().item<double>();
}

void clip_grads_to_norm(const std::vector<at::Tensor>& params, double norm, double max_norm) {
  if (!(max_norm > 0) || !(norm > max_norm)) return;
  at::NoGradGuard no_grad;
  const double scale = max_norm / (norm + 1e-6);
  for (const auto& p : params)
    if (p.grad().defined()) p.grad().mul_(scale);
}

}  // namespace ht
