// Counter-based random numbers that numpy reproduces bit for bit (benchmarks/peers/*.py), so that every
// peer of a comparison draws the very same initial weights and batches without sharing a generator.
#pragma once

#include <cstdint>
#include <vector>

namespace lazyrt::splitmix {

// SplitMix64's output function applied to seed * 2^32 + (index + 1) * golden ratio: element `index` of
// stream `seed`.
inline uint64_t Draw(uint64_t seed, uint64_t index) {
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
  uint64_t z = seed * 0x100000000ULL + index * kGolden + kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// n values uniform in [-bound, bound): 24 random bits each, exact in f32 and f64.
inline std::vector<float> Uniform(int64_t n, double bound, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(Draw(seed, static_cast<uint64_t>(i)) >> 40) / 16777216.0;
    v[static_cast<size_t>(i)] = static_cast<float>(bound * (2 * u - 1));
  }
  return v;
}

}  // namespace lazyrt::splitmix
