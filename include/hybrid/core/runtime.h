// Process setup shared by the CLI, benchmarks and tests: the intra-op thread count.
// (The tracking allocator is installed through hybrid/core/allocator.h.)
#pragma once

namespace ht {

// n <= 0 means all cores. Sets ATen's intra-op pool (this LibTorch defaults to 1 thread).
int set_threads(int n);

}  // namespace ht
