// The GraphExecutor's side of diagnostics. Internal to lazy/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/post_order.h"
#include "lazy/diagnostics.h"
#include "pjrt_sim/device.h"
#include "pjrt_sim/executable.pb.h"

namespace lazyrt::detail {

// Milliseconds since the runtime started (the clock of every SyncEvent).
double NowMs();
// Whether device execution times are measured (debug, report or trace on): it costs two stream
// markers per sync, so it is off by default.
bool TimingEnabled();
// Milliseconds of tracing since the previous sync ended.
double TraceMsSince();
// Records a finished sync. `order` is the graph's traversal: when the graph is new to the sync's site
// (file:line and call stack) its structure is compared with the site's earlier graphs and kept.
void RecordSync(SyncEvent event, const ir::PostOrder* order);
// The index the next RecordSync will give (syncs are serialized, so it cannot be taken meanwhile).
int64_t PeekNextSyncIndex();
// A mark_step() that found nothing to run still ends the step.
void EndStep();
// Device-side timing of event `index`, from stream markers.
void RecordExecution(int64_t index, double start_ms, double end_ms);
// Memory in use on one device at one time: the Chrome trace's per-device counter (diagnostics_memory.cc).
struct MemorySample {
  double ms = 0;  // since the runtime started
  int device = 0;
  int64_t bytes_in_use = 0;
};
// Records `bytes_in_use` on `device` now (always, as every SyncEvent is: a lock and a push).
void RecordMemorySample(const pjrt::Device& device, int64_t bytes_in_use);
// The same with the device's own count of bytes in use.
void RecordMemorySample(const pjrt::Device& device);
// The samples recorded (the most recent ones, if there were very many), oldest first.
std::vector<MemorySample> MemorySamples();
// The directory of the persistent cache in use ("" when off), for the run manifest.
std::string PersistentCacheDir();
// The device time of the loaded executables' kernels, most expensive first (LAZYRT_DEBUG >= 3).
std::string KernelProfileText(int64_t shown);
// Whether `location` (file:line) is in lazyrt's own sources.
bool InLazyrt(std::string_view location);
// The avoidable reshardings of SPMD executable `exe` (diagnostics_resharding.cc): its first run with graph
// key `graph_key` names them by the graph `order` (LAZYRT_DEBUG >= 1 prints them); later runs are counted.
void RecordReshardings(uint64_t graph_key, const pjrt::proto::Executable& exe, const ir::PostOrder& order);
// Their findings, one per resharding of each executable.
void AddReshardingFindings(std::vector<Finding>& out);
// The axis names a program gave the mesh of `shape` over `devices` (the latest mark_sharding's).
void RememberMeshAxisNames(const std::vector<int64_t>& shape, const std::vector<int64_t>& devices,
                           const std::vector<std::string>& names);
// A line of debug output, to LAZYRT_DEBUG_FILE or stderr.
void DebugLine(const std::string& line);
// Writes what LAZYRT_DEBUG, LAZYRT_REPORT and LAZYRT_TRACE ask for (nothing if none); at exit.
void WriteDiagnosticsAtExit();

}  // namespace lazyrt::detail
