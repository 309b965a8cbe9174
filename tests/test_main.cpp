// GoogleTest entry point shared by every test binary: installs the tracking allocator first
// (memory tests read it) and pins the thread count so results are reproducible.
#include <gtest/gtest.h>

#include "hybrid/core/allocator.h"
#include "hybrid/core/runtime.h"

int main(int argc, char** argv) {
  ht::install_tracking_allocator();
  ht::set_threads(2);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
