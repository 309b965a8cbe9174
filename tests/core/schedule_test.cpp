// Warmup + cosine schedule shape, and the ranges validate() enforces.
// The schedule is a pure function of the step, which exact resume and rollback rely on.
#include <gtest/gtest.h>

#include "hybrid/core/schedule.h"

namespace ht {

TEST(LrSchedule, WarmsUpLinearlyThenDecaysToTheFloor) {
  LrSchedule s;
  s.base_lr = 1.0;
  s.warmup_steps = 10;
  s.total_steps = 110;
  s.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // halfway through the cosine
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  EXPECT_NEAR(s.at(500), 0.1, 1e-12);  // stays at the floor past the end
  for (int i = 11; i < 110; ++i) EXPECT_LE(s.at(i), s.at(i - 1));
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
}

TEST(LrSchedule, ParsesKindsAndRejectsOthers) {
  EXPECT_EQ(parse_schedule_kind("constant"), LrSchedule::Kind::Constant);
  EXPECT_THROW(parse_schedule_kind("linear"), std::invalid_argument);
}

}  // namespace ht
