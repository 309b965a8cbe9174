// Seeded per-epoch orderings shared by the data sources: mixing, bounded draws, permutations.
// Written by hand rather than with <random> distributions so the order is identical on every toolchain.
#include "hybrid/data/epoch_order.h"

#include <limits>
#include <numeric>
#include <utility>

namespace ht::data_detail {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::mt19937_64 epoch_rng(uint64_t seed, int64_t epoch) {
  return std::mt19937_64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch)));
}

uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  // Reject the top partial block of 2^64 so every residue is equally likely.
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  const uint64_t limit = max - (max % n + 1) % n;
  uint64_t x;
  do {
    x = rng();
  } while (x > limit);
  return x % n;
}

std::vector<int64_t> permutation(int64_t n, std::mt19937_64& rng) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(p[i], p[uniform_below(rng, static_cast<uint64_t>(i) + 1)]);
  }
  return p;
}

}  // namespace ht::data_detail

namespace ht {

std::vector<int64_t> epoch_order(uint64_t seed, int64_t epoch, int64_t n) {
  auto rng = data_detail::epoch_rng(seed, epoch);
  return data_detail::permutation(n, rng);
}

}  // namespace ht
