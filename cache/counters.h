// The store's in-process counters, which the runtime reads into its metrics. Lock-free: counting
// happens on the lookup path of every thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "cache/miss_reason.h"

namespace lazyrt::cache {

// A consistent-enough copy of the counters at one moment (each value is read atomically).
struct CounterSnapshot {
  int64_t hits = 0;
  std::array<int64_t, kNumMissReasons> misses_by_reason{};
  int64_t writes = 0;
  // Puts that returned a non-OK status (a write or an eviction after it failed).
  int64_t write_failures = 0;
  int64_t evictions = 0;
  // File bytes (header plus compressed payload) of the successful writes.
  int64_t bytes_written = 0;
  // Event log lines that could not be appended; the operations themselves went on.
  int64_t event_log_failures = 0;

  // The misses for one reason, and for all reasons together.
  int64_t misses(MissReason reason) const { return misses_by_reason[static_cast<size_t>(reason)]; }
  int64_t total_misses() const;
};

class Counters {
 public:
  // Each Add* counts one occurrence of its event; safe from any thread.
  void AddHit() { hits_.fetch_add(1, std::memory_order_relaxed); }
  void AddMiss(MissReason reason) {
    misses_by_reason_[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  }
  void AddWrite(int64_t bytes) {
    writes_.fetch_add(1, std::memory_order_relaxed);
    bytes_written_.fetch_add(bytes, std::memory_order_relaxed);
  }
  void AddWriteFailure() { write_failures_.fetch_add(1, std::memory_order_relaxed); }
  void AddEviction() { evictions_.fetch_add(1, std::memory_order_relaxed); }
  void AddEventLogFailure() { event_log_failures_.fetch_add(1, std::memory_order_relaxed); }

  // The current values.
  CounterSnapshot Snapshot() const;

 private:
  std::atomic<int64_t> hits_{0};
  std::array<std::atomic<int64_t>, kNumMissReasons> misses_by_reason_{};
  std::atomic<int64_t> writes_{0};
  std::atomic<int64_t> write_failures_{0};
  std::atomic<int64_t> evictions_{0};
  std::atomic<int64_t> bytes_written_{0};
  std::atomic<int64_t> event_log_failures_{0};
};

}  // namespace lazyrt::cache
