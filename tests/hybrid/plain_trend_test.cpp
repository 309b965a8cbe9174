// Delayed verification's yardstick: plain's expected probe loss after a window, from a trend
// through the losses of the states before the jump (two states: the ratio of the last two).
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "hybrid/plain_trend.h"

TEST(PlainTrend, TwoStatesCarryOnTheirRatioPerStep) {
  // 0.5 -> 0.4 over a 200-step interval, carried on over a 251-step window.
  const ht::PlainGuess g = ht::guess_plain({0.5, 0.4}, 200, 251);
  EXPECT_EQ(g.before, 0.4);
  EXPECT_NEAR(g.after, 0.4 * std::pow(0.4 / 0.5, 251.0 / 200.0), 1e-12);
}

TEST(PlainTrend, AnExponentialCurveIsContinuedExactly) {
  // loss(x) = 0.3 exp(-x / 1000) + nothing: log-linear, so the fit is exact at any length.
  auto curve = [](double x) { return 0.3 * std::exp(-x / 1000.0); };
  for (int n = 2; n <= 5; ++n) {
    std::vector<double> losses;
    for (int i = n - 1; i >= 0; --i) losses.push_back(curve(-200.0 * i));
    const ht::PlainGuess g = ht::guess_plain(losses, 200, 251);
    EXPECT_NEAR(g.before, curve(0.0), 1e-12) << n;
    EXPECT_NEAR(g.after, curve(251.0), 1e-12) << n;
  }
}

TEST(PlainTrend, ANoisyLastStateDoesNotHideTheDescent) {
  // The last state happens to score above the one before it: two states expect no progress,
  // four still see the descent of the run - and put the jump's start on the trend, not the blip.
  const std::vector<double> losses = {0.50, 0.47, 0.42, 0.44};
  const ht::PlainGuess two = ht::guess_plain({0.42, 0.44}, 200, 251);
  EXPECT_EQ(two.after, 0.44);
  const ht::PlainGuess four = ht::guess_plain(losses, 200, 251);
  EXPECT_LT(four.before, 0.44);
  EXPECT_LT(four.after, four.before);
  EXPECT_GT(four.after, 0.30);  // a carried-on trend, not a plunge
}

TEST(PlainTrend, ARisingTrendCountsAsFlat) {
  const ht::PlainGuess g = ht::guess_plain({0.40, 0.41, 0.42, 0.43}, 200, 251);
  EXPECT_NEAR(g.before, 0.43, 1e-3);
  EXPECT_EQ(g.after, g.before);
}

TEST(PlainTrend, LossesThatAreNotAllPositiveFollowAStraightLine) {
  // A negative log-likelihood can be negative: the same drop per step instead of the same ratio.
  const ht::PlainGuess two = ht::guess_plain({-1.0, -2.0}, 10, 5);
  EXPECT_EQ(two.before, -2.0);
  EXPECT_DOUBLE_EQ(two.after, -2.5);
  const ht::PlainGuess three = ht::guess_plain({0.5, -0.5, -1.5}, 10, 5);
  EXPECT_NEAR(three.before, -1.5, 1e-12);
  EXPECT_NEAR(three.after, -2.0, 1e-12);
}

TEST(PlainTrend, OneStateIsNoTrend) {
  EXPECT_THROW(ht::guess_plain({0.5}, 200, 251), std::invalid_argument);
}

TEST(PlainTrend, TheLogLineNamesWhatTheVerdictSaw) {
  EXPECT_EQ(ht::describe_trend({0.5, 0.4}, ht::guess_plain({0.5, 0.4}, 10, 5)),
            "0.40000 before the jump, 0.50000 a recording earlier");
  const std::vector<double> four = {0.5, 0.45, 0.42, 0.4};
  const std::string s = ht::describe_trend(four, ht::guess_plain(four, 10, 5));
  EXPECT_NE(s.find("before the jump by the trend of 0.50000 0.45000 0.42000 0.40000"), std::string::npos) << s;
}

TEST(PlainTrend, APowerOfTheStepIsFittedExactlyAndCarriedOn) {
  // loss(t) = 2 t^-0.4: five states 200 steps apart recover b, and plain carried on from step
  // 1000 over 251 steps lands on the curve; steps_to inverts it (the window for plain's own
  // loss, more for a lower one).
  auto curve = [](double t) { return 2.0 * std::pow(t, -0.4); };
  std::vector<double> losses;
  std::vector<int64_t> steps;
  for (int64_t t = 200; t <= 1000; t += 200) {
    steps.push_back(t);
    losses.push_back(curve(static_cast<double>(t)));
  }
  const double b = ht::fit_power_exponent(losses, steps);
  EXPECT_NEAR(b, 0.4, 1e-12);
  const ht::PlainGuess g = ht::guess_plain_power(curve(1000.0), b, 1000, 251);
  EXPECT_NEAR(g.after, curve(1251.0), 1e-12);
  EXPECT_NEAR(g.steps_to(g.after, 251), 251.0, 1e-9);
  EXPECT_NEAR(g.steps_to(curve(2000.0), 251), 1000.0, 1e-9);
  EXPECT_NE(ht::describe_trend({0.5, 0.4}, g).find("plain falling as step^-0.400"), std::string::npos);
}

TEST(PlainTrend, ThePowersLevelAveragesTheStatesNoise) {
  // On the curve 2 t^-0.4 itself any states give the curve's loss at the step; states scattered
  // by x1.1 and /1.1 around it average back onto it (in log), where the last alone is 10 % off.
  auto curve = [](double t) { return 2.0 * std::pow(t, -0.4); };
  EXPECT_NEAR(ht::power_level({curve(600), curve(800), curve(1000)}, {600, 800, 1000}, 0.4, 1000), curve(1000), 1e-12);
  EXPECT_NEAR(ht::power_level({curve(800) * 1.1, curve(1000) / 1.1}, {800, 1000}, 0.4, 1000), curve(1000), 1e-12);
  EXPECT_NEAR(ht::power_level({curve(1000)}, {1000}, 0.4, 1251), curve(1251), 1e-12);
  EXPECT_TRUE(std::isnan(ht::power_level({0.4, -0.1}, {800, 1000}, 0.4, 1000)));
  EXPECT_THROW(ht::power_level({}, {}, 0.4, 1000), std::invalid_argument);
}

TEST(PlainTrend, NoPowerIsFittedToACurveThatDoesNotFall) {
  EXPECT_TRUE(std::isnan(ht::fit_power_exponent({0.40, 0.41, 0.42}, {200, 400, 600})));
  EXPECT_TRUE(std::isnan(ht::fit_power_exponent({0.40, -0.1, 0.3}, {200, 400, 600})));  // not all positive
  EXPECT_THROW(ht::fit_power_exponent({0.4}, {200}), std::invalid_argument);
  EXPECT_THROW(ht::guess_plain_power(0.4, 0.0, 1000, 251), std::invalid_argument);
}

TEST(PlainTrend, TheTrendsStepsToInvertItsGuess) {
  const ht::PlainGuess g = ht::guess_plain({0.5, 0.4}, 200, 251);
  EXPECT_NEAR(g.steps_to(g.after, 251), 251.0, 1e-9);
  EXPECT_TRUE(std::isnan(ht::guess_plain({0.4, 0.5}, 200, 251).steps_to(0.3, 251)));  // no progress expected
}
