// Process setup shared by the CLI, benchmarks and tests: the intra-op thread count and how the
// CPU treats subnormal floats. (The tracking allocator is installed through hybrid/core/allocator.h.)
#pragma once

#include <string>

namespace ht {

// n <= 0 means all cores. Sets ATen's intra-op pool (this LibTorch defaults to 1 thread) and, with
// flush_denormal, makes every thread of it (and the threads they start later) flush subnormal
// floats to zero (FTZ/DAZ): on an Intel Xeon a byte-level GPT's steps otherwise slow down as it
// learns, up to 4.35x (BENCHMARKS.md section 1). Call it before other threads start. Returns the
// thread count.
int set_threads(int n, bool flush_denormal = true);

// The CPU's model name from /proc/cpuinfo ("unknown" where there is none): every benchmark log
// prints it, since figures are compared only when measured on the same machine.
std::string cpu_model();

}  // namespace ht
