// The adapter that lets any torch::optim::Optimizer drive training through ht::Optimizer, and the
// in-place gradient zeroing every optimizer of ours shares.
#include <stdexcept>

#include <torch/torch.h>

#include "hybrid/core/optimizer.h"

namespace ht {

// Zeroes gradients in place, as LibTorch 1.13's zero_grad() does. 2.x's frees them instead
// (set_to_none), which would change the memory figures and make Adam skip, for that step, any
// parameter the next backward leaves without a gradient.
void zero_grads_in_place(const std::vector<at::Tensor>& params) {
  for (const auto& p : params)
    if (p.grad().defined()) p.mutable_grad().detach_().zero_();
}

void Optimizer::change_state(StateChange change, double /*factor*/) {
  throw std::invalid_argument("optimizer '" + name() + "' cannot " +
                              (change == StateChange::Reset ? "reset" : "rescale") +
                              " its state after a weight jump: use nowcast.optimizer_state=keep, or "
                              "optim.name=adamw / sgd, which can");
}

namespace {

class TorchOptimizer final : public Optimizer {
 public:
  TorchOptimizer(std::shared_ptr<torch::optim::Optimizer> opt, std::string name)
      : opt_(std::move(opt)), name_(std::move(name)) {
    for (const auto& group : opt_->param_groups()) {
      base_lrs_.push_back(group.options().get_lr());
      for (const auto& p : group.params()) params_.push_back(p);
    }
  }
  void step() override { opt_->step(); }
  void zero_grad() override { zero_grads_in_place(params_); }  // not opt_->zero_grad(): see above
  double lr() const override { return opt_->param_groups().front().options().get_lr(); }
  void schedule_lr(const std::function<double(double)>& rate_of) override {
    auto& groups = opt_->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(rate_of(base_lrs_[g]));
  }
  const std::vector<at::Tensor>& parameters() const override { return params_; }
  std::string name() const override { return name_; }
  int64_t state_bytes() const override {
    // LibTorch keeps per-parameter state as opaque structs; count it through a save.
    torch::serialize::OutputArchive a;
    opt_->save(a);
    int64_t bytes = 0;
    a.save_to([&](const void*, size_t n) { bytes += static_cast<int64_t>(n); return n; });
    return bytes;
  }
  void save(torch::serialize::OutputArchive& a) const override { opt_->save(a); }
  void load(torch::serialize::InputArchive& a) override { opt_->load(a); }

 private:
  std::shared_ptr<torch::optim::Optimizer> opt_;
  std::string name_;
  std::vector<at::Tensor> params_;
  std::vector<double> base_lrs_;  // per parameter group, as the optimizer was built
};

}  // namespace

std::unique_ptr<Optimizer> wrap_torch_optimizer(std::shared_ptr<torch::optim::Optimizer> opt,
                                                std::string name) {
  if (!opt) throw std::invalid_argument("wrap_torch_optimizer: null optimizer");
  return std::make_unique<TorchOptimizer>(std::move(opt), std::move(name));
}

}  // namespace ht
