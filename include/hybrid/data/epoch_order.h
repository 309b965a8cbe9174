// Seeded per-epoch orderings for resumable data sources: only {seed, epoch} feeds the generator,
// so a restored cursor replays the exact stream, on every toolchain.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace ht::data_detail {

// A generator for one epoch. Seed and epoch are mixed (splitmix64) so nearby seeds and epochs
// give unrelated streams; mt19937_64 itself is fully specified by the standard.
std::mt19937_64 epoch_rng(uint64_t seed, int64_t epoch);

// Uniform in [0, n). Our own rejection sampler: std::uniform_int_distribution and std::shuffle
// differ between standard libraries, which would make data order depend on the toolchain.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t n);

// A uniformly random permutation of 0..n-1 (Fisher-Yates).
std::vector<int64_t> permutation(int64_t n, std::mt19937_64& rng);

}  // namespace ht::data_detail

namespace ht {

// The order in which epoch `epoch` visits n examples: a permutation of 0..n-1 that depends only
// on (seed, epoch). What a DataSource of one's own needs for exact resume (with DataCursor).
std::vector<int64_t> epoch_order(uint64_t seed, int64_t epoch, int64_t n);

}  // namespace ht
