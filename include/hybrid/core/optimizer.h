// The optimizer interface the trainer drives, and the optimizers shipped with the core.
// Any torch::optim::Optimizer plugs in through wrap_torch_optimizer().
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch {
namespace optim { class Optimizer; }
namespace serialize { class OutputArchive; class InputArchive; }
}  // namespace torch

namespace ht {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step() = 0;  // reads each parameter's .grad(), updates the parameter in place
  virtual void zero_grad() = 0;
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;
  virtual const std::vector<at::Tensor>& parameters() const = 0;
  virtual void save(torch::serialize::OutputArchive& archive) const = 0;
  virtual void load(torch::serialize::InputArchive& archive) = 0;
  virtual int64_t state_bytes() const = 0;  // optimizer state only (moments, momentum buffers)
  virtual std::string name() const = 0;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  bool decay_matrices_only = true;  // GPT convention: no decay on biases and norm gains (dim < 2)
};

// Throws std::invalid_argument naming the first field out of range, e.g.
// "AdamWOptions.beta1 = 1: must be in [0, 1)". make_adamw and the 8-bit AdamW call it.
void validate(const AdamWOptions& options);

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

// Adapter for any LibTorch optimizer (its own state serialisation is used for checkpoints).
std::unique_ptr<Optimizer> wrap_torch_optimizer(std::shared_ptr<torch::optim::Optimizer> opt,
                                                std::string name);

}  // namespace ht
