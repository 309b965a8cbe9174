// Lookahead (Zhang et al., NeurIPS 2019) as a step strategy: the trainer's optimizer takes k fast
// steps, then slow += alpha * (fast - slow) and the fast weights restart from slow. The inner
// optimizer's state is kept, as in the paper's default. The no-learning baseline for hybrid.
#include <torch/torch.h>

#include <chrono>
#include <stdexcept>

#include "archive_io.h"
#include "hybrid/hybrid/strategy.h"

namespace ht {

LookaheadStrategy::LookaheadStrategy(int64_t k, double alpha) : k_(k), alpha_(alpha) {
  if (k < 1) throw std::invalid_argument("lookahead: k must be >= 1, got " + std::to_string(k));
  if (!(alpha > 0.0 && alpha <= 1.0)) {
    throw std::invalid_argument("lookahead: alpha must be in (0, 1], got " + std::to_string(alpha));
  }
}

std::unique_ptr<StepStrategy> make_lookahead_strategy(int64_t k, double alpha) {
  return std::make_unique<LookaheadStrategy>(k, alpha);
}

StepRecord LookaheadStrategy::run_step(Trainer& trainer) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<at::Tensor>& params = trainer.optimizer().parameters();
  if (slow_.empty()) {
    torch::NoGradGuard no_grad;
    for (const auto& p : params) slow_.push_back(p.detach().clone());
  }
  const FullStepResult r = trainer.full_step();
  StepRecord rec;
  rec.phase = "full";
  rec.loss = r.loss;
  rec.grad_norm = r.grad_norm;
  rec.lr = trainer.optimizer().lr();
  bool synced = false;
  if (++count_ >= k_) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      slow_[i].lerp_(params[i], alpha_);  // slow += alpha * (fast - slow), no temporary
      params[i].copy_(slow_[i]);
    }
    count_ = 0;
    synced = true;
  }
  trainer.advance_step();
  rec.step = trainer.step();
  rec.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  rec.items_per_sec = rec.ms > 0.0 ? static_cast<double>(r.items) / (rec.ms / 1000.0) : 0.0;
  rec.extra["lookahead_sync"] = synced ? 1.0 : 0.0;
  return rec;
}

int64_t LookaheadStrategy::slow_bytes() const {
  int64_t b = 0;
  for (const auto& t : slow_) b += t.numel() * static_cast<int64_t>(t.element_size());
  return b;
}

void LookaheadStrategy::save(torch::serialize::OutputArchive& a) const {
  archive_io::put(a, "k", k_);
  archive_io::put(a, "alpha", alpha_);
  archive_io::put(a, "count", count_);
  archive_io::put_tensors(a, "slow", slow_);
}

void LookaheadStrategy::load(torch::serialize::InputArchive& a) {
  if (archive_io::get_int(a, "k") != k_) {
    throw std::runtime_error("lookahead state was saved with a different k: resume with the same settings");
  }
  count_ = archive_io::get_int(a, "count");
  archive_io::get_tensors_into(a, "slow", slow_);
}

}  // namespace ht
