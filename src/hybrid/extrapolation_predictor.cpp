// Predictors (a): repeat the last update, or the EMA of recent updates. One buffer per parameter;
// prediction is a copy, so a predicted step costs two passes over the weights.
#include <torch/torch.h>

#include "archive_io.h"
#include "hybrid/hybrid/options.h"
#include "hybrid/hybrid/predictor.h"
#include "hybrid/hybrid/predictor_registry.h"

namespace ht {
namespace {

int64_t bytes_of(const std::vector<at::Tensor>& ts) {
  int64_t b = 0;
  for (const auto& t : ts) b += t.numel() * static_cast<int64_t>(t.element_size());
  return b;
}

void allocate_like(std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& like) {
  if (!dst.empty()) return;
  for (const auto& t : like) dst.push_back(torch::zeros_like(t, t.options().requires_grad(false)));
}

// beta = 0 is "last": the EMA then equals the latest update.
class ExtrapolationPredictor : public UpdatePredictor {
 public:
  ExtrapolationPredictor(double beta, std::string name) : beta_(beta), name_(std::move(name)) {}

  std::string name() const override { return name_; }

  void observe(const std::vector<at::Tensor>& deltas, const TrainingFeatures&) override {
    torch::NoGradGuard no_grad;
    allocate_like(avg_, deltas);
    for (size_t i = 0; i < deltas.size(); ++i) {
      // The first update of a trajectory initialises the average: no zero bias to correct.
      if (count_ == 0 || beta_ == 0.0) {
        avg_[i].copy_(deltas[i]);
      } else {
        avg_[i].mul_(beta_).add_(deltas[i], 1.0 - beta_);
      }
    }
    ++count_;
  }

  void reset_history() override { count_ = 0; }
  bool ready() const override { return count_ > 0; }

  void predict_into(std::vector<at::Tensor>& out, int64_t /*steps_ahead*/, double scale) override {
    if (!ready()) throw std::logic_error(name_ + " predictor: predict_into before any observation");
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < out.size(); ++i) at::mul_out(out[i], avg_[i], scale);
  }

  int64_t state_bytes() const override { return bytes_of(avg_); }

  void save(torch::serialize::OutputArchive& a) const override {
    archive_io::put(a, "count", count_);
    archive_io::put_tensors(a, "avg", avg_);
  }

  void load(torch::serialize::InputArchive& a) override {
    count_ = archive_io::get_int(a, "count");
    archive_io::get_tensors_into(a, "avg", avg_);
  }

 private:
  double beta_;
  std::string name_;
  std::vector<at::Tensor> avg_;  // per parameter, shaped like it
  int64_t count_ = 0;            // observations since the last reset
};

}  // namespace

std::unique_ptr<UpdatePredictor> make_last_predictor() {
  return std::make_unique<ExtrapolationPredictor>(0.0, "last");
}

std::unique_ptr<UpdatePredictor> make_ema_predictor(double beta) {
  return std::make_unique<ExtrapolationPredictor>(beta, "ema");
}

// The registry's entries (predictor_registry.cpp). State: the last update, or the EMA of updates.
PredictorSpec last_predictor_spec() {
  return {"last", "repeat the last recorded update", UpdatePredictor::Input::Updates, {},
          [](const HybridOptions&) { return make_last_predictor(); },
          [](const std::vector<int64_t>& n, const HybridOptions&) { return parameter_copies_bytes(n, 1); }, {}};
}

PredictorSpec ema_predictor_spec() {
  return {"ema", "an exponential average of recent updates", UpdatePredictor::Input::Updates,
          {{"ema_beta", 0.9, 0.0, 0.999999, false, "ema predictor (and the direction the rssm scales): EMA decay of updates"}},
          [](const HybridOptions& o) { return make_ema_predictor(o.predictor_option("ema_beta")); },
          [](const std::vector<int64_t>& n, const HybridOptions&) { return parameter_copies_bytes(n, 1); }, {}};
}

}  // namespace ht
