// SGD with (Nesterov) momentum and L2 weight decay, in place; and the adapter that lets any
// torch::optim::Optimizer drive training through ht::Optimizer.
#include <stdexcept>

#include <torch/torch.h>

#include "hybrid/core/optimizer.h"
#include "optimizer_state_io.h"

namespace ht {
namespace {

// Zeroes gradients in place, as LibTorch 1.13's zero_grad() does. 2.x's frees them instead
// (set_to_none), which would change the memory figures and make Adam skip, for that step, any
// parameter the next backward leaves without a gradient.
void zero_grads_in_place(std::vector<at::Tensor>& params) {
  for (auto& p : params)
    if (p.grad().defined()) p.mutable_grad().detach_().zero_();
}

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<at::Tensor> params, const SgdOptions& o) : params_(std::move(params)), o_(o) {
    torch::NoGradGuard no_grad;
    if (o_.momentum > 0)
      for (const auto& p : params_) buf_.push_back(torch::zeros_like(p));
  }

  void step() override {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      if (!p.grad().defined()) continue;
      auto& g = p.mutable_grad();
      if (o_.weight_decay > 0) g.add_(p, o_.weight_decay);  // grad is consumed by this step
      if (o_.momentum > 0) {
        // Same convention as torch.optim.SGD: the buffer starts as the first gradient.
        if (started_) buf_[i].mul_(o_.momentum).add_(g);
        else buf_[i].copy_(g);
        if (o_.nesterov) g.add_(buf_[i], o_.momentum);
        else g.copy_(buf_[i]);
      }
      p.add_(g, -o_.lr);
    }
    started_ = true;
  }
  void zero_grad() override { zero_grads_in_place(params_); }
  double lr() const override { return o_.lr; }
  void set_lr(double lr) override { o_.lr = lr; }
  const std::vector<at::Tensor>& parameters() const override { return params_; }
  std::string name() const override { return "sgd"; }
  int64_t state_bytes() const override {
    int64_t b = 0;
    for (const auto& t : buf_) b += t.nbytes();
    return b;
  }
  void save(torch::serialize::OutputArchive& a) const override {
    a.write("kind", torch::tensor(2));
    a.write("started", torch::tensor(static_cast<int64_t>(started_)));
    write_tensor_list(a, "momentum", buf_);
  }
  void load(torch::serialize::InputArchive& a) override {
    expect_kind(a, 2, "sgd");
    at::Tensor s;
    a.read("started", s);
    started_ = s.item<int64_t>() != 0;
    at::Tensor count;
    a.read("momentum.count", count);
    if ((count.item<int64_t>() > 0) != !buf_.empty())
      throw std::runtime_error(buf_.empty() ? "the checkpoint's SGD kept momentum buffers, this one runs without "
                                              "momentum: set optim.momentum to the value it was trained with"
                                            : "the checkpoint's SGD ran without momentum, this one has "
                                              "momentum: set optim.momentum = 0 to resume it");
    read_tensor_list_into(a, "momentum", buf_);
  }

 private:
  std::vector<at::Tensor> params_, buf_;
  SgdOptions o_;
  bool started_ = false;
};

class TorchOptimizer final : public Optimizer {
 public:
  TorchOptimizer(std::shared_ptr<torch::optim::Optimizer> opt, std::string name)
      : opt_(std::move(opt)), name_(std::move(name)) {
    for (const auto& group : opt_->param_groups())
      for (const auto& p : group.params()) params_.push_back(p);
  }
  void step() override { opt_->step(); }
  void zero_grad() override { zero_grads_in_place(params_); }  // not opt_->zero_grad(): see above
  double lr() const override { return opt_->param_groups().front().options().get_lr(); }
  void set_lr(double lr) override {
    for (auto& group : opt_->param_groups()) group.options().set_lr(lr);
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
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(std::vector<at::Tensor> params, const SgdOptions& opts) {
  auto fail = [](const char* field, double v, const char* need) {
    throw std::invalid_argument("SgdOptions." + std::string(field) + " = " + std::to_string(v) + ": must be " + need);
  };
  if (!(opts.lr >= 0)) fail("lr", opts.lr, ">= 0");
  if (!(opts.momentum >= 0 && opts.momentum < 1)) fail("momentum", opts.momentum, "in [0, 1)");
  if (!(opts.weight_decay >= 0)) fail("weight_decay", opts.weight_decay, ">= 0");
  return std::make_unique<Sgd>(std::move(params), opts);
}

std::unique_ptr<Optimizer> wrap_torch_optimizer(std::shared_ptr<torch::optim::Optimizer> opt,
                                                std::string name) {
  if (!opt) throw std::invalid_argument("wrap_torch_optimizer: null optimizer");
  return std::make_unique<TorchOptimizer>(std::move(opt), std::move(name));
}

}  // namespace ht
