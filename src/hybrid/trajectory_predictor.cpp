// Trajectory predictors: they watch the weights over a recorded stretch, not single updates.
// Measured on minibatch training with Adam, one update is mostly noise and oscillation across
// the valley; over tens of steps those cancel and the drift along the valley floor remains.
// "mean" continues that drift from the current weights. "regression" fits a line through the
// stretch: on a noisy problem the current weights sit off the line by the noise, so the first
// predicted step returns to the line (what weight averaging does) and later ones follow it.
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "archive_io.h"
#include "hybrid/core/errors.h"
#include "hybrid/hybrid/options.h"
#include "hybrid/hybrid/predictor.h"
#include "hybrid/hybrid/predictor_registry.h"

namespace ht {
namespace {

void allocate_like(std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& like) {
  if (!dst.empty()) return;
  for (const auto& t : like) dst.push_back(torch::zeros_like(t, t.options().requires_grad(false)));
}

int64_t bytes_of(const std::vector<at::Tensor>& ts) {
  int64_t b = 0;
  for (const auto& t : ts) b += t.numel() * static_cast<int64_t>(t.element_size());
  return b;
}

// Shared plumbing: weights in, one or two buffers per parameter, save/load.
class TrajectoryPredictor : public UpdatePredictor {
 public:
  Input input() const override { return Input::Weights; }
  void observe(const std::vector<at::Tensor>&, const TrainingFeatures&) override {
    throw std::logic_error(name() + " predictor observes weights, not updates");
  }
  void reset_history() override {
    n_ = 0;
    ready_ = false;
  }
  bool ready() const override { return ready_; }

  int64_t state_bytes() const override { return bytes_of(a_) + bytes_of(b_); }

  void save(torch::serialize::OutputArchive& ar) const override {
    archive_io::put(ar, "n", n_);
    archive_io::put(ar, "ready", ready_);
    archive_io::put_tensors(ar, "a", a_);
    archive_io::put_tensors(ar, "b", b_);
  }
  void load(torch::serialize::InputArchive& ar) override {
    n_ = archive_io::get_int(ar, "n");
    ready_ = archive_io::get_bool(ar, "ready");
    archive_io::get_tensors_into(ar, "a", a_);
    archive_io::get_tensors_into(ar, "b", b_);
  }

 protected:
  void check_ready(const char* what) const {
    if (!ready_) throw std::logic_error(name() + " predictor: " + what + " before a stretch was ended");
  }

  std::vector<at::Tensor> a_, b_;  // per parameter; meaning depends on the predictor
  int64_t n_ = 0;                  // weights observed in this stretch
  bool ready_ = false;
};

class MeanPredictor : public TrajectoryPredictor {
 public:
  std::string name() const override { return "mean"; }

  void observe_weights(const std::vector<at::Tensor>& w, const TrainingFeatures&) override {
    torch::NoGradGuard no_grad;
    allocate_like(a_, w);
    // Only the first weights of the stretch are kept: one copy per stretch, nothing per step.
    if (n_ == 0) {
      for (size_t i = 0; i < w.size(); ++i) a_[i].copy_(w[i]);
    }
    ++n_;
  }

  void end_stretch(const std::vector<at::Tensor>& w) override {
    if (n_ < 2) throw std::logic_error("mean predictor: a stretch needs at least 2 weights, got " + std::to_string(n_));
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < w.size(); ++i) a_[i].sub_(w[i]).div_(-static_cast<double>(n_ - 1));  // (w - w_1) / (n - 1)
    ready_ = true;
  }

  void predict_into(std::vector<at::Tensor>& out, int64_t, double scale) override {
    check_ready("predict_into");
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < out.size(); ++i) at::mul_out(out[i], a_[i], scale);
  }
  void add_prediction_to(std::vector<at::Tensor>& params, int64_t, double scale) override {
    check_ready("add_prediction_to");
    for (size_t i = 0; i < params.size(); ++i) params[i].add_(a_[i], scale);
  }
};

