// Delayed verification's yardstick: the probe loss plain training would have reached after a
// jump's window, guessed from the probe losses of the states recorded before the jump.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ht {

struct PlainGuess {
  double before = 0.0;  // the trend's loss at the jump (the last loss itself with two states)
  double after = 0.0;   // plain's, `window` steps later
};

// losses: oldest first, `interval` steps apart, the last at the jump (>= 2 of them). A
// least-squares line through them - through log(loss) where all are positive, so plain keeps a
// ratio per step (a loss curve flattens; a straight line would overshoot below zero on a fast
// one) - carried on over `window` steps. A rising trend counts as flat: the verdict does not
// let a jump be worse because plain might have got worse.
PlainGuess guess_plain(const std::vector<double>& losses, int64_t interval, int64_t window);

// "0.46 before the jump, 0.49 a recording earlier" (two states) or "0.46 before the jump by the
// trend of 0.52 0.50 0.49 0.47" (more): for the verdict's log line.
std::string describe_trend(const std::vector<double>& losses, const PlainGuess& guess);

}  // namespace ht
