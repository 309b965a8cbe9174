// Process setup: the intra-op thread count (LibTorch 1.13 defaults to a single thread here) and
// flush-to-zero, set explicitly so every run states how its timings were taken.
#include "hybrid/core/runtime.h"

#include <algorithm>
#include <fstream>
#include <thread>

#include <ATen/Context.h>
#include <ATen/Parallel.h>

namespace ht {

int set_threads(int n, bool flush_denormal) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(n);
  // The flag lives in each thread's MXCSR register: set it on this thread (new threads copy it)
  // and on each thread of the OpenMP pool, which OpenBLAS shares. One index per thread: with
  // grain 1 and n threads, ATen's parallel_for hands each thread exactly one index.
  at::globalContext().setFlushDenormal(flush_denormal);
  at::parallel_for(0, n, 1, [&](int64_t, int64_t) { at::globalContext().setFlushDenormal(flush_denormal); });
  return n;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace ht