// Predictors whose prediction is a line: a_ = the offset from the current weights back to the
// line (taken once, on step 1), b_ = the slope per step.
class LinePredictor : public TrajectoryPredictor {
 public:
  // Step 1 returns to the line and moves `scale` steps along it; later steps follow the slope.
  // The return is not scaled: it removes the noise, it does not extrapolate.
  void predict_into(std::vector<at::Tensor>& out, int64_t steps_ahead, double scale) override {
    check_ready("predict_into");
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < out.size(); ++i) {
      if (steps_ahead == 1) {
        at::add_out(out[i], a_[i], b_[i], scale);
      } else {
        at::mul_out(out[i], b_[i], scale);
      }
    }
  }
  void add_prediction_to(std::vector<at::Tensor>& params, int64_t steps_ahead, double scale) override {
    check_ready("add_prediction_to");
    for (size_t i = 0; i < params.size(); ++i) {
      if (steps_ahead == 1) params[i].add_(a_[i]);
      params[i].add_(b_[i], scale);
    }
  }
};

class RegressionPredictor : public LinePredictor {
 public:
  std::string name() const override { return "regression"; }

  void observe_weights(const std::vector<at::Tensor>& w, const TrainingFeatures&) override {
    torch::NoGradGuard no_grad;
    allocate_like(a_, w);
    allocate_like(b_, w);
    // Running sums S0 = sum_t w_t and S1 = sum_t t w_t (t = 0..n-1): two in-place passes a step.
    for (size_t i = 0; i < w.size(); ++i) {
      if (n_ == 0) {
        a_[i].copy_(w[i]);
        b_[i].zero_();
      } else {
        a_[i].add_(w[i]);
        b_[i].add_(w[i], static_cast<double>(n_));
      }
    }
    ++n_;
  }

  void end_stretch(const std::vector<at::Tensor>& w) override {
    if (n_ < 2) throw std::logic_error("regression predictor: a stretch needs at least 2 weights, got " + std::to_string(n_));
    // Least squares w(t) = mean + slope (t - tm): slope = (S1 - tm S0) / Stt. Then the offset of
    // the line at the last observed t from the current weights: line(n-1) - w.
    const double n = static_cast<double>(n_);
    const double tm = (n - 1.0) / 2.0;
    const double stt = n * (n * n - 1.0) / 12.0;  // sum_t (t - tm)^2
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < w.size(); ++i) {
      b_[i].sub_(a_[i], tm).div_(stt);                  // slope per step
      a_[i].div_(n).add_(b_[i], (n - 1.0) - tm).sub_(w[i]);  // line(n-1) - w
    }
    ready_ = true;
  }
};

// "drift": the regression line, continued only where its slope is statistically clear. Per
// coordinate, the slope's t-statistic over the stretch (slope / its standard error from the
// line's residuals) must exceed `tstat`; elsewhere the drift is indistinguishable from the noise,
// and extrapolating it is what raised the loss with "mean" and "regression" (4 repeated Adam
// updates move every noisy coordinate coherently). The first step still returns to the line.
class DriftPredictor : public LinePredictor {
 public:
  explicit DriftPredictor(double tstat) : tstat_(tstat) {}
  std::string name() const override { return "drift"; }

  void observe_weights(const std::vector<at::Tensor>& w, const TrainingFeatures&) override {
    torch::NoGradGuard no_grad;
    allocate_like(a_, w);
    allocate_like(b_, w);
    allocate_like(first_, w);
    allocate_like(sq_, w);
    // Sums of d_t = w_t - w_0 (centred on the first weights so float32 keeps the small moves):
    // a = sum d, b = sum t d, sq = sum d^2.
    const double t = static_cast<double>(n_);
    for (size_t i = 0; i < w.size(); ++i) {
      if (n_ == 0) {
        first_[i].copy_(w[i]);
        a_[i].zero_();
        b_[i].zero_();
        sq_[i].zero_();
      } else {
        const at::Tensor d = w[i] - first_[i];  // one tensor's temporary, not the model's
        a_[i].add_(d);
        b_[i].add_(d, t);
        sq_[i].addcmul_(d, d);
      }
    }
    ++n_;
  }

