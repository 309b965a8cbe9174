// Lookahead (Zhang et al., NeurIPS 2019) as a step strategy: the trainer's optimizer takes k fast
// steps, then slow += alpha * (fast - slow) and the fast weights restart from slow; with outer
// momentum it is SNOO (2025). Inner optimizer state is kept. The no-learning baselines for hybrid.
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "archive_io.h"
#include "hybrid/hybrid/lookahead.h"

namespace ht {

LookaheadStrategy::LookaheadStrategy(const LookaheadOptions& o) : options_(o) {
  // Named LookaheadOptions.<field>: the CLI shows them as its keys, lookahead.<field>.
  auto fail = [](const std::string& what) { throw std::invalid_argument("LookaheadOptions." + what); };
  if (o.k < 1) fail("k must be >= 1, got " + std::to_string(o.k));
  if (!(o.alpha > 0.0 && o.alpha <= 1.0)) fail("alpha must be in (0, 1], got " + std::to_string(o.alpha));
  if (!(o.momentum >= 0.0 && o.momentum < 1.0)) fail("momentum must be in [0, 1), got " + std::to_string(o.momentum));
  if (o.until_step < 0) fail("until_step must be >= 0 (0 = to the end), got " + std::to_string(o.until_step));
  if (o.start_step < 0) fail("start_step must be >= 0 (0 = from the first step), got " + std::to_string(o.start_step));
  if (o.until_step > 0 && o.until_step <= o.start_step) {
    fail("until_step (" + std::to_string(o.until_step) + ") must be after start_step (" + std::to_string(o.start_step) +
         "), or 0 for no hand-over");
  }
  if (o.late_step < 0) fail("late_step must be >= 0 (0 = one momentum throughout), got " + std::to_string(o.late_step));
  if (o.bias_correction && o.momentum == 0.0) {
    fail("bias_correction needs LookaheadOptions.momentum > 0 (SNOO): set it, or set bias_correction to false");
  }
  if (o.late_step == 0) return;
  if (o.momentum == 0.0) {
    fail("late_step needs LookaheadOptions.momentum > 0 (SNOO): set it, or set late_step to 0");
  }
  if (!(o.late_momentum >= 0.0 && o.late_momentum < 1.0)) {
    fail("late_momentum must be in [0, 1), got " + std::to_string(o.late_momentum));
  }
  const double late_alpha = o.alpha * (1.0 - o.late_momentum) / (1.0 - o.momentum);
  if (late_alpha > 1.0) {
    fail("late_momentum " + std::to_string(o.late_momentum) + " would need alpha " + std::to_string(late_alpha) +
         " > 1 to keep the steady outer step alpha / (1 - momentum): raise late_momentum or lower alpha");
  }
}

LookaheadStrategy::LookaheadStrategy(int64_t k, double alpha, double momentum, int64_t until_step)
    : LookaheadStrategy(LookaheadOptions{k, alpha, momentum, until_step}) {}

std::unique_ptr<StepStrategy> make_lookahead_strategy(const LookaheadOptions& options) {
  return std::make_unique<LookaheadStrategy>(options);
}

std::unique_ptr<StepStrategy> make_lookahead_strategy(int64_t k, double alpha, double momentum, int64_t until_step) {
  return make_lookahead_strategy(LookaheadOptions{k, alpha, momentum, until_step});
}

double LookaheadStrategy::alpha() const {
  if (!late_) return options_.alpha;
  return options_.alpha * (1.0 - options_.late_momentum) / (1.0 - options_.momentum);
}

// b's steady state is s / (1 - momentum); rescaled to the late momentum's, the outer step
// alpha * (momentum * b + s) is continuous across the switch when the pseudo-gradients are.
void LookaheadStrategy::switch_to_late_momentum() {
  torch::NoGradGuard no_grad;
  const double scale = (1.0 - options_.momentum) / (1.0 - options_.late_momentum);
  late_ = true;
  if (momentum() == 0.0) {
    outer_.clear();  // Lookahead from here on: no buffer
    return;
  }
  for (auto& b : outer_) b.mul_(scale);
}

StepRecord LookaheadStrategy::run_step(Trainer& trainer) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<at::Tensor>& params = trainer.optimizer().parameters();
  if (!started_ && trainer.step() >= options_.start_step) {
    started_ = true;  // the first period starts here, from these weights
    count_ = 0;
  }
  const bool active = started_ && !stopped_;
  if (active && slow_.empty()) {
    torch::NoGradGuard no_grad;
    for (const auto& p : params) slow_.push_back(p.detach().clone());
  }
  if (active && momentum() > 0.0 && outer_.empty()) {
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
  if (active && ++count_ >= options_.k) {
    // This synchronisation ends step trainer.step() + 1.
    if (!late_ && options_.late_step > 0 && trainer.step() + 1 >= options_.late_step) switch_to_late_momentum();
    ++syncs_;
    const double momentum = this->momentum();
    const double alpha =
        options_.bias_correction ? this->alpha() / (1.0 - std::pow(momentum, static_cast<double>(syncs_ + 1)))
                                 : this->alpha();
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      if (momentum == 0.0) {
        slow_[i].lerp_(params[i], alpha);  // slow += alpha * (fast - slow), no temporary
      } else {
        // The fast weights are overwritten below, so they hold the pseudo-gradient meanwhile.
        const at::Tensor& s = params[i];
        s.sub_(slow_[i]).neg_();                        // s = slow - fast
        outer_[i].mul_(momentum).add_(s);              // b = momentum * b + s
        slow_[i].sub_(s, alpha).sub_(outer_[i], alpha * momentum);  // Nesterov
      }
      params[i].copy_(slow_[i]);
    }
    count_ = 0;
    synced = true;
  }
  trainer.advance_step();
  // Handed over right after a synchronisation, where the weights are the slow ones: from here
  // on these are plain steps with the inner optimizer's state as it is.
  if (synced && options_.until_step > 0 && trainer.step() >= options_.until_step) {
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
  archive_io::put(a, "k", options_.k);
  archive_io::put(a, "alpha", options_.alpha);
  archive_io::put(a, "momentum", options_.momentum);
  archive_io::put(a, "count", count_);
  archive_io::put(a, "syncs", syncs_);
  archive_io::put(a, "bias_correction", static_cast<int64_t>(options_.bias_correction));
  archive_io::put(a, "started", static_cast<int64_t>(started_));
  archive_io::put(a, "stopped", static_cast<int64_t>(stopped_));
  archive_io::put(a, "late", static_cast<int64_t>(late_));
  if (!started_ || stopped_) return;  // no buffers yet, or none left
  archive_io::put_tensors(a, "slow", slow_);
  if (momentum() > 0.0) archive_io::put_tensors(a, "outer", outer_);
}

void LookaheadStrategy::load(torch::serialize::InputArchive& a) {
  // (Another strategy's state never gets here: the checkpoint registry compares names first.)
  if (archive_io::get_int(a, "k") != options_.k) {
    throw std::runtime_error("lookahead state was saved with a different k: resume with the same settings");
  }
  // Checkpoints from before SNOO hold no momentum: they are plain Lookahead's.
  c10::IValue saved_momentum;
  const double saved = a.try_read("momentum", saved_momentum) ? saved_momentum.toDouble() : 0.0;
  if ((saved > 0.0) != (options_.momentum > 0.0)) {
    throw std::runtime_error("lookahead state was saved with momentum " + std::to_string(saved) +
                             ": resume with momentum " + (saved > 0.0 ? "> 0" : "0"));
  }
  count_ = archive_io::get_int(a, "count");
  c10::IValue saved_syncs, saved_correction;  // nor had checkpoints from before bias_correction
  syncs_ = a.try_read("syncs", saved_syncs) ? saved_syncs.toInt() : 0;
  const bool corrected = a.try_read("bias_correction", saved_correction) && saved_correction.toInt() != 0;
  if (corrected != options_.bias_correction) {
    throw std::runtime_error(std::string("lookahead state was saved with bias_correction ") +
                             (corrected ? "on" : "off") + ": resume with the same bias_correction");
  }
  c10::IValue saved_started;  // checkpoints from before start_step started at step 0
  started_ = !a.try_read("started", saved_started) || saved_started.toInt() != 0;
  c10::IValue saved_stopped;  // checkpoints from before until_step never stopped
  stopped_ = a.try_read("stopped", saved_stopped) && saved_stopped.toInt() != 0;
  c10::IValue saved_late;  // nor had checkpoints from before late_step switched
  late_ = a.try_read("late", saved_late) && saved_late.toInt() != 0;
  if (late_ && options_.late_step == 0) {
    throw std::runtime_error("lookahead state was saved after its switch to late_momentum: resume with the same late_step");
  }
  if (!started_ || stopped_) {
    slow_.clear();
    outer_.clear();
    return;
  }
  archive_io::get_tensors_into(a, "slow", slow_);
  if (momentum() > 0.0) archive_io::get_tensors_into(a, "outer", outer_);
}

}  // namespace ht
