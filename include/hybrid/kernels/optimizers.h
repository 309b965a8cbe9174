// The project's own optimizers: AdamW fused into one pass per tensor, and SGD with momentum.
// Both update parameters in place and save their state for bit-exact resume.
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "hybrid/core/optimizer.h"

namespace ht {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  bool decay_matrices_only = true;  // GPT convention: no decay on biases and norm gains (dim < 2)
};

struct SgdOptions {
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// AdamW in one fused OpenMP pass per tensor: no temporaries, bit-identical across runs for a
// fixed thread count. Same maths as torch::optim::AdamW (bias-corrected, decoupled decay).
std::unique_ptr<Optimizer> make_adamw(std::vector<at::Tensor> params, const AdamWOptions& opts);
std::unique_ptr<Optimizer> make_sgd(std::vector<at::Tensor> params, const SgdOptions& opts);

}  // namespace ht
