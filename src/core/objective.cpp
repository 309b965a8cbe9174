// Objective adapters: any module with a loss function, and a cross-entropy classifier that
// also counts correct predictions during evaluation.
#include "hybrid/core/objective.h"

#include <torch/torch.h>

#include "hybrid/core/errors.h"

namespace ht {

EvalStats Objective::evaluate(const Batch& batch) {
  EvalStats s;
  const int64_t n = batch.input.size(0);
  const at::Tensor l = loss(batch);
  if (l.numel() != 1)
    throw TrainingError("evaluation: the loss function returned a tensor of shape " + c10::str(l.sizes()) +
                        "; it must return a scalar (reduce it, e.g. with mean())");
  s.loss_sum = l.item<double>() * static_cast<double>(n);
  s.count = n;
  return s;
}

EvalModeGuard::EvalModeGuard(torch::nn::Module& module) : module_(module), was_training_(module.is_training()) {
  module_.eval();
}

EvalModeGuard::~EvalModeGuard() { module_.train(was_training_); }

double eval_mode_loss(Objective& objective, const Batch& batch) {
  torch::NoGradGuard no_grad;
  EvalModeGuard eval_mode(objective.module());
  return objective.loss(batch).item<double>();
}

namespace {

class FunctionObjective final : public Objective {
 public:
  FunctionObjective(std::shared_ptr<torch::nn::Module> m, LossFn f)
      : module_(std::move(m)), loss_(std::move(f)) {}
  torch::nn::Module& module() override { return *module_; }
  at::Tensor loss(const Batch& b) override { return loss_(b); }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  LossFn loss_;
};

class ClassifierObjective final : public Objective {
 public:
  ClassifierObjective(std::shared_ptr<torch::nn::Module> m,
                      std::function<at::Tensor(const at::Tensor&)> forward)
      : module_(std::move(m)), forward_(std::move(forward)) {}
  torch::nn::Module& module() override { return *module_; }
  at::Tensor loss(const Batch& b) override {
    return torch::nn::functional::cross_entropy(forward_(b.input), b.target);
  }
  EvalStats evaluate(const Batch& b) override {
    auto logits = forward_(b.input);  // [B, C]
    EvalStats s;
    s.count = b.input.size(0);
    s.loss_sum = torch::nn::functional::cross_entropy(
                     logits, b.target,
                     torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                     .item<double>();
    s.correct = logits.argmax(1).eq(b.target).sum().item<double>();
    s.has_accuracy = true;
    return s;
  }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  std::function<at::Tensor(const at::Tensor&)> forward_;
};

}  // namespace

std::unique_ptr<Objective> make_objective(std::shared_ptr<torch::nn::Module> module, LossFn loss) {
  return std::make_unique<FunctionObjective>(std::move(module), std::move(loss));
}

std::unique_ptr<Objective> make_classifier_objective(
    std::shared_ptr<torch::nn::Module> module,
    std::function<at::Tensor(const at::Tensor&)> forward) {
  return std::make_unique<ClassifierObjective>(std::move(module), std::move(forward));
}

}  // namespace ht
