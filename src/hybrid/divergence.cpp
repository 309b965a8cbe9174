// Divergence signals. The spike test compares a loss with the window of recent real-step losses;
// the oscillation test looks at successive verified losses of one predict phase.
#include "hybrid/divergence.h"

#include <torch/torch.h>

#include <cmath>
#include <sstream>

#include "archive_io.h"

namespace ht {

LossWindow::LossWindow(int64_t capacity) : values_(static_cast<size_t>(capacity), 0.0) {}

void LossWindow::push(double x) {
  values_[static_cast<size_t>(head_)] = x;
  head_ = (head_ + 1) % capacity();
  if (count_ < capacity()) ++count_;
}

void LossWindow::clear() {
  head_ = 0;
  count_ = 0;
}

double LossWindow::at(int64_t i) const {
  const int64_t oldest = (head_ - count_ + capacity()) % capacity();
  return values_[static_cast<size_t>((oldest + i) % capacity())];
}

double LossWindow::mean() const {
  if (count_ == 0) return NAN;
  double s = 0.0;
  for (int64_t i = 0; i < count_; ++i) s += at(i);
  return s / static_cast<double>(count_);
}

double LossWindow::stddev() const {
  if (count_ < 2) return NAN;
  const double m = mean();
  double s = 0.0;
  for (int64_t i = 0; i < count_; ++i) s += (at(i) - m) * (at(i) - m);
  return std::sqrt(s / static_cast<double>(count_ - 1));
}

void LossWindow::save(torch::serialize::OutputArchive& archive, const std::string& key) const {
  archive_io::put(archive, key + "_values", values_);
  archive_io::put(archive, key + "_head", head_);
  archive_io::put(archive, key + "_count", count_);
}

void LossWindow::load(torch::serialize::InputArchive& archive, const std::string& key) {
  std::vector<double> v = archive_io::get_doubles(archive, key + "_values");
  if (v.size() != values_.size()) {
    throw std::runtime_error("hybrid state: loss window '" + key + "' holds " + std::to_string(v.size()) +
                             " values, options.loss_window is " + std::to_string(values_.size()));
  }
  values_ = std::move(v);
  head_ = archive_io::get_int(archive, key + "_head");
  count_ = archive_io::get_int(archive, key + "_count");
}

DivergenceDetector::DivergenceDetector(int64_t window, double spike_zscore, double grad_factor)
    : real_(window), verified_(window), spike_zscore_(spike_zscore), grad_factor_(grad_factor) {}

std::string DivergenceDetector::observe_real_step(double loss, double grad_norm, bool check) {
  if (std::isfinite(loss)) real_.push(loss);
  const std::string why = check ? check_grad(grad_norm) : "";
  if (why.empty() && std::isfinite(grad_norm)) {
    // A plain average at first, so a few early steps do not leave a biased EMA behind.
    ++grad_count_;
    const double beta = std::max(1.0 / static_cast<double>(grad_count_), 0.05);
    grad_ema_ += beta * (grad_norm - grad_ema_);
  }
  return why;
}

void DivergenceDetector::observe_verified(double loss) { verified_.push(loss); }

double DivergenceDetector::zscore(double loss) const {
  const double sd = real_.stddev();
  if (!(sd > 0.0)) return 0.0;
  return (loss - real_.mean()) / sd;
}

std::string DivergenceDetector::check_loss(double loss) const {
  if (!std::isfinite(loss)) return "non-finite loss";
  if (real_.size() >= 8) {
    const double z = zscore(loss);
    if (z > spike_zscore_) {
      std::ostringstream os;
      os << "loss spike (z = " << z << " over the last " << real_.size() << " real steps)";
      return os.str();
    }
  }
  return "";
}

std::string DivergenceDetector::check_grad(double grad_norm) const {
  if (!std::isfinite(grad_norm)) return "non-finite gradient norm";
  if (grad_count_ >= 8 && grad_norm > grad_factor_ * grad_ema_) {
    std::ostringstream os;
    os << "gradient norm " << grad_norm << " above " << grad_factor_ << "x its average " << grad_ema_;
    return os.str();
  }
  return "";
}

std::string DivergenceDetector::check_oscillation() const {
  const int64_t n = verified_.size();
  if (n < 5) return "";
  // The last four differences must alternate in sign and not shrink: an overshooting jump.
  double prev = 0.0;
  for (int64_t i = n - 4; i < n; ++i) {
    const double d = verified_.at(i) - verified_.at(i - 1);
    if (i > n - 4 && (d * prev >= 0.0 || std::abs(d) < std::abs(prev))) return "";
    prev = d;
  }
  return "loss oscillates with growing amplitude over the last verifications";
}

void DivergenceDetector::save(torch::serialize::OutputArchive& archive) const {
  real_.save(archive, "real");
  verified_.save(archive, "verified");
  archive_io::put(archive, "grad_ema", grad_ema_);
  archive_io::put(archive, "grad_count", grad_count_);
}

void DivergenceDetector::load(torch::serialize::InputArchive& archive) {
  real_.load(archive, "real");
  verified_.load(archive, "verified");
  grad_ema_ = archive_io::get_double(archive, "grad_ema");
  grad_count_ = archive_io::get_int(archive, "grad_count");
}

}  // namespace ht
