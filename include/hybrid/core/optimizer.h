// The optimizer interface the trainer drives. Any torch::optim::Optimizer plugs in through
// wrap_torch_optimizer(); the project's own fused optimizers are in hybrid/kernels/optimizers.h.
#pragma once

#include <functional>
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
  // Learning rates have one owner: the optimizer. Each parameter group keeps the rate it was
  // built with (its base rate); before every step the trainer's schedule sets each group's rate
  // to rate_of(base), so groups keep their ratios and an unscheduled run trains at the base rate.
  virtual double lr() const = 0;  // the current rate (of the first group)
  virtual void schedule_lr(const std::function<double(double base_lr)>& rate_of) = 0;
  virtual const std::vector<at::Tensor>& parameters() const = 0;
  virtual void save(torch::serialize::OutputArchive& archive) const = 0;
  virtual void load(torch::serialize::InputArchive& archive) = 0;
  virtual int64_t state_bytes() const = 0;  // optimizer state only (moments, momentum buffers)
  virtual std::string name() const = 0;

  // After the weights were moved by something other than this optimizer (a nowcast jump), its
  // state describes gradients at the old point. Reset: the state of a new optimizer (moments
  // zero, step count 0, so bias correction starts over). ScaleMomentum: the first moment (SGD:
  // the momentum buffer) times `factor`, the second moment and step count kept. Optimizers that
  // cannot (torch::optim wrappers, 8-bit AdamW) say so in can_change_state() and throw here.
  enum class StateChange { Reset, ScaleMomentum };
  virtual bool can_change_state(StateChange /*change*/) const { return false; }
  virtual void change_state(StateChange change, double factor);
};

// The part of an optimizer that owns its base rate: our optimizers derive from it.
class SingleRateOptimizer : public Optimizer {
 public:
  explicit SingleRateOptimizer(double base_lr) : base_lr_(base_lr), lr_(base_lr) {}
  double lr() const override { return lr_; }
  void schedule_lr(const std::function<double(double)>& rate_of) override { lr_ = rate_of(base_lr_); }

 protected:
  double base_lr_;
  double lr_;
};

// Adapter for any LibTorch optimizer (its own state serialisation is used for checkpoints).
std::unique_ptr<Optimizer> wrap_torch_optimizer(std::shared_ptr<torch::optim::Optimizer> opt,
                                                std::string name);

// Zeroes every defined gradient in place (LibTorch 1.13's zero_grad; 2.x's frees them instead).
void zero_grads_in_place(const std::vector<at::Tensor>& params);

}  // namespace ht
