// Delayed verification's yardstick: the probe loss plain training would have reached after a
// jump's window, guessed from the probe losses of the states recorded before the jump.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace ht {

struct PlainGuess {
  double before = 0.0;  // the trend's loss at the jump (the last loss itself with two states)
  double after = 0.0;   // plain's, `window` steps later
  // Set by guess_plain_power: plain falls as (t / step)^-exponent from `before` at step `step`.
  double exponent = NAN;
  int64_t step = 0;
  // The steps plain, carried on this way from the jump, needs to reach `loss` (past the window
  // where loss < after). NaN where plain was not expected to improve.
  double steps_to(double loss, int64_t window) const;
};

// losses: oldest first, `interval` steps apart, the last at the jump (>= 2 of them). A
// least-squares line through them - through log(loss) where all are positive, so plain keeps a
// ratio per step (a loss curve flattens; a straight line would overshoot below zero on a fast
// one) - carried on over `window` steps. A rising trend counts as flat: the verdict does not
// let a jump be worse because plain might have got worse.
PlainGuess guess_plain(const std::vector<double>& losses, int64_t interval, int64_t window);

// Plain's probe loss as a power of its step, L(t) = L(t0) (t / t0)^-exponent, fitted to the
// losses of states at `steps` (least squares of log loss on log step). A loss curve flattens
// that way, where a ratio per step (the trend above) holds the recent pace over the window; fitted
// to plain's own first states, it is one number for the run instead of a slope through two noisy
// points per verdict. NaN unless all losses are positive and the fit falls.
double fit_power_exponent(const std::vector<double>& losses, const std::vector<int64_t>& steps);

// The loss at `step` of the curve a * t^-exponent through several states' losses: log a is the
// mean of log(loss) + exponent * log(t) over them, so their noise is averaged where one state's
// loss would carry all of it. NaN unless every loss is positive and every step >= 1.
double power_level(const std::vector<double>& losses, const std::vector<int64_t>& steps, double exponent, int64_t step);

// `before` at step `step` (>= 1), carried on by that power over `window` steps.
PlainGuess guess_plain_power(double before, double exponent, int64_t step, int64_t window);

// "0.46 before the jump, 0.49 a recording earlier" (two states) or "0.46 before the jump by the
// trend of 0.52 0.50 0.49 0.47" (more): for the verdict's log line.
std::string describe_trend(const std::vector<double>& losses, const PlainGuess& guess);

}  // namespace ht
