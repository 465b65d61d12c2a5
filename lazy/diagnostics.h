// Why is my step slow? Every sync is recorded as a SyncEvent; the fragmentation analysis turns them
// into findings: syncs that split a step (with the user's file:line) and recompiles (with what
// changed, before -> now, and where that was created). The run report, the debug output and the
// Chrome trace are views of the same records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lazy/sync.h"

namespace lazyrt {

enum class SyncOutcome : uint8_t { kMemoryHit, kDiskHit, kCompiled };
absl::string_view SyncOutcomeName(SyncOutcome outcome);  // "memory_hit", "disk_hit", "compiled"

struct SyncEvent {
  int64_t index = 0;     // syncs with a graph, in order
  int64_t step = 0;      // mark_step() barriers before this sync
  int64_t position = 0;  // graphs run earlier in the same step
  SyncCause cause = SyncCause::kMarkStep;
  std::string location;  // the user's file:line
  uint64_t graph_key = 0;
  int64_t nodes = 0, inputs = 0, outputs = 0;
  SyncOutcome outcome = SyncOutcome::kMemoryHit;
  double start_ms = 0;    // since the runtime started
  double trace_ms = 0;    // tracing since the previous sync ended
  double key_ms = 0;      // collecting live tensors, post-order, graph key, arguments
  double lower_ms = 0, compile_ms = 0, load_ms = 0;
  double launch_ms = 0;   // enqueueing the execution
  double execute_ms = -1; // on the device stream; -1 unless timing is on (LAZYRT_DEBUG, _REPORT, _TRACE)
  double execute_start_ms = 0;
};

struct Finding {
  std::string kind;      // "extra_sync" or "recompile"
  std::string location;  // file:line
  int64_t count = 0;
  std::string message;
  // extra_sync: the cause. recompile: what changed, before -> now.
  std::string cause, what, before, now;
};

// The recorded syncs (the most recent ones, if there were very many).
std::vector<SyncEvent> sync_events();
// The fragmentation analysis of the syncs so far, worst first.
std::vector<Finding> findings();
// A few lines for a human: graphs per step, the findings.
std::string diagnostics_summary();
// The run report (JSON: manifest, counters, timers, sync events, per-step summary, findings).
void write_report(const std::string& path);
// A Chrome trace (chrome://tracing, Perfetto) of every sync's phases and the device's executions.
void write_trace(const std::string& path);

}  // namespace lazyrt
