// Warmup + cosine schedule shape, and the ranges validate() enforces.
// The schedule is a pure function of the step, which exact resume and rollback rely on.
#include <gtest/gtest.h>

#include "hybrid/core/schedule.h"

namespace ht {

TEST(LrSchedule, WarmsUpLinearlyThenDecaysToTheFloor) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::Cosine;
  s.warmup_steps = 10;
  s.total_steps = 110;
  s.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(s.at(1.0, 0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(1.0, 9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(1.0, 10), 1.0);
  EXPECT_NEAR(s.at(1.0, 60), 0.55, 1e-12);  // halfway through the cosine
  EXPECT_NEAR(s.at(1.0, 110), 0.1, 1e-12);
  EXPECT_NEAR(s.at(1.0, 500), 0.1, 1e-12);  // stays at the floor past the end
  for (int i = 11; i < 110; ++i) EXPECT_LE(s.at(1.0, i), s.at(1.0, i - 1));
}

TEST(LrSchedule, ScalesTheOptimizersOwnRateAndIsConstantByDefault) {
  const LrSchedule constant;  // the default: the base rate every step, as without a scheduler
  EXPECT_DOUBLE_EQ(constant.at(0.05, 0), 0.05);
  EXPECT_DOUBLE_EQ(constant.at(0.05, 1000), 0.05);
  LrSchedule s;
  s.kind = LrSchedule::Kind::Cosine;
  s.total_steps = 100;
  EXPECT_DOUBLE_EQ(s.at(0.3, 100) / s.at(0.03, 100), 10.0);  // groups keep their ratio
}

TEST(LrSchedule, ValidateNamesTheFieldOutOfRange) {
  LrSchedule s;
  EXPECT_NO_THROW(s.validate());
  s.min_lr_ratio = 2.0;
  try {
    s.validate();
    FAIL() << "min_lr_ratio 2 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("min_lr_ratio"), std::string::npos) << e.what();
  }
  s.min_lr_ratio = -0.1;
  EXPECT_THROW(s.validate(), std::invalid_argument);
  s.min_lr_ratio = 0.1;
  s.warmup_steps = -1;
  EXPECT_THROW(s.validate(), std::invalid_argument);
  s.warmup_steps = 0;
  s.total_steps = -1;
  EXPECT_THROW(s.validate(), std::invalid_argument);
}

TEST(LrSchedule, ParsesKindsAndRejectsOthers) {
  EXPECT_EQ(parse_schedule_kind("constant"), LrSchedule::Kind::Constant);
  EXPECT_THROW(parse_schedule_kind("linear"), std::invalid_argument);
}

}  // namespace ht
