// WeightAverage on its own: the exponential average it keeps and the exact swap evaluation uses.
// (The trainer's use of it - evaluation, resume, sampling - is tested in trainer_test.cpp.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/core/allocator.h"
#include "hybrid/core/weight_average.h"
#include "support/toy_problem.h"

namespace ht {

namespace {

void fill(torch::nn::Module& m, double v) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) p.fill_(v);
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

void expect_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << what << " " << i;
}

// Runs `body` with the allocator refusing any tensor past current live bytes + `headroom`, as a
// full accelerator would; the budget is lifted whatever happens.
template <typename Body>
void with_headroom(int64_t headroom, Body body) {
  release_cached_blocks();
  set_memory_budget(allocator_stats().current_bytes + headroom);
  try {
    body();
  } catch (...) {
    set_memory_budget(0);
    throw;
  }
  set_memory_budget(0);
}

// A net whose average differs from its weights: `updates` updates with noise added before each.
void drift(testing::ToyNet& net, WeightAverage& avg, int updates) {
  for (int i = 0; i < updates; ++i) {
    {
      torch::NoGradGuard no_grad;
      for (auto& p : net.parameters()) p.add_(torch::randn_like(p));
    }
    avg.update();
  }
}

}  // namespace

TEST(WeightAverage, FirstUpdateCopiesThenAveragesExponentially) {
  testing::ToyNet net;
  WeightAverage avg(net, 0.75);
  fill(net, 4.0);
  avg.update();
  for (const auto& t : avg.tensors()) EXPECT_TRUE(torch::equal(t, torch::full_like(t, 4.0)));
  fill(net, 0.0);
  avg.update();  // 0.75 * 4 + 0.25 * 0
  fill(net, 8.0);
  avg.update();  // 0.75 * 3 + 0.25 * 8
  EXPECT_EQ(avg.updates(), 3);
  for (const auto& t : avg.tensors()) EXPECT_TRUE(torch::allclose(t, torch::full_like(t, 4.25), 0, 1e-6));
  EXPECT_EQ(avg.bytes(), static_cast<int64_t>(sizeof(float)) * (2 * 32 + 32 + 32 + 1));
}

TEST(WeightAverage, SwapExchangesInPlaceAndTwiceRestoresBitForBit) {
  torch::manual_seed(3);
  testing::ToyNet net;
  WeightAverage avg(net, 0.9);
  avg.update();
  drift(net, avg, 1);
  const std::vector<at::Tensor> weights = copies(net.parameters()), average = copies(avg.tensors());
  const void* storage = net.parameters()[0].data_ptr();

  avg.swap();
  for (size_t i = 0; i < weights.size(); ++i) {
    EXPECT_TRUE(torch::equal(net.parameters()[i], average[i]));
    EXPECT_TRUE(torch::equal(avg.tensors()[i], weights[i]));
  }
  EXPECT_EQ(net.parameters()[0].data_ptr(), storage);  // in place: the optimizer's tensors
  avg.swap();
  for (size_t i = 0; i < weights.size(); ++i) {
    EXPECT_TRUE(torch::equal(net.parameters()[i], weights[i]));
    EXPECT_TRUE(torch::equal(avg.tensors()[i], average[i]));
  }
}

TEST(WeightAverage, SwapBeforeAnyUpdateChangesNothing) {
  testing::ToyNet net;
  fill(net, 1.5);
  WeightAverage avg(net, 0.9);
  avg.swap();
  for (const auto& p : net.parameters()) EXPECT_TRUE(torch::equal(p, torch::full_like(p, 1.5)));
}

// Weights moving at a steady rate, w_t = t * v: the average trails them by decay / (1 - decay)
// steps of v, the fully corrected average not at all, half the correction by half that lag.
TEST(WeightAverage, LagCorrectionTakesBackTheLagOnAStraightPath) {
  testing::ToyNet net;
  const double decay = 0.9, lag = decay / (1.0 - decay);  // 9 steps
  WeightAverage plain(net, decay), full(net, decay, 1.0), half(net, decay, 0.5);
  const int steps = 400;  // the start's transient decays as 0.9^t: gone to ~1e-17
  for (int t = 0; t <= steps; ++t) {
    fill(net, 0.01 * t);
    plain.update();
    full.update();
    half.update();
  }
  const double now = 0.01 * steps;
  auto expect_at = [](const std::vector<at::Tensor>& scored, double value, const char* which) {
    for (const auto& t : scored) EXPECT_TRUE(torch::allclose(t, torch::full_like(t, value), 0, 1e-4)) << which;
  };
  expect_at(plain.scored(), now - 0.01 * lag, "plain");
  expect_at(full.scored(), now, "full");
  expect_at(half.scored(), now - 0.5 * 0.01 * lag, "half");
  // The uncorrected average is the same in all three: the correction only changes what is scored.
  for (size_t i = 0; i < plain.tensors().size(); ++i) EXPECT_TRUE(torch::equal(plain.tensors()[i], full.tensors()[i]));
  // One more copy kept (the smooth average); plain's one.
  EXPECT_EQ(full.bytes(), 2 * plain.bytes());
}

