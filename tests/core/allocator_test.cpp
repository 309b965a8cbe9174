// The tracking allocator: exact byte counts, peak, cache reuse and release, budget enforcement.
// Every memory figure the project reports is read from this allocator, so its counts must be exact.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/core/allocator.h"

namespace ht {

TEST(Allocator, CountsLiveTensorBytesExactly) {
  ASSERT_TRUE(tracking_allocator_installed());
  const int64_t before = allocator_stats().current_bytes;
  {
    auto t = torch::empty({1024, 1024});  // 4 MiB: a size class of its own
    EXPECT_EQ(allocator_stats().current_bytes - before, 4 << 20);
  }
  EXPECT_EQ(allocator_stats().current_bytes, before);
}

TEST(Allocator, PeakFollowsTheLargestMomentAndResets) {
  reset_peak_bytes();
  const int64_t base = allocator_stats().current_bytes;
  {
    auto a = torch::empty({4 << 20}, torch::kUInt8);
    auto b = torch::empty({4 << 20}, torch::kUInt8);
  }
  EXPECT_GE(allocator_stats().peak_bytes - base, 8 << 20);
  reset_peak_bytes();
  EXPECT_EQ(allocator_stats().peak_bytes, allocator_stats().current_bytes);
}

TEST(Allocator, ReusesFreedBlocksAndReleasesThem) {
  { auto t = torch::empty({3 << 20}, torch::kUInt8); }
  const auto s0 = allocator_stats();
  EXPECT_GE(s0.cached_bytes, 3 << 20);
  { auto t = torch::empty({3 << 20}, torch::kUInt8); }
  EXPECT_GT(allocator_stats().cache_hits, s0.cache_hits);
  EXPECT_GE(release_cached_blocks(), 3 << 20);
  EXPECT_EQ(allocator_stats().cached_bytes, 0);
}

TEST(Allocator, BudgetRaisesOutOfMemoryLikeAGpu) {
  const int64_t base = allocator_stats().current_bytes;
  set_memory_budget(base + (8 << 20));
  auto fits = torch::empty({4 << 20}, torch::kUInt8);
  EXPECT_THROW(torch::empty({8 << 20}, torch::kUInt8), c10::OutOfMemoryError);
  set_memory_budget(0);
  EXPECT_NO_THROW(torch::empty({8 << 20}, torch::kUInt8));
}

TEST(Allocator, CountsAllocationsFromWorkerThreads) {
  // A parallel op allocates its output on the calling thread but may use scratch in workers;
  // either way the books must balance once everything is freed.
  const int64_t before = allocator_stats().current_bytes;
  {
    auto a = torch::randn({512, 512});
    auto c = torch::mm(a, a).relu_().sum(0);
    EXPECT_GT(allocator_stats().current_bytes, before);
  }
  EXPECT_EQ(allocator_stats().current_bytes, before);
}

}  // namespace ht

namespace ht {

TEST(Allocator, ServesRawAllocationsAsUsedByConvolutions) {
  // raw_allocate() requires the DataPtr's context to be its data pointer.
  c10::Allocator* alloc = c10::GetAllocator(c10::DeviceType::CPU);
  const int64_t before = allocator_stats().current_bytes;
  void* p = alloc->raw_allocate(1 << 20);
  EXPECT_GE(allocator_stats().current_bytes - before, 1 << 20);
  alloc->raw_deallocate(p);
  EXPECT_EQ(allocator_stats().current_bytes, before);
  auto y = torch::conv2d(torch::randn({2, 3, 16, 16}), torch::randn({4, 3, 3, 3}));
  EXPECT_EQ(y.size(1), 4);
}

}  // namespace ht
