// Delayed verification's yardstick: a least-squares trend through the probe losses of the
// states before a jump, carried on over the window (see plain_trend.h).
#include "plain_trend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace ht {

PlainGuess guess_plain(const std::vector<double>& losses, int64_t interval, int64_t window) {
  const size_t n = losses.size();
  if (n < 2 || interval < 1) throw std::invalid_argument("guess_plain: needs >= 2 losses and interval >= 1");
  const bool in_log = std::all_of(losses.begin(), losses.end(), [](double l) { return l > 0.0; });
  std::vector<double> x(n), y(n);  // x: steps from the jump, -(n - 1) x interval .. 0
  double mx = 0.0, my = 0.0;
  for (size_t i = 0; i < n; ++i) {
    x[i] = -static_cast<double>((n - 1 - i) * static_cast<size_t>(interval));
    y[i] = in_log ? std::log(losses[i]) : losses[i];
    mx += x[i] / static_cast<double>(n);
    my += y[i] / static_cast<double>(n);
  }
  double sxx = 0.0, sxy = 0.0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  const double slope = sxy / sxx;  // per step; sxx > 0 with n >= 2 distinct x
  const double descent = std::min(0.0, slope) * static_cast<double>(window);
  PlainGuess g;
  if (n == 2) {  // the line through both: the last loss as measured
    g.before = losses.back();
    g.after = in_log ? g.before * std::exp(descent) : g.before + descent;
  } else {
    const double at_jump = my - slope * mx;
    g.before = in_log ? std::exp(at_jump) : at_jump;
    g.after = in_log ? std::exp(at_jump + descent) : at_jump + descent;
  }
  return g;
}

std::string describe_trend(const std::vector<double>& losses, const PlainGuess& guess) {
  char buf[64];
  auto five = [&](double v) {
    std::snprintf(buf, sizeof buf, "%.5f", v);
    return std::string(buf);
  };
  if (losses.size() == 2) return five(losses[1]) + " before the jump, " + five(losses[0]) + " a recording earlier";
  std::string s = five(guess.before) + " before the jump by the trend of";
  for (double l : losses) s += " " + five(l);
  return s;
}

}  // namespace ht
