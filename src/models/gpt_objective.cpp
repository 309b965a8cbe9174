// Adapts GPT to the trainer's Objective interface. Token-weighted evaluation so that validation
// loss is a per-token mean whatever the batch shapes.
#include "hybrid/models/gpt_objective.h"

#include <stdexcept>

#include <torch/torch.h>

namespace ht {
namespace {

class GPTObjective : public Objective {
 public:
  explicit GPTObjective(std::shared_ptr<GPT> model) : model_(std::move(model)) {}

  torch::nn::Module& module() override { return *model_; }

  at::Tensor loss(const Batch& batch) override { return model_->loss(batch.input, batch.target); }

  EvalStats evaluate(const Batch& batch) override {
    EvalStats s;
    s.count = batch.target.numel();
    s.loss_sum = model_->loss(batch.input, batch.target).item<double>() * s.count;
    return s;
  }

 private:
  std::shared_ptr<GPT> model_;
};

}  // namespace

std::unique_ptr<Objective> make_gpt_objective(std::shared_ptr<GPT> model) {
  if (!model) throw std::invalid_argument("make_gpt_objective: null model");
  return std::make_unique<GPTObjective>(std::move(model));
}

}  // namespace ht