  void end_stretch(const std::vector<at::Tensor>& w) override {
    if (n_ < 4) throw std::logic_error("drift predictor: a stretch needs at least 4 weights, got " + std::to_string(n_));
    const double n = static_cast<double>(n_);
    const double tm = (n - 1.0) / 2.0;
    const double stt = n * (n * n - 1.0) / 12.0;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < w.size(); ++i) {
      at::Tensor& slope = b_[i];
      at::Tensor& sum = a_[i];
      slope.sub_(sum, tm).div_(stt);
      // Residual sum of squares of the line: sum (d - mean)^2 - slope^2 stt.
      at::Tensor rss = (sq_[i] - sum * sum / n - slope * slope * stt).clamp_min_(0.0);
      // |slope| / se > tstat  <=>  slope^2 (n - 2) stt > tstat^2 rss.
      const at::Tensor clear = (slope * slope * ((n - 2.0) * stt)).gt_(rss.mul_(tstat_ * tstat_));
      slope.mul_(clear);
      // line(n-1) - w = w_0 + mean + slope (n - 1 - tm) - w.
      sum.div_(n).add_(first_[i]).add_(slope, (n - 1.0) - tm).sub_(w[i]);
    }
    ready_ = true;
  }

  int64_t state_bytes() const override { return TrajectoryPredictor::state_bytes() + bytes_of(first_) + bytes_of(sq_); }
  void save(torch::serialize::OutputArchive& ar) const override {
    TrajectoryPredictor::save(ar);
    archive_io::put_tensors(ar, "first", first_);
    archive_io::put_tensors(ar, "sq", sq_);
  }
  void load(torch::serialize::InputArchive& ar) override {
    TrajectoryPredictor::load(ar);
    archive_io::get_tensors_into(ar, "first", first_);
    archive_io::get_tensors_into(ar, "sq", sq_);
  }

 private:
  double tstat_;
  std::vector<at::Tensor> first_, sq_;  // w_0 and sum d^2 over the stretch
};

}  // namespace

std::unique_ptr<UpdatePredictor> make_mean_predictor() { return std::make_unique<MeanPredictor>(); }
std::unique_ptr<UpdatePredictor> make_regression_predictor() { return std::make_unique<RegressionPredictor>(); }
std::unique_ptr<UpdatePredictor> make_drift_predictor(double tstat) { return std::make_unique<DriftPredictor>(tstat); }

// The registry's entries (predictor_registry.cpp). State: the weights at the stretch's start (a_),
// plus the regression's slope, plus drift's first weights and squared residuals.
PredictorSpec mean_predictor_spec() {
  return {"mean", "the mean update over the last recorded stretch", UpdatePredictor::Input::Weights, {},
          [](const HybridOptions&) { return make_mean_predictor(); },
          [](const std::vector<int64_t>& n, const HybridOptions&) { return parameter_copies_bytes(n, 1); }, {}};
}

PredictorSpec regression_predictor_spec() {
  return {"regression", "a line fitted through the recorded weights", UpdatePredictor::Input::Weights, {},
          [](const HybridOptions&) { return make_regression_predictor(); },
          [](const std::vector<int64_t>& n, const HybridOptions&) { return parameter_copies_bytes(n, 2); }, {}};
}

PredictorSpec drift_predictor_spec() {
  return {"drift", "the regression line, continued only where its slope stands out of the noise", UpdatePredictor::Input::Weights,
          {{"drift_tstat", 3.0, 0.0, 1000.0, false, "drift predictor: t-statistic a coordinate's slope needs to be continued"}},
          [](const HybridOptions& o) { return make_drift_predictor(o.predictor_option("drift_tstat")); },
          [](const std::vector<int64_t>& n, const HybridOptions&) { return parameter_copies_bytes(n, 4); },
          [](const HybridOptions& o) {
            if (o.full_steps < 4)
              throw OptionsError("HybridOptions.full_steps = " + std::to_string(o.full_steps) +
                                 ": must be >= 4 with predictor \"drift\" (its slope test fits a line through at "
                                 "least 4 recorded weights): raise full_steps or choose another predictor");
          }};
}

}  // namespace ht
