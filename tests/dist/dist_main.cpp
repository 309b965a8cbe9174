// Entry point of test_dist: the GoogleTest suite, or, when HT_DIST_WORKER is set, one rank of a
// data-parallel scenario started by a test (one thread per rank, as a launcher would set).
#include <gtest/gtest.h>

#include <cstdlib>

#include "dist_worker.h"
#include "hybrid/core/allocator.h"
#include "hybrid/core/runtime.h"

int main(int argc, char** argv) {
  ht::install_tracking_allocator();
  if (const char* scenario = std::getenv("HT_DIST_WORKER")) {
    ht::set_threads(1);
    return ht::testing::run_dist_worker(scenario);
  }
  ht::set_threads(2);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
