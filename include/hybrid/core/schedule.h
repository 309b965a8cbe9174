// Learning-rate schedules: linear warmup then cosine decay to a floor, or constant.
// A pure function of the step, so a resumed or rewound run needs no schedule state.
#pragma once

#include <cstdint>
#include <string>

namespace ht {

struct LrSchedule {
  enum class Kind { Constant, Cosine };
  Kind kind = Kind::Cosine;
  double base_lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1000;  // cosine reaches min_lr here
  double min_lr_ratio = 0.1;   // floor as a fraction of base_lr

  double at(int64_t step) const;  // lr for 0-based step `step`
  // Throws std::invalid_argument naming the field: base_lr >= 0, warmup_steps >= 0,
  // 0 <= min_lr_ratio <= 1 (above 1 the "decay" would raise the rate, below 0 turn it negative).
  void validate() const;
};

LrSchedule::Kind parse_schedule_kind(const std::string& name);  // "cosine" | "constant"

}  // namespace ht
