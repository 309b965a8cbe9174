// Counting, caching CPU allocator installed through c10::SetAllocator: the single source of
// tensor-memory figures. Caching avoids glibc's mmap/munmap churn on large step temporaries.
#include "hybrid/core/allocator.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

// LibTorch 2.3 made Allocator::allocate non-const and added a pure virtual copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define HT_ALLOCATE_CONST
#define HT_ALLOCATOR_HAS_COPY_DATA 1
#else
#define HT_ALLOCATE_CONST const
#define HT_ALLOCATOR_HAS_COPY_DATA 0
#endif

namespace ht {
namespace {

// Every block carries a 64-byte header (keeps the 64-byte alignment ATen expects) holding its
// size class, so the deleter - a plain function pointer - knows what it frees. The DataPtr's
// context is the data pointer itself, as raw_allocate() (used by oneDNN convolutions) requires.
constexpr size_t kHeader = 64;
constexpr size_t kAlign = 64;
// Blocks below this go straight to malloc/free: glibc serves them from its arenas cheaply.
constexpr size_t kMinCached = 16 * 1024;
constexpr double kMiB = 1024.0 * 1024.0;

// Rounds to a size class: powers of two split into 4 steps, so reuse works across the slightly
// different sizes a training step asks for while waste stays under 25 %.
size_t size_class(size_t n) {
  if (n < kMinCached) return (n + kAlign - 1) / kAlign * kAlign;
  size_t p = 1;
  while (p < n) p <<= 1;
  const size_t step = p / 8;  // classes at 5/8, 6/8, 7/8, 8/8 of p
  return (n + step - 1) / step * step;
}

class TrackingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) HT_ALLOCATE_CONST override {
    const size_t cls = size_class(n == 0 ? 1 : n);
    const int64_t budget = budget_.load();
    if (budget > 0 && current_.load() + static_cast<int64_t>(cls) > budget) throw_oom(cls, budget);
    void* base = take_from_cache(cls);
    if (base == nullptr) base = fresh_block(cls);
    *static_cast<size_t*>(base) = cls;
    account(static_cast<int64_t>(cls));
    num_allocs_.fetch_add(1, std::memory_order_relaxed);
    void* data = static_cast<char*>(base) + kHeader;
    return {data, data, &TrackingAllocator::deleter, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &TrackingAllocator::deleter; }
#if HT_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);  // host memory: a memcpy
  }
#endif

  static void deleter(void* ctx);
  void give_back(void* base);

  AllocatorStats stats() const {
    AllocatorStats s;
    s.current_bytes = current_.load();
    s.peak_bytes = peak_.load();
    s.cached_bytes = cached_.load();
    s.reserved_bytes = s.current_bytes + s.cached_bytes;
    s.num_allocs = num_allocs_.load();
    s.cache_hits = cache_hits_.load();
    s.budget_bytes = budget_.load();
    return s;
  }
  void reset_peak() { peak_.store(current_.load()); }
  void set_budget(int64_t b) { budget_.store(b); }
  void set_caching(bool on) {
    caching_.store(on);
    if (!on) release();
  }

  int64_t release() const {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& kv : cache_)
        for (void* b : kv.second) blocks.push_back(b);
      cache_.clear();
    }
    int64_t freed = 0;
    for (void* b : blocks) {
      freed += static_cast<int64_t>(*static_cast<size_t*>(b));
      std::free(b);
    }
    cached_.fetch_sub(freed);
    return freed;
  }

 private:
  void* take_from_cache(size_t cls) const {
    if (cls < kMinCached) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(cls);
    if (it == cache_.end() || it->second.empty()) return nullptr;
    void* b = it->second.back();
    it->second.pop_back();
    cached_.fetch_sub(static_cast<int64_t>(cls));
    cache_hits_.fetch_add(1, std::memory_order_relaxed);
    return b;
  }

  void* fresh_block(size_t cls) const {
    const int64_t budget = budget_.load();
    if (budget > 0 && current_.load() + cached_.load() + static_cast<int64_t>(cls) > budget) {
      release();  // the cache must not push the process past its budget
    }
    void* b = nullptr;
    if (posix_memalign(&b, kAlign, cls + kHeader) != 0 || b == nullptr) {
      release();
      if (posix_memalign(&b, kAlign, cls + kHeader) != 0 || b == nullptr) throw_oom(cls, budget);
    }
    return b;
  }

  [[noreturn]] void throw_oom(size_t cls, int64_t budget) const {
    char msg[200];
    int n = std::snprintf(msg, sizeof msg, "hybrid-trainer: out of memory: tried to allocate %.1f MiB with %.1f MiB in use",
                          cls / kMiB, current_.load() / kMiB);
    if (n > 0 && n < static_cast<int>(sizeof msg)) {
      if (budget > 0) std::snprintf(msg + n, sizeof msg - n, " and a budget of %.1f MiB", budget / kMiB);
      else std::snprintf(msg + n, sizeof msg - n, " (the system refused the memory)");
    }
    // {}: the empty backtrace, a std::string before LibTorch 2.4 and a null pointer since.
    throw c10::OutOfMemoryError(msg, {});
  }

  void account(int64_t bytes) const {
    const int64_t now = current_.fetch_add(bytes) + bytes;
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }

  mutable std::mutex mu_;
  mutable std::unordered_map<size_t, std::vector<void*>> cache_;
  mutable std::atomic<int64_t> current_{0}, peak_{0}, cached_{0};
  mutable std::atomic<int64_t> num_allocs_{0}, cache_hits_{0}, budget_{0};
  std::atomic<bool> caching_{true};
};

// Static lifetime: tensors may be freed during static destruction, after main() returns.
TrackingAllocator& instance() {
  static TrackingAllocator* alloc = new TrackingAllocator();
  return *alloc;
}
std::atomic<bool> g_installed{false};

void TrackingAllocator::deleter(void* data) { instance().give_back(static_cast<char*>(data) - kHeader); }

void TrackingAllocator::give_back(void* base) {
  const size_t cls = *static_cast<size_t*>(base);
  current_.fetch_sub(static_cast<int64_t>(cls));
  if (cls >= kMinCached && caching_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    cache_[cls].push_back(base);
    cached_.fetch_add(static_cast<int64_t>(cls));
    return;
  }
  std::free(base);
}

}  // namespace

int64_t allocator_block_bytes(int64_t bytes) {
  return static_cast<int64_t>(size_class(static_cast<size_t>(bytes < 1 ? 1 : bytes)));
}

void install_tracking_allocator() {
  if (g_installed.exchange(true)) return;
  // Priority above the default CPU allocator's so later default registrations do not win.
  c10::SetAllocator(c10::DeviceType::CPU, &instance(), /*priority=*/100);
}
bool tracking_allocator_installed() { return g_installed.load(); }
AllocatorStats allocator_stats() { return instance().stats(); }
void reset_peak_bytes() { instance().reset_peak(); }
int64_t release_cached_blocks() { return instance().release(); }
void set_memory_budget(int64_t bytes) { instance().set_budget(bytes < 0 ? 0 : bytes); }
void set_allocator_caching(bool enabled) { instance().set_caching(enabled); }

}  // namespace ht
