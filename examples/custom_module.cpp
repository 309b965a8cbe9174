// Trains a user-defined torch::nn::Module with its own loss through hybrid-trainer's public API:
// define a module, a loss, a DataSource; hand them to ht::Trainer. Fits y = sin(3x) with an MLP.
#include <cmath>
#include <cstdio>

#include <torch/torch.h>

#include "hybrid/core/allocator.h"
#include "hybrid/core/runtime.h"
#include "hybrid/core/trainer.h"
#include "hybrid/kernels/optimizers.h"

struct Net : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(1, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::tanh(fc1(x))); }  // [B,1] -> [B,1]
};

// Fresh random points every batch; the cursor is just a counter that seeds each batch.
class SineData : public ht::DataSource {
 public:
  ht::Batch next_train_batch() override { return make(1000 + cursor_.position++); }
  ht::DataCursor cursor() const override { return cursor_; }
  void restore(const ht::DataCursor& c) override { cursor_ = c; }
  int64_t num_val_batches() const override { return 4; }
  ht::Batch val_batch(int64_t i) const override { return make(i); }
  int64_t items_per_batch() const override { return 128; }

 private:
  static ht::Batch make(int64_t seed) {
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
    auto x = torch::rand({128, 1}, gen) * 4 - 2;  // [B, 1] in [-2, 2)
    return {x, torch::sin(3 * x)};
  }
  ht::DataCursor cursor_;
};

// Prints what the trainer reports: the library itself never prints.
struct PrintLogger : ht::Logger {
  void on_eval(const ht::EvalRecord& r) override {
    std::printf("step %4lld  validation mse %.5f\n", static_cast<long long>(r.step), r.val_loss);
  }
};

int main() {
  ht::install_tracking_allocator();  // first thing: every tensor is counted (and a budget enforced)
  ht::set_threads(0);
  torch::manual_seed(0);

  auto net = std::make_shared<Net>();  // a TORCH_MODULE holder works too
  auto objective = ht::make_objective(net, [net](const ht::Batch& b) {
    return torch::mse_loss(net->forward(b.input), b.target);
  });
  ht::AdamWOptions adamw;
  adamw.lr = 1e-2;  // the optimizer owns the rate; a schedule only shapes it
  adamw.weight_decay = 0.0;
  auto optimizer = ht::make_adamw(net->parameters(), adamw);  // or ht::wrap_torch_optimizer(...)
  SineData data;

  ht::TrainerOptions options;
  options.max_steps = 600;
  options.eval_every = 200;
  options.schedule.kind = ht::LrSchedule::Kind::Cosine;  // default: constant; length: the run's
  options.schedule.warmup_steps = 20;

  PrintLogger logger;
  ht::Trainer trainer(*objective, *optimizer, data, options, &logger);
  trainer.add_metric("mae", [net](const ht::Batch& b) { return (net->forward(b.input) - b.target).abs().mean().item<double>(); });
  const ht::EvalRecord final_eval = trainer.fit();  // trainer.evaluations() holds every evaluation
  std::printf("final validation mse %.5f (predicting 0 gives ~0.5)\n", final_eval.val_loss);
  return final_eval.val_loss < 0.05 ? 0 : 1;
}
