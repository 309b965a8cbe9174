// Lookahead (Zhang et al., NeurIPS 2019) as a step strategy: the trainer's optimizer takes k fast
// steps, then slow += alpha * (fast - slow) and the fast weights restart from slow; with outer
// momentum it is SNOO (2025). Inner optimizer state is kept. The no-learning baselines for hybrid.
#include <torch/torch.h>

#include <chrono>
#include <stdexcept>

#include "archive_io.h"
#include "hybrid/hybrid/lookahead.h"

namespace ht {

LookaheadStrategy::LookaheadStrategy(int64_t k, double alpha, double momentum, int64_t until_step)
    : k_(k), alpha_(alpha), momentum_(momentum), until_step_(until_step) {
  if (k < 1) throw std::invalid_argument("lookahead: k must be >= 1, got " + std::to_string(k));
  if (!(alpha > 0.0 && alpha <= 1.0)) {
    throw std::invalid_argument("lookahead: alpha must be in (0, 1], got " + std::to_string(alpha));
  }
  if (!(momentum >= 0.0 && momentum < 1.0)) {
    throw std::invalid_argument("lookahead: momentum must be in [0, 1), got " + std::to_string(momentum));
  }
  if (until_step < 0) {
    throw std::invalid_argument("lookahead: until_step must be >= 0 (0 = to the end), got " + std::to_string(until_step));
  }
}

std::unique_ptr<StepStrategy> make_lookahead_strategy(int64_t k, double alpha, double momentum, int64_t until_step) {
  return std::make_unique<LookaheadStrategy>(k, alpha, momentum, until_step);
}

StepRecord LookaheadStrategy::run_step(Trainer& trainer) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<at::Tensor>& params = trainer.optimizer().parameters();
  if (!stopped_ && slow_.empty()) {
    torch::NoGradGuard no_grad;
    for (const auto& p : params) slow_.push_back(p.detach().clone());
  }
  if (!stopped_ && momentum_ > 0.0 && outer_.empty()) {
    torch::NoGradGuard no_grad;
    for (const auto& p : params) outer_.push_back(torch::zeros_like(p));
  }
  const FullStepResult r = trainer.full_step();
  StepRecord rec;
  rec.phase = Phase::Full;
  rec.loss = r.loss;
  rec.grad_norm = r.grad_norm;
  rec.lr = trainer.optimizer().lr();
  bool synced = false;
  if (!stopped_ && ++count_ >= k_) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      if (momentum_ == 0.0) {
        slow_[i].lerp_(params[i], alpha_);  // slow += alpha * (fast - slow), no temporary
      } else {
        // The fast weights are overwritten below, so they hold the pseudo-gradient meanwhile.
        const at::Tensor& s = params[i];
        s.sub_(slow_[i]).neg_();                        // s = slow - fast
        outer_[i].mul_(momentum_).add_(s);              // b = momentum * b + s
        slow_[i].sub_(s, alpha_).sub_(outer_[i], alpha_ * momentum_);  // Nesterov
      }
      params[i].copy_(slow_[i]);
    }
    count_ = 0;
    synced = true;
  }
  trainer.advance_step();
  // Handed over right after a synchronisation, where the weights are the slow ones: from here
  // on these are plain steps with the inner optimizer's state as it is.
  if (synced && until_step_ > 0 && trainer.step() >= until_step_) {
    stopped_ = true;
    slow_.clear();
    outer_.clear();
  }
  rec.step = trainer.step();
  rec.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  rec.items_per_sec = rec.ms > 0.0 ? static_cast<double>(r.items) / (rec.ms / 1000.0) : 0.0;
  rec.extra["lookahead_sync"] = synced ? 1.0 : 0.0;
  return rec;
}

int64_t LookaheadStrategy::state_bytes() const {
  int64_t b = 0;
  for (const auto* buffers : {&slow_, &outer_})
    for (const auto& t : *buffers) b += t.numel() * static_cast<int64_t>(t.element_size());
  return b;
}

void LookaheadStrategy::save(torch::serialize::OutputArchive& a) const {
  archive_io::put(a, "k", k_);
  archive_io::put(a, "alpha", alpha_);
  archive_io::put(a, "momentum", momentum_);
  archive_io::put(a, "count", count_);
  archive_io::put(a, "stopped", static_cast<int64_t>(stopped_));
  if (stopped_) return;  // no buffers left
  archive_io::put_tensors(a, "slow", slow_);
  if (momentum_ > 0.0) archive_io::put_tensors(a, "outer", outer_);
}

void LookaheadStrategy::load(torch::serialize::InputArchive& a) {
  // (Another strategy's state never gets here: the checkpoint registry compares names first.)
  if (archive_io::get_int(a, "k") != k_) {
    throw std::runtime_error("lookahead state was saved with a different k: resume with the same settings");
  }
  // Checkpoints from before SNOO hold no momentum: they are plain Lookahead's.
  c10::IValue saved_momentum;
  const double momentum = a.try_read("momentum", saved_momentum) ? saved_momentum.toDouble() : 0.0;
  if ((momentum > 0.0) != (momentum_ > 0.0)) {
    throw std::runtime_error("lookahead state was saved with momentum " + std::to_string(momentum) +
                             ": resume with momentum " + (momentum > 0.0 ? "> 0" : "0"));
  }
  count_ = archive_io::get_int(a, "count");
  c10::IValue saved_stopped;  // checkpoints from before until_step never stopped
  stopped_ = a.try_read("stopped", saved_stopped) && saved_stopped.toInt() != 0;
  if (stopped_) {
    slow_.clear();
    outer_.clear();
    return;
  }
  archive_io::get_tensors_into(a, "slow", slow_);
  if (momentum_ > 0.0) archive_io::get_tensors_into(a, "outer", outer_);
}

}  // namespace ht
