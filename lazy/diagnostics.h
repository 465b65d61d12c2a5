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
  // Why, when it is not the usual: a disk hit on an entry another process compiled while this one
  // waited, "compiled by another process (pid N)".
  std::string outcome_detail;
  double start_ms = 0;  // since the runtime started
  double trace_ms = 0;  // tracing since the previous sync ended
  double key_ms = 0;    // collecting live tensors, post-order, graph key, arguments
  double lower_ms = 0, compile_ms = 0, load_ms = 0;
  double compile_wait_ms = 0;  // waiting for another process compiling the same graph
  double launch_ms = 0;        // enqueueing the execution
  double execute_ms = -1;      // on the device stream; -1 unless timing is on (LAZYRT_DEBUG, _REPORT, _TRACE)
  double execute_start_ms = 0;
  int device = 0;           // the lazy:N the graph ran on
  int64_t arena_bytes = 0;  // the executable's scratch memory
  // The graph's peak on its device: the bytes in use there when it launched (the tensors alive, work
  // still in flight) plus its results and its arena, where larger than the arenas of the work already
  // queued (the device runs one at a time: pjrt::Device::ReserveArena).
  int64_t peak_bytes = 0;
};

// What a finding is about.
enum class FindingKind : uint8_t {
  kExtraSync,   // a host sync inside a step that cut the step's graph in two
  kHostWait,    // a host sync that cut nothing but made the host wait for the device (logging a value)
  kRecompile,   // one cause of the distinct graphs a sync site ran (a static scalar, a shape, ...)
  kResharding,  // a collective an SPMD graph runs every step that another layout of a value would avoid
};
// "extra_sync", "host_wait", "recompile", "resharding"
absl::string_view FindingKindName(FindingKind kind);

// How much a finding costs: a warning repeats (every step, or a storm of graphs); information is a
// one-off (a single recompile, an intended barrier).
enum class Severity : uint8_t { kInfo, kWarning };
absl::string_view SeverityName(Severity severity);  // "info", "warning"

struct Finding {
  FindingKind kind = FindingKind::kExtraSync;
  Severity severity = Severity::kWarning;
  std::string location;            // file:line of the cause: the sync, or where the differing node was created
  std::vector<std::string> stack;  // the user's frames of that place, innermost first (when captured)
  int64_t count = 0;               // syncs, or new graphs this cause compiled
  std::string message;             // what happened and what to do about it
  // extra_sync, host_wait: the sync's cause ("item", "to_host", ...).
  std::string cause;
  // recompile: what differs ("constant value", "shape", "presence", "attribute", "structure"), the first
  // graph's value and the others' (" / "-separated), other places that vary with it, and the sync site.
  std::string what, before, now;
  std::vector<std::string> also_at;
  std::string sync_site;
  int64_t variants = 0, site_syncs = 0;
  // resharding (once per executable; count = the steps that ran it): the value's layout and the one its
  // consumer needed (PartitionSpecs over the mesh's axis names), the mark_sharding() that avoids the
  // collective, and the bytes each device received for it per step.
  std::string sharding, needed, suggestion;
  int64_t bytes_per_step = 0;
};

// A sync site (the file:line and call stack of a sync) and the graphs it ran.
struct SyncSiteSummary {
  std::string location;
  std::vector<std::string> stack;
  int64_t syncs = 0;
  int64_t programs = 0;  // unrelated graphs (a training step and an evaluation) count apart
  int64_t graphs = 0;    // distinct graphs, all programs
};

// The recorded syncs (the most recent ones, if there were very many).
std::vector<SyncEvent> sync_events();
// The fragmentation analysis of the syncs so far: warnings before information, each by count.
std::vector<Finding> findings();
// Every sync site, in order of first use.
std::vector<SyncSiteSummary> sync_sites();
// A few lines for a human: graphs per step, the findings.
std::string diagnostics_summary();
// The run report (JSON: manifest, counters, timers, sync events, per-step summary, findings).
void write_report(const std::string& path);
// A Chrome trace (chrome://tracing, Perfetto) of every sync's phases and the device's executions.
void write_trace(const std::string& path);

}  // namespace lazyrt
