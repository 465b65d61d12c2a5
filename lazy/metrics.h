// Named counters and timers, reported in one place (metrics_report()).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace lazyrt {

// A process-wide counter; the reference stays valid forever, so hot paths look it up once.
std::atomic<int64_t>& Counter(absl::string_view name);
// Current value of a counter (0 if never touched).
int64_t CounterValue(absl::string_view name);
// Adds one sample, in milliseconds, to a timer.
void RecordTime(absl::string_view name, double ms);
struct TimerSummary {
  std::string name;
  int64_t count = 0;
  double total_ms = 0, mean_ms = 0, p50_ms = 0, p90_ms = 0, max_ms = 0;
};
// Every counter, by name.
std::vector<std::pair<std::string, int64_t>> metrics_counters();
// Every timer, by name.
std::vector<TimerSummary> metrics_timers();
// Every counter and timer (count, total, mean, p50, p90, max) as text.
std::string metrics_report();

}  // namespace lazyrt
