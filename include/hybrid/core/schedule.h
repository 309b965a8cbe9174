// Learning-rate schedules: linear warmup then cosine decay to a floor, or constant.
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
};

LrSchedule::Kind parse_schedule_kind(const std::string& name);  // "cosine" | "constant"

}  // namespace ht
