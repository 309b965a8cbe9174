// EvalSchedule: evaluations fall due every n steps and wait for verified weights, including
// across a rollback that takes the step count back before the step they fell due at.
#include <gtest/gtest.h>

#include <vector>

#include "core/eval_schedule.h"

namespace {

// Steps as (step count, verified) after each call; returns the steps evaluated at.
std::vector<int64_t> evaluated(ht::EvalSchedule s, const std::vector<std::pair<int64_t, bool>>& steps) {
  std::vector<int64_t> at;
  for (const auto& [step, verified] : steps)
    if (s.evaluate_now(step, verified)) at.push_back(step);
  return at;
}

}  // namespace

TEST(EvalSchedule, EveryNStepsWhenVerified) {
  std::vector<std::pair<int64_t, bool>> steps;
  for (int64_t i = 1; i <= 10; ++i) steps.push_back({i, true});
  EXPECT_EQ(evaluated(ht::EvalSchedule(4), steps), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(evaluated(ht::EvalSchedule(4, 10), steps), (std::vector<int64_t>{4, 8, 10}));
  EXPECT_TRUE(evaluated(ht::EvalSchedule(0), steps).empty());
}

TEST(EvalSchedule, ADueEvaluationWaitsForVerifiedWeightsAndRunsOnce) {
  // Steps 4-6 are predicted and unverified; the check at 6 passes.
  const auto at = evaluated(ht::EvalSchedule(4), {{3, true}, {4, false}, {5, false}, {6, true}, {7, true}, {8, true}});
  EXPECT_EQ(at, (std::vector<int64_t>{6, 8}));
}

TEST(EvalSchedule, ARollbackBeforeTheDueStepMakesItWaitUntilTrainingIsBackThere) {
  // Predicted steps 3-5 are undone at the check: the count goes back to 3 (verified), and the
  // evaluation due at 4 runs at step 4 on real weights, not at 3.
  const auto at = evaluated(ht::EvalSchedule(4), {{3, false}, {4, false}, {5, false}, {3, true}, {4, true}, {5, true}});
  EXPECT_EQ(at, (std::vector<int64_t>{4}));
}

TEST(EvalSchedule, AWaitingEvaluationCarriesOverToAScheduleThatRestoresIt) {
  // What a checkpoint written at step 5 (unverified) holds, and a resumed run does with it.
  ht::EvalSchedule before(4);
  EXPECT_FALSE(before.evaluate_now(4, false));
  EXPECT_FALSE(before.evaluate_now(5, false));
  EXPECT_EQ(before.due(), 4);
  ht::EvalSchedule resumed(4);
  resumed.restore_due(before.due());
  EXPECT_EQ(evaluated(resumed, {{6, true}, {7, true}}), (std::vector<int64_t>{6}));
}
