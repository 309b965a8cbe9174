// SGD with (Nesterov) momentum and L2 weight decay, updating the parameters in place.
// The momentum convention is torch.optim.SGD's: the buffer starts as the first gradient.
#include <stdexcept>

#include <torch/torch.h>

#include "hybrid/core/optimizer.h"
#include "hybrid/kernels/optimizers.h"
#include "optimizer_state_io.h"

namespace ht {
namespace {

class Sgd final : public SingleRateOptimizer {
 public:
  Sgd(std::vector<at::Tensor> params, const SgdOptions& o)
      : SingleRateOptimizer(o.lr), params_(std::move(params)), o_(o) {
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
      p.add_(g, -lr_);
    }
    started_ = true;
  }
  void zero_grad() override { zero_grads_in_place(params_); }
  const std::vector<at::Tensor>& parameters() const override { return params_; }
  std::string name() const override { return "sgd"; }
  int64_t state_bytes() const override {
    int64_t b = 0;
    for (const auto& t : buf_) b += t.nbytes();
    return b;
  }
  bool can_change_state(StateChange) const override { return true; }
  void change_state(StateChange change, double factor) override {
    torch::NoGradGuard no_grad;
    if (change == StateChange::Reset) started_ = false;  // the buffer restarts as the next gradient
    for (auto& b : buf_) b.mul_(change == StateChange::Reset ? 0.0 : factor);
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
                                              "momentum: resume with the momentum it was trained with"
                                            : "the checkpoint's SGD ran without momentum, this one has "
                                              "momentum: resume with momentum 0");
    read_tensor_list_into(a, "momentum", buf_);
  }

 private:
  std::vector<at::Tensor> params_, buf_;
  SgdOptions o_;
  bool started_ = false;
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

}  // namespace ht
