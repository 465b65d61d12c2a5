#include "cache/counters.h"

#include <numeric>

namespace lazyrt::cache {

int64_t CounterSnapshot::total_misses() const {
  return std::accumulate(misses_by_reason.begin(), misses_by_reason.end(), int64_t{0});
}

CounterSnapshot Counters::Snapshot() const {
  CounterSnapshot snapshot;
  snapshot.hits = hits_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < kNumMissReasons; ++i) {
    snapshot.misses_by_reason[i] = misses_by_reason_[i].load(std::memory_order_relaxed);
  }
  snapshot.writes = writes_.load(std::memory_order_relaxed);
  snapshot.write_failures = write_failures_.load(std::memory_order_relaxed);
  snapshot.evictions = evictions_.load(std::memory_order_relaxed);
  snapshot.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  snapshot.event_log_failures = event_log_failures_.load(std::memory_order_relaxed);
  return snapshot;
}

}  // namespace lazyrt::cache
