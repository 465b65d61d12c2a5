// The run report (JSON) and the Chrome trace: views of the SyncEvents, the metrics and the manifest.
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "cache/entry_format.h"
#include "cache/file_io.h"
#include "ir/hash.h"
#include "lazy/devices.h"
#include "lazy/diagnostics.h"
#include "lazy/diagnostics_internal.h"
#include "lazy/metrics.h"
#include "lazy/runtime.h"
#include "lowering/lower.h"
#include "pjrt_sim/collective_trace.h"
#include "pjrt_sim/executable.h"
#include "pjrt_sim/status_macros.h"
#include "pjrt_sim/thread_pool.h"
#include "pjrt_sim/version.h"

namespace lazyrt {
namespace {

using nlohmann::json;

// What ran where, with which versions and settings: enough to compare two runs or reproduce one.
json Manifest() {
  json m;
  m["lazyrt_version"] = LAZYRT_VERSION;
  m["lowering_version"] = std::string(lowering::kLoweringVersion);
  m["compiler_version"] = std::string(pjrt::kCompilerVersion);
  m["executable_format_version"] = pjrt::Executable::kFormatVersion;
  m["cache_format_version"] = cache::kEntryFormatVersion;
  json options = json::object();
  for (const auto& [name, value] : lazyrt::options().Resolved()) options[name] = value;
  m["options"] = options;
  m["cache_dir"] = detail::PersistentCacheDir();
  json machine;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  machine["hostname"] = host;
  machine["cpus"] = std::thread::hardware_concurrency();
  machine["usable_cpus"] = pjrt::UsableCpus();  // the device's pool: the process's affinity mask
  machine["memory_bytes"] = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  utsname u{};
  if (uname(&u) == 0) machine["kernel"] = absl::StrCat(u.sysname, " ", u.release, " ", u.machine);
  m["machine"] = machine;
  std::ifstream cmdline("/proc/self/cmdline");
  std::string arg, command;
  while (std::getline(cmdline, arg, '\0')) absl::StrAppend(&command, command.empty() ? "" : " ", arg);
  m["command"] = command;
  return m;
}

json EventJson(const SyncEvent& e) {
  return json{{"index", e.index},
              {"step", e.step},
              {"position", e.position},
              {"cause", std::string(SyncCauseName(e.cause))},
              {"location", e.location},
              {"graph_key", ir::HashToHex(e.graph_key)},
              {"nodes", e.nodes},
              {"inputs", e.inputs},
              {"outputs", e.outputs},
              {"outcome", std::string(SyncOutcomeName(e.outcome))},
              {"start_ms", e.start_ms},
              {"trace_ms", e.trace_ms},
              {"key_ms", e.key_ms},
              {"lower_ms", e.lower_ms},
              {"compile_ms", e.compile_ms},
              {"load_ms", e.load_ms},
              {"launch_ms", e.launch_ms},
              {"execute_ms", e.execute_ms},
              {"device", e.device},
              {"arena_bytes", e.arena_bytes},
              {"peak_bytes", e.peak_bytes},
              {"compile_wait_ms", e.compile_wait_ms},
              {"outcome_detail", e.outcome_detail}};
}

// Every device's memory now (memory_info()).
json DevicesJson() {
  json devices = json::array();
  for (int d = 0; d < device_count(); ++d) {
    const MemoryInfo m = memory_info(Device{d});
    const CollectiveInfo c = collective_info(Device{d});
    devices.push_back(json{{"device", Device{d}.ToString()},
                           {"bytes_in_use", m.bytes_in_use},
                           {"peak_bytes", m.peak_bytes},
                           {"limit_bytes", m.limit_bytes},
                           {"live_allocations", m.live_allocations},
                           {"collective_calls", c.calls},
                           {"collective_ms", c.ms},
                           {"collective_wait_ms", c.wait_ms}});
  }
  return devices;
}

// The time a device spends in collectives per step, averaged over the devices that ran any (partitions run
// in parallel: this is the part of a step each spends there); 0 without collectives or steps.
double CollectiveMsPerStep(size_t steps) {
  double ms = 0;
  int devices = 0;
  for (int d = 0; d < device_count(); ++d) {
    const CollectiveInfo c = collective_info(Device{d});
    if (c.calls == 0) continue;
    ms += c.ms;
    ++devices;
  }
  return devices == 0 || steps == 0 ? 0 : ms / devices / static_cast<double>(steps);
}

// A finding as the report holds it (tools/cli/diag_command.cc reads these fields).
json FindingJson(const Finding& f) {
  json j{{"kind", std::string(FindingKindName(f.kind))},
         {"severity", std::string(SeverityName(f.severity))},
         {"location", f.location},
         {"stack", f.stack},
         {"count", f.count},
         {"message", f.message}};
  if (!f.cause.empty()) j["cause"] = f.cause;
  if (f.kind == FindingKind::kRecompile) {
    j["what"] = f.what;
    j["before"] = f.before;
    j["now"] = f.now;
    j["also_at"] = f.also_at;
    j["sync_site"] = f.sync_site;
    j["variants"] = f.variants;
    j["site_syncs"] = f.site_syncs;
  }
  if (f.kind == FindingKind::kResharding) {
    j["sharding"] = f.sharding;
    j["needed"] = f.needed;
    j["suggestion"] = f.suggestion;
    j["bytes_per_step"] = f.bytes_per_step;
  }
  return j;
}

// A path from the environment: a FIFO must not hang the exit and the file size limit must not kill it
// (SIGXFSZ), so a file that cannot be written whole is a warning.
void WriteFile(const std::string& path, const std::string& text, absl::string_view what) {
  absl::Status written = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(cache::UniqueFd fd, cache::OpenRegularFileForWriting(path, /*append=*/false));
    RETURN_IF_ERROR(cache::CheckFileSizeLimit(text.size(), path));
    return cache::WriteAll(fd.get(), text, path);
  }();
  if (!written.ok()) {
    std::fprintf(stderr, "lazyrt: warning: could not write the %s: %s\n", std::string(what).c_str(),
                 std::string(written.message()).c_str());
  }
}

}  // namespace