TEST(WeightAverage, LagCorrectedSwapScoresTheCorrectionAndTwiceRestoresBitForBit) {
  torch::manual_seed(5);
  testing::ToyNet net;
  WeightAverage avg(net, 0.8, 1.0);
  drift(net, avg, 6);
  const std::vector<at::Tensor> weights = copies(net.parameters()), average = copies(avg.tensors());
  const std::vector<at::Tensor> scored = avg.scored();
  const void* storage = net.parameters()[0].data_ptr();

  avg.swap();
  for (size_t i = 0; i < weights.size(); ++i) {
    EXPECT_TRUE(torch::equal(net.parameters()[i], scored[i]));
    EXPECT_FALSE(torch::equal(scored[i], average[i]));  // the correction moved it
  }
  EXPECT_EQ(net.parameters()[0].data_ptr(), storage);
  EXPECT_THROW(avg.update(), std::logic_error);  // the average of the scored weights would be wrong
  avg.swap();
  for (size_t i = 0; i < weights.size(); ++i) {
    EXPECT_TRUE(torch::equal(net.parameters()[i], weights[i]));
    EXPECT_TRUE(torch::equal(avg.tensors()[i], average[i]));
  }
}

// Evaluation swaps the average in mid-run: if memory runs out there, training must go on from
// the weights it had. The tracking allocator's budget makes the allocation fail on demand.
TEST(WeightAverage, SwapNeedsOneParameterOfScratchAndWithoutItMovesNothing) {
  if (!tracking_allocator_installed()) GTEST_SKIP() << "needs the tracking allocator (tests/test_main.cpp)";
  torch::manual_seed(7);
  testing::ToyNet net;  // fc1.weight [32, 2] is its largest parameter
  WeightAverage avg(net, 0.9);
  drift(net, avg, 3);
  const std::vector<at::Tensor> weights = copies(net.parameters()), average = copies(avg.tensors());

  with_headroom(0, [&] { EXPECT_THROW(avg.swap(), c10::Error); });
  expect_equal(net.parameters(), weights, "weights after the failed swap");
  expect_equal(avg.tensors(), average, "average after the failed swap");

  // One block of the largest parameter's size is all the exchange takes, whatever the count.
  with_headroom(allocator_block_bytes(64 * sizeof(float)), [&] { EXPECT_NO_THROW(avg.swap()); });
  expect_equal(net.parameters(), average, "weights swapped in");
  avg.swap();
  expect_equal(net.parameters(), weights, "weights swapped back");
  expect_equal(avg.tensors(), average, "average swapped back");
}

TEST(WeightAverage, LagCorrectedSwapThatRunsOutOfMemoryHalfwayLeavesTheWeights) {
  if (!tracking_allocator_installed()) GTEST_SKIP() << "needs the tracking allocator (tests/test_main.cpp)";
  torch::manual_seed(8);
  testing::ToyNet net;
  WeightAverage avg(net, 0.8, 1.0);
  drift(net, avg, 4);
  const std::vector<at::Tensor> weights = copies(net.parameters()), average = copies(avg.tensors());
  const int64_t bytes = avg.bytes();

  // Room for the first parameter's copy (fc1.weight) and not the second's: it fails halfway.
  with_headroom(allocator_block_bytes(64 * sizeof(float)), [&] { EXPECT_THROW(avg.swap(), c10::Error); });
  expect_equal(net.parameters(), weights, "weights after the failed swap");
  expect_equal(avg.tensors(), average, "average after the failed swap");
  EXPECT_EQ(avg.bytes(), bytes);     // the copies made before the failure are gone
  EXPECT_NO_THROW(avg.update());     // not left swapped in: training goes on
  const std::vector<at::Tensor> now = copies(net.parameters());
  avg.swap();
  EXPECT_FALSE(torch::equal(net.parameters()[0], now[0]));  // the corrected average is in
  avg.swap();
  expect_equal(net.parameters(), now, "weights swapped back");
}

TEST(WeightAverage, LagCorrectionOutsideTheUnitIntervalIsRejected) {
  testing::ToyNet net;
  EXPECT_THROW(WeightAverage(net, 0.9, -0.1), std::invalid_argument);
  EXPECT_THROW(WeightAverage(net, 0.9, 1.5), std::invalid_argument);
}

TEST(WeightAverage, DecayOutsideTheOpenUnitIntervalIsRejected) {
  testing::ToyNet net;
  EXPECT_THROW(WeightAverage(net, 0.0), std::invalid_argument);
  EXPECT_THROW(WeightAverage(net, 1.0), std::invalid_argument);
  EXPECT_THROW(WeightAverage(net, -0.5), std::invalid_argument);
}

}  // namespace ht
