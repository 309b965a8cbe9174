// The CPU generator's state under its lock (ATen's generators are shared across threads).
#include "core/cpu_random_state.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

namespace ht {

at::Tensor cpu_random_state() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_cpu_random_state(const at::Tensor& state) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace ht