namespace detail {
void WriteDiagnosticsAtExit() {
  const Options& o = lazyrt::options();
  if (o.debug >= 1) DebugLine(absl::StrCat("analysis at exit: ", diagnostics_summary()));
  constexpr int64_t kDebugKernelRows = 30;  // LAZYRT_DEBUG=3's table, unless LAZYRT_KERNEL_PROFILE says
  if (o.debug >= 3 || o.kernel_profile > 0) {
    DebugLine(KernelProfileText(o.kernel_profile > 0 ? o.kernel_profile : kDebugKernelRows));
  }
  if (o.debug >= 3) {
    for (int d = 0; d < device_count(); ++d) {
      const MemoryInfo m = memory_info(Device{d});
      DebugLine(absl::StrCat("memory on ", Device{d}.ToString(), " at exit: ", pjrt::HumanBytes(m.bytes_in_use),
                             " in use, peak ", pjrt::HumanBytes(m.peak_bytes), " of a ",
                             pjrt::HumanBytes(m.limit_bytes), " limit"));
    }
  }
  if (!o.report.empty()) write_report(o.report);
  if (!o.trace.empty()) write_trace(o.trace);
}
}  // namespace detail

void write_report(const std::string& path) {
  const std::vector<SyncEvent> events = sync_events();
  json report;
  report["manifest"] = Manifest();
  json counters = json::object();
  for (const auto& [name, value] : metrics_counters()) counters[name] = value;
  report["counters"] = counters;
  json timers = json::object();
  for (const TimerSummary& t : metrics_timers()) {
    timers[t.name] = json{{"count", t.count},   {"total_ms", t.total_ms}, {"mean_ms", t.mean_ms},
                          {"p50_ms", t.p50_ms}, {"p90_ms", t.p90_ms},     {"max_ms", t.max_ms}};
  }
  report["timers"] = timers;
  json event_list = json::array();
  json steps = json::array();
  for (const SyncEvent& e : events) {
    event_list.push_back(EventJson(e));
    if (steps.empty() || steps.back()["step"] != e.step) {
      steps.push_back(json{{"step", e.step}, {"graphs", 0}, {"compiled", 0}, {"nodes", 0}, {"syncs", json::object()}});
    }
    json& s = steps.back();
    s["graphs"] = s["graphs"].get<int64_t>() + 1;
    s["nodes"] = s["nodes"].get<int64_t>() + e.nodes;
    if (e.outcome != SyncOutcome::kMemoryHit) s["compiled"] = s["compiled"].get<int64_t>() + 1;
    const std::string cause(SyncCauseName(e.cause));
    s["syncs"][cause] = s["syncs"].value(cause, 0) + 1;
  }
  report["sync_events"] = event_list;
  report["steps"] = steps;
  json sites = json::array();
  for (const SyncSiteSummary& site : sync_sites()) {
    sites.push_back(json{{"location", site.location},
                         {"stack", site.stack},
                         {"syncs", site.syncs},
                         {"programs", site.programs},
                         {"graphs", site.graphs}});
  }
  report["sync_sites"] = sites;
  json found = json::array();
  for (const Finding& f : findings()) found.push_back(FindingJson(f));
  report["findings"] = found;
  report["devices"] = DevicesJson();
  report["collective_ms_per_step"] = CollectiveMsPerStep(steps.size());
  WriteFile(path, report.dump(2) + "\n", "run report");
}

