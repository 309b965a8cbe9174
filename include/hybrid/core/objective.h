// What is being minimised: a torch::nn::Module and a loss over a batch (ensmallen's split).
// Any module plugs in through make_objective(module, loss_fn); the trainer needs nothing else.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "hybrid/core/data.h"

// Declared, not included: <torch/nn/module.h> pulls in most of the C++ frontend, and every file
// that includes the trainer would pay for it. Code that calls into a module includes it itself.
namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ht {

struct EvalStats {
  double loss_sum = 0.0;  // sum over items of the per-item mean loss times items
  double correct = 0.0;   // for classifiers; 0 when not meaningful
  int64_t count = 0;      // items (samples or tokens) the figures cover
  bool has_accuracy = false;
};

class Objective {
 public:
  virtual ~Objective() = default;
  virtual torch::nn::Module& module() = 0;
  // Scalar mean loss of the batch. Called with grad mode on (training) or off (verification).
  virtual at::Tensor loss(const Batch& batch) = 0;
  // Called under NoGradGuard. The default uses loss() weighted by the batch's first dimension.
  virtual EvalStats evaluate(const Batch& batch);
};

// The module in eval mode (no dropout) for a scope, and its training flag back however the scope
// ends (an out-of-memory error included): evaluation, verification and generation use it.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(torch::nn::Module& module);
  ~EvalModeGuard();
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

// The batch's mean loss as a verification compares it: the module in eval mode (no dropout noise
// between paired losses) and no autograd graph.
double eval_mode_loss(Objective& objective, const Batch& batch);

using LossFn = std::function<at::Tensor(const Batch&)>;

// Wraps any module and a loss function; the loss function calls the module itself.
std::unique_ptr<Objective> make_objective(std::shared_ptr<torch::nn::Module> module, LossFn loss);

// The same for a TORCH_MODULE holder (torch::nn::Linear, a user's `TORCH_MODULE(Net)`): the
// objective shares the holder's module, so the optimizer built over holder->parameters() updates
// what the loss calls. (A template: the holder's type is complete where it is used.)
template <typename Holder, typename = decltype(std::declval<const Holder&>().ptr())>
std::unique_ptr<Objective> make_objective(const Holder& holder, LossFn loss) {
  return make_objective(std::shared_ptr<torch::nn::Module>(holder.ptr()), std::move(loss));
}

// Cross-entropy classifier: module maps input [B, ...] -> logits [B, C]; evaluate counts accuracy.
std::unique_ptr<Objective> make_classifier_objective(
    std::shared_ptr<torch::nn::Module> module,
    std::function<at::Tensor(const at::Tensor&)> forward);

}  // namespace ht
