#pragma once

#include <chrono>

namespace lazyrt {

// Milliseconds on the steady clock since `start`: how every layer times its phases (compile passes,
// tuning, sync stages, cache loads).
inline double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace lazyrt
