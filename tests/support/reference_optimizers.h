// Textbook AdamW and SGD for the tests of layers below the kernels (core, hybrid): they must not
// link the fused optimizers, and a plain formula is also what the fused ones are checked against.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "hybrid/core/optimizer.h"

namespace ht::testing {

struct ReferenceAdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

// AdamW (bias-corrected moments, decoupled decay on matrices only, the GPT convention).
class ReferenceAdamW final : public SingleRateOptimizer {
 public:
  ReferenceAdamW(std::vector<at::Tensor> params, ReferenceAdamWOptions o)
      : SingleRateOptimizer(o.lr), params_(std::move(params)), o_(o) {
    torch::NoGradGuard no_grad;
    for (const auto& p : params_) {
      m_.push_back(torch::zeros_like(p));
      v_.push_back(torch::zeros_like(p));
    }
  }
  void step() override {
    torch::NoGradGuard no_grad;
    ++t_;
    const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
    const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      const auto& g = p.grad();
      if (!g.defined()) continue;
      p.mul_(1.0 - lr_ * (p.dim() >= 2 ? o_.weight_decay : 0.0));
      m_[i].mul_(o_.beta1).add_(g, 1.0 - o_.beta1);
      v_[i].mul_(o_.beta2).addcmul_(g, g, 1.0 - o_.beta2);
      p.addcdiv_(m_[i], (v_[i].sqrt() / std::sqrt(bc2)).add_(o_.eps), -lr_ / bc1);
    }
  }
  void zero_grad() override { zero_grads_in_place(params_); }
  const std::vector<at::Tensor>& parameters() const override { return params_; }
  std::string name() const override { return "reference-adamw"; }
  int64_t state_bytes() const override {
    int64_t b = 0;
    for (size_t i = 0; i < m_.size(); ++i) b += m_[i].nbytes() + v_[i].nbytes();
    return b;
  }
  void save(torch::serialize::OutputArchive& a) const override {
    a.write("t", torch::tensor(t_));
    for (size_t i = 0; i < m_.size(); ++i) {
      a.write("m." + std::to_string(i), m_[i]);
      a.write("v." + std::to_string(i), v_[i]);
    }
  }
  void load(torch::serialize::InputArchive& a) override {
    at::Tensor t;
    a.read("t", t);
    t_ = t.item<int64_t>();
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < m_.size(); ++i) {
      at::Tensor m, v;
      a.read("m." + std::to_string(i), m);
      a.read("v." + std::to_string(i), v);
      m_[i].copy_(m);
      v_[i].copy_(v);
    }
  }

 private:
  std::vector<at::Tensor> params_, m_, v_;
  ReferenceAdamWOptions o_;
  int64_t t_ = 0;
};

// Plain SGD without momentum: w -= lr * g.
class ReferenceSgd final : public SingleRateOptimizer {
 public:
  ReferenceSgd(std::vector<at::Tensor> params, double lr) : SingleRateOptimizer(lr), params_(std::move(params)) {}
  void step() override {
    torch::NoGradGuard no_grad;
    for (auto& p : params_)
      if (p.grad().defined()) p.add_(p.grad(), -lr_);
  }
  void zero_grad() override { zero_grads_in_place(params_); }
  const std::vector<at::Tensor>& parameters() const override { return params_; }
  std::string name() const override { return "reference-sgd"; }
  int64_t state_bytes() const override { return 0; }
  void save(torch::serialize::OutputArchive&) const override {}
  void load(torch::serialize::InputArchive&) override {}

 private:
  std::vector<at::Tensor> params_;
};

inline std::unique_ptr<Optimizer> reference_adamw(std::vector<at::Tensor> params, ReferenceAdamWOptions o = {}) {
  return std::make_unique<ReferenceAdamW>(std::move(params), o);
}

}  // namespace ht::testing
