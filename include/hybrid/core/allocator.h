// The process-wide CPU tensor allocator: counts current and peak bytes exactly, caches freed
// blocks for reuse, and can enforce a byte budget by raising an out-of-memory error.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ht {

struct AllocatorStats {
  int64_t current_bytes = 0;   // bytes in live tensors (rounded to the block size handed out)
  int64_t peak_bytes = 0;      // max of current_bytes since the last reset_peak()
  int64_t cached_bytes = 0;    // freed blocks kept for reuse
  int64_t reserved_bytes = 0;  // current + cached: what the process holds for tensors
  int64_t num_allocs = 0;      // allocations served since install
  int64_t cache_hits = 0;      // of those, served from the cache
  int64_t budget_bytes = 0;    // 0 = no budget
};

// Installs the allocator for DeviceType::CPU. Call once, first thing in main(), before any tensor
// is created (tensors made before keep their own deleter and are simply not counted).
void install_tracking_allocator();
bool tracking_allocator_installed();

AllocatorStats allocator_stats();

// Bytes the allocator hands out (and counts) for a request of `bytes`: its size-class rounding.
// The memory planner uses it so estimates round exactly as the allocator does.
int64_t allocator_block_bytes(int64_t bytes);
void reset_peak_bytes();        // peak := current
int64_t release_cached_blocks();  // returns bytes given back to the system

// 0 disables the budget. The budget counts live bytes: an allocation that would take current +
// request past it throws c10::OutOfMemoryError at once, as a GPU allocator would (cached blocks
// are not counted, and the cache is released before it would push reserved bytes past it).
void set_memory_budget(int64_t bytes);

// Turns caching off (every free goes back to malloc) - for measuring what the cache buys.
void set_allocator_caching(bool enabled);

}  // namespace ht
