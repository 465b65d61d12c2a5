// Named counters and timers, reported in one place (metrics_report()).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace lazyrt {

// A process-wide counter; the reference stays valid forever, so hot paths look it up once.
std::atomic<int64_t>& Counter(absl::string_view name);
// Current value of a counter (0 if never touched).
int64_t CounterValue(absl::string_view name);
// Adds one sample, in milliseconds, to a timer.
void RecordTime(absl::string_view name, double ms);
// Every counter and timer (count, total, mean, p50, p90, max) as text.
std::string metrics_report();

}  // namespace lazyrt
