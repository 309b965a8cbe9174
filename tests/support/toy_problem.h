// A small deterministic regression problem for trainer tests: y = sin(3x) + 0.5 cos(2x) fitted
// by a two-layer MLP, batches derived from (seed, epoch, position) so cursors restore exactly.
#pragma once

#include <memory>

#include <torch/torch.h>

#include "hybrid/core/data.h"
#include "hybrid/core/objective.h"

namespace ht::testing {

struct ToyNet : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  explicit ToyNet(int64_t hidden = 32) {
    fc1 = register_module("fc1", torch::nn::Linear(2, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }  // [B,2]->[B,1]
};

class ToyData : public DataSource {
 public:
  explicit ToyData(int64_t batch = 64, uint64_t seed = 7) : batch_(batch) { cursor_.seed = seed; }
  Batch next_train_batch() override {
    Batch b = make(static_cast<int64_t>(cursor_.seed) * 1000003 + cursor_.epoch * 1009 + cursor_.position);
    if (++cursor_.position == 50) {  // 50 batches an epoch
      cursor_.position = 0;
      ++cursor_.epoch;
    }
    return b;
  }
  DataCursor cursor() const override { return cursor_; }
  void restore(const DataCursor& c) override { cursor_ = c; }
  int64_t num_val_batches() const override { return 4; }
  Batch val_batch(int64_t i) const override { return make(-1 - i); }
  int64_t items_per_batch() const override { return batch_; }

 private:
  Batch make(int64_t seed) const {
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed + (1ll << 40)));
    auto x = torch::rand({batch_, 2}, gen) * 4 - 2;  // [B, 2]
    auto y = torch::sin(3 * x.select(1, 0)) + 0.5 * torch::cos(2 * x.select(1, 1));  // [B]
    return {x, y.unsqueeze(1)};
  }
  int64_t batch_;
  DataCursor cursor_;
};

inline std::unique_ptr<Objective> toy_objective(const std::shared_ptr<ToyNet>& net) {
  return make_objective(net, [net](const Batch& b) { return torch::mse_loss(net->forward(b.input), b.target); });
}

}  // namespace ht::testing
