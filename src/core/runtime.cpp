// Process setup: the intra-op thread count (LibTorch 1.13 defaults to a single thread here).
// Set explicitly, so every run states how many threads its timings used.
#include "hybrid/core/runtime.h"

#include <thread>

#include <ATen/Parallel.h>

namespace ht {

int set_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(n);
  return n;
}

}  // namespace ht
