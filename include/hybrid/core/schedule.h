// Learning-rate schedules: linear warmup then cosine decay to a floor, or constant.
// A pure function of the step and the optimizer's own base rate, so nothing overrides that rate.
#pragma once

#include <cstdint>
#include <string>

namespace ht {

// The schedule scales each parameter group's base rate (the rate its optimizer was built with):
// the optimizer owns the rate, the schedule only its shape over the run. The default is a
// constant rate, as a torch::optim optimizer trains without a scheduler.
struct LrSchedule {
  enum class Kind { Constant, Cosine };
  Kind kind = Kind::Constant;
  int64_t warmup_steps = 0;    // linear warmup from base / warmup_steps
  int64_t total_steps = 0;     // cosine reaches the floor here; 0: the run's length (max_steps)
  double min_lr_ratio = 0.1;   // cosine floor as a fraction of the base rate

  // The rate of 0-based step `step` for a group whose base rate is base_lr.
  double at(double base_lr, int64_t step) const;
  // Throws std::invalid_argument naming the field: warmup_steps >= 0, total_steps >= 0,
  // 0 <= min_lr_ratio <= 1 (above 1 the "decay" would raise the rate, below 0 turn it negative).
  void validate() const;
};

LrSchedule::Kind parse_schedule_kind(const std::string& name);  // "cosine" | "constant"

}  // namespace ht
