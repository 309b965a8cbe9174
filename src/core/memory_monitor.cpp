// Per-phase and per-run tensor-memory peaks from the allocator's counters, and the end-of-run
// breakdown. The CUDA branch is compiled only with HT_WITH_CUDA and has never run on a GPU.
#include "hybrid/core/memory_monitor.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "hybrid/core/allocator.h"
#include "hybrid/core/errors.h"
#include "hybrid/core/metrics.h"

#if defined(HT_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>
#endif

namespace ht {
namespace {

MemoryCounters read_counters(int device) {
#if defined(HT_WITH_CUDA)
  if (device >= 0) {  // UNTESTED on a GPU. Host-side bookkeeping of the caching allocator: no sync.
    namespace cca = c10::cuda::CUDACachingAllocator;
    const auto s = cca::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    constexpr size_t kAggregate = 0;  // StatType::AGGREGATE: all pools together
    MemoryCounters c;
    c.current_bytes = s.allocated_bytes[kAggregate].current;
    c.peak_bytes = s.allocated_bytes[kAggregate].peak;
    c.cached_bytes = s.reserved_bytes[kAggregate].current - s.allocated_bytes[kAggregate].current;
    return c;
  }
#endif
  (void)device;
  const AllocatorStats a = allocator_stats();
  return {a.current_bytes, a.peak_bytes, a.cached_bytes};
}

// printf into a std::string (the core does not link fmt).
__attribute__((format(printf, 1, 2))) std::string format(const char* f, ...) {
  char buf[256];
  va_list args;
  va_start(args, f);
  std::vsnprintf(buf, sizeof buf, f, args);
  va_end(args);
  return buf;
}

}  // namespace

const char* memory_phase_name(MemoryPhase phase) {
  static const char* names[kMemoryPhases] = {"forward", "backward", "optimizer", "predict"};
  return names[static_cast<int>(phase)];
}

std::string mib_text(int64_t bytes) { return format("%.1f MiB", bytes / 1048576.0); }

MemoryMonitor::MemoryMonitor(int device_index) : device_(device_index) {}

bool MemoryMonitor::uses_device_allocator() const {
#if defined(HT_WITH_CUDA)
  return device_ >= 0;
#else
  return false;
#endif
}

MemoryCounters MemoryMonitor::counters() const { return read_counters(device_); }

void MemoryMonitor::reset_allocator_peak() {
#if defined(HT_WITH_CUDA)
  if (device_ >= 0) {  // UNTESTED on a GPU
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device_));
    return;
  }
#endif
  reset_peak_bytes();
}

int64_t MemoryMonitor::release_cached() {
#if defined(HT_WITH_CUDA)
  if (device_ >= 0) {  // UNTESTED on a GPU
    const int64_t before = counters().cached_bytes;
    c10::cuda::CUDACachingAllocator::emptyCache();
    return before - counters().cached_bytes;
  }
#endif
  return release_cached_blocks();
}

int64_t MemoryMonitor::set_budget(int64_t bytes) {
  if (bytes < 0) throw OptionsError("memory budget: " + std::to_string(bytes) + " bytes must be >= 0");
#if defined(HT_WITH_CUDA)
  if (device_ >= 0) {  // UNTESTED on a GPU
    const auto index = static_cast<c10::DeviceIndex>(device_);
    size_t free_bytes = 0, total_bytes = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const double fraction = bytes > 0 ? std::min(1.0, static_cast<double>(bytes) / total_bytes) : 1.0;
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, index);
    cuda_budget_ = bytes;
    return bytes;
  }
#endif
  if (bytes > 0 && !tracking_allocator_installed())
    throw OptionsError("a memory budget needs the tracking allocator, which enforces it: call "
                       "ht::install_tracking_allocator() first thing in main(), before any tensor exists");
  set_memory_budget(bytes);
  return bytes;
}

int64_t MemoryMonitor::budget() const {
#if defined(HT_WITH_CUDA)
  if (device_ >= 0) return cuda_budget_;
#endif
  return allocator_stats().budget_bytes;
}

MemoryMonitor::Scope::Scope(MemoryMonitor& monitor, MemoryPhase phase) : monitor_(monitor), phase_(phase) {
  monitor_.enter(phase_);
}
MemoryMonitor::Scope::~Scope() { monitor_.leave(phase_); }

void MemoryMonitor::fold() {
  const int64_t peak = counters().peak_bytes;
  step_peak_ = std::max(step_peak_, peak);
  for (int p = 0; p < kMemoryPhases; ++p)
    if (open_[p] > 0) step_phase_peak_[p] = std::max(step_phase_peak_[p], peak);
}

void MemoryMonitor::enter(MemoryPhase phase) {
  // What happened before belongs to the phases already open; this phase starts from "now".
  fold();
  ++open_[index(phase)];
  reset_allocator_peak();
}

void MemoryMonitor::leave(MemoryPhase phase) {
  // No reset here: an enclosing phase still needs this peak, and the next enter() folds it first.
  fold();
  --open_[index(phase)];
}

void MemoryMonitor::begin_step() {
  reset_allocator_peak();
  step_peak_ = counters().current_bytes;
  std::fill(std::begin(step_phase_peak_), std::end(step_phase_peak_), -1);
}

int64_t MemoryMonitor::step_peak_bytes() const { return std::max(step_peak_, counters().peak_bytes); }

void MemoryMonitor::end_step(StepRecord& rec) {
  fold();
  const MemoryCounters now = counters();
  rec.tensor_bytes = now.current_bytes;
  rec.cached_bytes = now.cached_bytes;
  rec.peak_bytes = step_peak_;
  rec.peak_forward_bytes = step_phase_peak_[index(MemoryPhase::Forward)];
  rec.peak_backward_bytes = step_phase_peak_[index(MemoryPhase::Backward)];
  rec.peak_optimizer_bytes = step_phase_peak_[index(MemoryPhase::Optimizer)];
  rec.peak_predict_bytes = step_phase_peak_[index(MemoryPhase::Predict)];
  ++steps_;
  if (step_peak_ >= run_peak_) {
    run_peak_ = step_peak_;
    run_peak_resident_ = now.current_bytes;
  }
  for (int p = 0; p < kMemoryPhases; ++p) run_phase_peak_[p] = std::max(run_phase_peak_[p], step_phase_peak_[p]);
}

std::string MemorySummary::to_string() const {
  std::string s = format("memory over %lld steps: peak %s of tensors", static_cast<long long>(steps),
                         mib_text(peak_bytes).c_str());
  if (budget_bytes > 0)
    s += format(" (%.1f%% of the %s budget)", 100.0 * peak_bytes / budget_bytes, mib_text(budget_bytes).c_str());
  s += "\n  resident: parameters " + mib_text(parameter_bytes) + ", gradients " + mib_text(gradient_bytes) +
       ", optimizer state " + mib_text(optimizer_bytes) + ", strategy " + mib_text(strategy_bytes) +
       (average_bytes > 0 ? ", weight average " + mib_text(average_bytes) : std::string()) + ", other (data in memory, allocator rounding) " + mib_text(other_bytes);
  s += "\n  activations and temporaries at the peak: " + mib_text(activation_bytes);
  s += "\n  peak by phase:";
  for (int p = 0; p < kMemoryPhases; ++p) {
    s += std::string(p ? ", " : " ") + memory_phase_name(static_cast<MemoryPhase>(p)) + " " +
         (phase_peak_bytes[p] < 0 ? std::string("-") : mib_text(phase_peak_bytes[p]));
  }
  return s;
}

}  // namespace ht
