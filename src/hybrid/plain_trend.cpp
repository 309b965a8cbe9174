// Delayed verification's yardstick: a least-squares trend through the probe losses of the
// states before a jump, carried on over the window (see plain_trend.h).
#include "plain_trend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace ht {
namespace {

// The least-squares line y = mean_y + slope (x - mean_x); x not all equal.
struct Line {
  double slope = 0.0, mean_x = 0.0, mean_y = 0.0;
  double at(double x) const { return mean_y + slope * (x - mean_x); }
};

Line least_squares(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  Line l;
  for (size_t i = 0; i < x.size(); ++i) {
    l.mean_x += x[i] / n;
    l.mean_y += y[i] / n;
  }
  double sxx = 0.0, sxy = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - l.mean_x) * (x[i] - l.mean_x);
    sxy += (x[i] - l.mean_x) * (y[i] - l.mean_y);
  }
  l.slope = sxx > 0.0 ? sxy / sxx : NAN;
  return l;
}

}  // namespace

PlainGuess guess_plain(const std::vector<double>& losses, int64_t interval, int64_t window) {
  const size_t n = losses.size();
  if (n < 2 || interval < 1) throw std::invalid_argument("guess_plain: needs >= 2 losses and interval >= 1");
  const bool in_log = std::all_of(losses.begin(), losses.end(), [](double l) { return l > 0.0; });
  std::vector<double> x(n), y(n);  // x: steps from the jump, -(n - 1) x interval .. 0
  for (size_t i = 0; i < n; ++i) {
    x[i] = -static_cast<double>((n - 1 - i) * static_cast<size_t>(interval));
    y[i] = in_log ? std::log(losses[i]) : losses[i];
  }
  const Line line = least_squares(x, y);
  const double slope = line.slope;  // per step; n >= 2 distinct x
  const double descent = std::min(0.0, slope) * static_cast<double>(window);
  PlainGuess g;
  if (n == 2) {  // the line through both: the last loss as measured
    g.before = losses.back();
    g.after = in_log ? g.before * std::exp(descent) : g.before + descent;
  } else {
    const double at_jump = line.at(0.0);
    g.before = in_log ? std::exp(at_jump) : at_jump;
    g.after = in_log ? std::exp(at_jump + descent) : at_jump + descent;
  }
  return g;
}

double PlainGuess::steps_to(double loss, int64_t window) const {
  if (!(after < before)) return NAN;
  if (std::isfinite(exponent)) return static_cast<double>(step) * (std::pow(before / loss, 1.0 / exponent) - 1.0);
  const double w = static_cast<double>(window);
  return before > 0.0 && after > 0.0 && loss > 0.0 ? w * std::log(loss / before) / std::log(after / before)
                                                   : w * (before - loss) / (before - after);
}

double fit_power_exponent(const std::vector<double>& losses, const std::vector<int64_t>& steps) {
  const size_t n = losses.size();
  if (n < 2 || steps.size() != n) throw std::invalid_argument("fit_power_exponent: needs >= 2 losses, one step each");
  std::vector<double> x(n), y(n);
  for (size_t i = 0; i < n; ++i) {
    if (!(losses[i] > 0.0) || steps[i] < 1) return NAN;
    x[i] = std::log(static_cast<double>(steps[i]));
    y[i] = std::log(losses[i]);
  }
  const double exponent = -least_squares(x, y).slope;
  return exponent > 0.0 && std::isfinite(exponent) ? exponent : NAN;
}

double power_level(const std::vector<double>& losses, const std::vector<int64_t>& steps, double exponent, int64_t step) {
  if (losses.empty() || steps.size() != losses.size() || step < 1)
    throw std::invalid_argument("power_level: needs >= 1 loss, one step each, and step >= 1");
  double log_a = 0.0;
  for (size_t i = 0; i < losses.size(); ++i) {
    if (!(losses[i] > 0.0) || steps[i] < 1) return NAN;
    log_a += std::log(losses[i]) + exponent * std::log(static_cast<double>(steps[i]));
  }
  log_a /= static_cast<double>(losses.size());
  return std::exp(log_a - exponent * std::log(static_cast<double>(step)));
}

PlainGuess guess_plain_power(double before, double exponent, int64_t step, int64_t window) {
  if (!(exponent > 0.0) || step < 1) throw std::invalid_argument("guess_plain_power: needs exponent > 0 and step >= 1");
  PlainGuess g;
  g.before = before;
  g.exponent = exponent;
  g.step = step;
  g.after = before * std::pow(static_cast<double>(step + window) / static_cast<double>(step), -exponent);
  return g;
}

std::string describe_trend(const std::vector<double>& losses, const PlainGuess& guess) {
  char buf[64];
  auto five = [&](double v) {
    std::snprintf(buf, sizeof buf, "%.5f", v);
    return std::string(buf);
  };
  if (std::isfinite(guess.exponent)) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", guess.exponent);
    return five(guess.before) + " before the jump, plain falling as step^-" + b;
  }
  if (losses.size() == 2) return five(losses[1]) + " before the jump, " + five(losses[0]) + " a recording earlier";
  std::string s = five(guess.before) + " before the jump by the trend of";
  for (double l : losses) s += " " + five(l);
  return s;
}

}  // namespace ht