void write_trace(const std::string& path) {
  // Chrome's trace event format: complete events ("X") in microseconds; the host's sync phases on one
  // track, each device stream's executions on another.
  json trace = json::array();
  auto span = [&](const std::string& name, double start_ms, double ms, int tid, const json& args) {
    if (ms < 0) return;
    trace.push_back(json{{"name", name},
                         {"ph", "X"},
                         {"pid", 1},
                         {"tid", tid},
                         {"ts", start_ms * 1000},
                         {"dur", ms * 1000},
                         {"args", args}});
  };
  trace.push_back(
      json{{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "host: syncs"}}}});
  trace.push_back(
      json{{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 2}, {"args", {{"name", "device 0 stream"}}}});
  for (const SyncEvent& e : sync_events()) {
    const json args = EventJson(e);
    double t = e.start_ms;
    span("trace", t - e.trace_ms, e.trace_ms, 1, args);
    for (const auto& [name, ms] : {std::pair<const char*, double>{"key", e.key_ms},
                                   {"lower", e.lower_ms},
                                   {"compile", e.compile_ms},
                                   {"load", e.load_ms},
                                   {"launch", e.launch_ms}}) {
      if (ms <= 0) continue;
      span(name, t, ms, 1, args);
      t += ms;
    }
    span(absl::StrCat("execute ", ir::HashToHex(e.graph_key)), e.execute_start_ms, e.execute_ms, 2, args);
  }
  // Counter events ("C"): one track per device, sampled at each launch, execution end and transfer.
  for (const detail::MemorySample& m : detail::MemorySamples()) {
    trace.push_back(json{{"name", absl::StrCat("memory ", Device{m.device}.ToString())},
                         {"ph", "C"},
                         {"pid", 1},
                         {"ts", m.ms * 1000},
                         {"args", {{"bytes_in_use", m.bytes_in_use}}}});
  }
  // Collectives on a track per device: each partition's time at each one, waiting for the others
  // included (pjrt_sim's clock is the same steady clock; only the origin differs).
  const auto now = std::chrono::steady_clock::now();
  const double now_ms = detail::NowMs();
  std::set<int> collective_devices;
  for (const pjrt::CollectiveSpanRecord& c : pjrt::CollectiveSpans()) {
    const double start_ms = now_ms - std::chrono::duration<double, std::milli>(now - c.start).count();
    span(c.what, start_ms, std::chrono::duration<double, std::milli>(c.end - c.start).count(), 100 + c.device,
         json{{"device", c.device}});
    collective_devices.insert(c.device);
  }
  for (int d : collective_devices) {
    trace.push_back(json{{"name", "thread_name"},
                         {"ph", "M"},
                         {"pid", 1},
                         {"tid", 100 + d},
                         {"args", {{"name", absl::StrCat("device ", d, " collectives")}}}});
  }
  WriteFile(path, json{{"traceEvents", trace}, {"displayTimeUnit", "ms"}}.dump() + "\n", "trace");
}

}  // namespace lazyrt
