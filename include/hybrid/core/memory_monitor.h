// Tensor-memory accounting for the training loop: current, peak and cached bytes, and the peak
// of each part of a step (forward, backward, optimizer, predict), read from allocator counters.
#pragma once

#include <cstdint>
#include <string>

namespace ht {

struct StepRecord;

enum class MemoryPhase { Forward = 0, Backward, Optimizer, Predict };
constexpr int kMemoryPhases = 4;
const char* memory_phase_name(MemoryPhase phase);

// "12.3 MiB": how memory figures read in messages.
std::string mib_text(int64_t bytes);

// What the allocator that holds the training tensors says right now.
struct MemoryCounters {
  int64_t current_bytes = 0;  // live tensors
  int64_t peak_bytes = 0;     // max of current since the last peak reset
  int64_t cached_bytes = 0;   // freed blocks the allocator keeps for reuse
};

// Per-step peaks come from resetting the allocator's peak counter where a phase begins and
// reading it where it ends: two atomic operations, no device synchronisation, no allocation.
// Not thread-safe: one monitor per training loop.
class MemoryMonitor {
 public:
  // device_index < 0 reads the CPU tracking allocator (allocator.h). >= 0 reads that CUDA
  // device's caching allocator, in builds compiled with HT_WITH_CUDA only (untested on a GPU);
  // other builds fall back to the CPU counters and uses_device_allocator() says so.
  explicit MemoryMonitor(int device_index = -1);
  bool uses_device_allocator() const;

  // Marks the extent of one phase. Phases nest: a phase inside another counts towards both.
  class [[nodiscard]] Scope {
   public:
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    friend class MemoryMonitor;
    Scope(MemoryMonitor& monitor, MemoryPhase phase);
    MemoryMonitor& monitor_;
    MemoryPhase phase_;
  };
  Scope phase(MemoryPhase phase) { return Scope(*this, phase); }

  void begin_step();
  // Writes tensor_bytes, peak_bytes, cached_bytes and the per-phase peaks (-1 where a phase did
  // not run) into rec, and folds the step into the run's figures.
  void end_step(StepRecord& rec);

  MemoryCounters counters() const;
  int64_t step_peak_bytes() const;  // peak since begin_step(), so far
  int64_t release_cached();         // gives the allocator's cached blocks back; returns bytes
  // Makes the allocator that holds this monitor's tensors refuse to go past `bytes` (0: no
  // budget), and returns the budget in force. CPU: the tracking allocator's budget, which must
  // be installed (OptionsError otherwise). CUDA (HT_WITH_CUDA builds): the caching allocator's
  // memory fraction of the device. budget() reads it back.
  int64_t set_budget(int64_t bytes);
  int64_t budget() const;

  // Over all steps so far.
  int64_t steps() const { return steps_; }
  int64_t run_peak_bytes() const { return run_peak_; }
  int64_t run_peak_resident_bytes() const { return run_peak_resident_; }  // live after that step
  int64_t run_phase_peak_bytes(MemoryPhase phase) const { return run_phase_peak_[index(phase)]; }

 private:
  static int index(MemoryPhase p) { return static_cast<int>(p); }
  void enter(MemoryPhase phase);
  void leave(MemoryPhase phase);
  // Moves the allocator's peak since its last reset into every open phase and the step.
  void fold();
  void reset_allocator_peak();

  int device_;
  int64_t cuda_budget_ = 0;
  int open_[kMemoryPhases] = {0, 0, 0, 0};  // nesting depth of each phase
  int64_t step_peak_ = 0;
  int64_t step_phase_peak_[kMemoryPhases] = {-1, -1, -1, -1};
  int64_t steps_ = 0;
  int64_t run_peak_ = 0;
  int64_t run_peak_resident_ = 0;
  int64_t run_phase_peak_[kMemoryPhases] = {-1, -1, -1, -1};
};

// Where the memory went, for the end of a run. Resident figures are sizes of the tensors
// themselves; activations are what the highest step peak held beyond what stays live between
// steps.
struct MemorySummary {
  int64_t parameter_bytes = 0;  // model parameters and buffers
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;  // optimizer state (moments, momentum)
  int64_t strategy_bytes = 0;   // step strategy: hybrid snapshot, buffers, predictor; Lookahead
  int64_t average_bytes = 0;    // the weight average (TrainerOptions::average_decay)
  int64_t other_bytes = 0;      // other tensors live between steps (data, caches of the app)
  int64_t activation_bytes = 0; // peak minus what was live after that step: activations, temporaries
  int64_t peak_bytes = 0;       // highest step peak of the run
  int64_t phase_peak_bytes[kMemoryPhases] = {-1, -1, -1, -1};  // -1: never ran
  int64_t budget_bytes = 0;     // 0: none
  int64_t steps = 0;
  std::string to_string() const;  // a few lines, for the logger or a terminal
};

}  // namespace ht
