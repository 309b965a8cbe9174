// Learning-rate schedules: linear warmup then cosine decay to a floor.
// Warmup starts at base_lr / warmup_steps, not 0, so the first step already trains.
#include "hybrid/core/schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace ht {

double LrSchedule::at(double base_lr, int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps)
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == Kind::Constant) return base_lr;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  const double min_lr = base_lr * min_lr_ratio;
  return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

void LrSchedule::validate() const {
  if (warmup_steps < 0)
    throw std::invalid_argument("schedule: warmup_steps = " + std::to_string(warmup_steps) + " must be >= 0");
  if (total_steps < 0)
    throw std::invalid_argument("schedule: total_steps = " + std::to_string(total_steps) +
                                " must be >= 0 (0: the run's length)");
  if (!(min_lr_ratio >= 0 && min_lr_ratio <= 1))
    throw std::invalid_argument("schedule: min_lr_ratio = " + std::to_string(min_lr_ratio) +
                                " must lie in [0, 1]: the cosine's floor as a fraction of the base rate");
}

LrSchedule::Kind parse_schedule_kind(const std::string& name) {
  if (name == "cosine") return LrSchedule::Kind::Cosine;
  if (name == "constant") return LrSchedule::Kind::Constant;
  throw std::invalid_argument("unknown lr schedule '" + name + "' (allowed: cosine, constant)");
}

}  // namespace ht
