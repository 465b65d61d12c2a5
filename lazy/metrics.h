// Named counters and timers, reported in one place (metrics_report()).
#pragma once

#include <atomic>
#include <cstdint>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace lazyrt {

// The runtime's counters: X(constant in lazyrt::counters, name). Besides these, one per persistent-cache
// miss reason: PersistentCacheMissCounter(reason).
#define LAZYRT_COUNTERS(X)                                          \
  X(kGraphsCompiled, "graphs_compiled")                             \
  X(kExecutableCacheHit, "executable_cache_hit")                    \
  X(kPersistentCacheHit, "persistent_cache_hit")                    \
  X(kPersistentCacheMiss, "persistent_cache_miss")                  \
  X(kPersistentCacheWrite, "persistent_cache_write")                \
  X(kPersistentCacheWriteFailure, "persistent_cache_write_failure") \
  X(kCompileWaits, "compile_waits")                                 \
  X(kTransfersToDevice, "transfers_to_device")                      \
  X(kTransfersToHost, "transfers_to_host")                          \
  X(kTransfersBetweenDevices, "transfers_between_devices")          \
  X(kSyncMarkStep, "sync_mark_step")                                \
  X(kSyncItem, "sync_item")                                         \
  X(kSyncToHost, "sync_to_host")                                    \
  X(kSyncToDevice, "sync_to_device")                                \
  X(kSyncBarrier, "sync_barrier")                                   \
  X(kSyncGraphLimit, "sync_graph_limit")                            \
  X(kSyncExit, "sync_exit")                                         \
  X(kSpmdReplicatedFallbacks, "spmd_replicated_fallbacks")

namespace counters {
#define LAZYRT_X(constant, name) inline constexpr absl::string_view constant = name;
LAZYRT_COUNTERS(LAZYRT_X)
#undef LAZYRT_X
}  // namespace counters

// "persistent_cache_miss_<reason>", as cache::MissReasonName spells the reason.
std::string PersistentCacheMissCounter(absl::string_view reason_name);

// A process-wide counter; the reference stays valid forever, so hot paths look it up once.
std::atomic<int64_t>& Counter(absl::string_view name);
// Current value of a counter (0 if never incremented). Throws lazyrt::Error naming the known counters
// when `name` is none of them: a misspelt name must not read as a silent 0.
int64_t CounterValue(absl::string_view name, std::source_location loc = std::source_location::current());
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
