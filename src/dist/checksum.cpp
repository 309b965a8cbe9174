// The replicas' weight checksum: two 64-bit sums over each tensor's 32-bit words (plain and
// position-weighted), so any flipped bit or swapped value changes it, whatever the thread count.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "hybrid/dist/data_parallel.h"

namespace ht::dist {
namespace {

uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0x100000001b3ULL;
}

uint64_t tensor_checksum(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  const int64_t bytes = c.numel() * static_cast<int64_t>(c.element_size());
  const int64_t words = bytes / 4;
  const auto* w = static_cast<const uint32_t*>(c.data_ptr());
  // Chunks of fixed size, summed in order: the result does not depend on the thread count.
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (words + kChunk - 1) / kChunk;
  std::vector<uint64_t> s1(static_cast<size_t>(chunks)), s2(static_cast<size_t>(chunks));
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      uint64_t a = 0, b = 0;
      const int64_t lo = k * kChunk, hi = std::min(words, lo + kChunk);
      for (int64_t i = lo; i < hi; ++i) {
        a += w[i];
        b += static_cast<uint64_t>(i + 1) * w[i];
      }
      s1[static_cast<size_t>(k)] = a;
      s2[static_cast<size_t>(k)] = b;
    }
  });
  uint64_t a = 0, b = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    a += s1[static_cast<size_t>(k)];
    b += s2[static_cast<size_t>(k)];
  }
  // Bytes past the last whole word (odd-sized half-precision tensors).
  const auto* tail = static_cast<const uint8_t*>(c.data_ptr()) + words * 4;
  for (int64_t i = 0; i < bytes - words * 4; ++i) a += static_cast<uint64_t>(tail[i]) << (8 * i);
  return mix(mix(a, b), static_cast<uint64_t>(bytes));
}

}  // namespace

uint64_t weight_checksum(const std::vector<at::Tensor>& tensors) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const auto& t : tensors) h = mix(h, t.defined() ? tensor_checksum(t) : 0);
  return h;
}

}  // namespace ht::dist
