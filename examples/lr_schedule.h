// train_gpt's learning-rate schedule, shared with its C++ peer (benchmarks/peers/libtorch_gpt.cpp);
// benchmarks/peers/torch_gpt.py has the same formula.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace lazyrt::examples {

// The learning rate of step s (0-based) of `steps`: linear warmup over the first tenth of the run (at
// most 100 steps), then a cosine decay to a tenth of `peak`.
inline double WarmupCosineLr(double peak, int64_t steps, int64_t s) {
  const int64_t warmup = std::max<int64_t>(1, std::min<int64_t>(100, steps / 10));
  if (s < warmup) return peak * static_cast<double>(s + 1) / static_cast<double>(warmup);
  const double progress = static_cast<double>(s - warmup) / static_cast<double>(std::max<int64_t>(1, steps - warmup));
  return peak * (0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * progress)));
}

}  // namespace lazyrt::examples
