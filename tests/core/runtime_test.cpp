// set_threads: the thread count it reports and flush-to-zero on the calling thread and on every
// thread of ATen's pool (where OpenBLAS and the kernels run), switched on and off.
#include <gtest/gtest.h>

#include <atomic>
#include <limits>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "hybrid/core/runtime.h"

namespace {

// The product of two normal floats whose exact value is subnormal: 0 under flush-to-zero.
bool product_flushed() {
  volatile float a = std::numeric_limits<float>::min();  // smallest normal, 1.18e-38
  volatile float b = 0.25f;
  const float product = a * b;
  return product == 0.0f;
}

// Index i of `flushed` is product_flushed() on whichever pool thread ran index i.
std::vector<int> flushed_on_pool(int threads) {
  std::vector<int> flushed(threads, -1);
  at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) flushed[i] = product_flushed() ? 1 : 0;
  });
  return flushed;
}

class Runtime : public ::testing::Test {
 protected:
  void TearDown() override { ht::set_threads(2); }  // the suite's setting (test_main.cpp)
};

TEST_F(Runtime, FlushDenormalReachesEveryPoolThreadAndComesOffAgain) {
  EXPECT_EQ(ht::set_threads(2, true), 2);
  EXPECT_TRUE(product_flushed());
  EXPECT_EQ(flushed_on_pool(2), (std::vector<int>{1, 1}));
  // A tensor op on subnormal input (64 x the smallest subnormal, built from its bits so no
  // conversion flushes it first): DAZ reads it as zero.
  const auto tiny = torch::full({4096}, 64, torch::kInt32).view(torch::kFloat32);
  EXPECT_EQ((tiny * 1.0f).count_nonzero().item<int64_t>(), 0);

  ht::set_threads(2, false);
  EXPECT_FALSE(product_flushed());
  EXPECT_EQ(flushed_on_pool(2), (std::vector<int>{0, 0}));
  EXPECT_EQ((tiny * 1.0f).count_nonzero().item<int64_t>(), 4096);
}

TEST_F(Runtime, ZeroThreadsMeansEveryCore) {
  EXPECT_GE(ht::set_threads(0), 1);
  EXPECT_EQ(ht::set_threads(1), 1);
  EXPECT_EQ(at::get_num_threads(), 1);
}

}  // namespace
