#include "lazy/diagnostics.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/graph_signature.h"
#include "lazy/diagnostics_internal.h"
#include "lazy/runtime.h"

namespace lazyrt {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

// Events kept for the report; older ones are dropped (the analysis keeps running totals).
constexpr size_t kMaxEvents = 100000;
// A step position whose graph changes this many times is a recompilation storm worth a finding (a
// single change, such as an evaluation phase, is not).
constexpr int64_t kRecompileFindingThreshold = 2;
// Graph structures kept to explain recompiles; beyond this, those no step position last ran go.
constexpr size_t kMaxSignatures = 256;
// Step positions (syncs within one step) whose graphs are compared with the previous step's.
constexpr size_t kMaxPositions = 64;
// Steps after which a new graph is unexpected enough to warn about at once (LAZYRT_DEBUG >= 1).
constexpr int64_t kWarmupSteps = 2;

struct Recompile {
  int64_t count = 0;
  std::string what, before, now;
  int64_t first_step = 0;
};

struct State {
  std::mutex mu;
  const Clock::time_point origin = Clock::now();
  double last_sync_end_ms = 0;
  std::deque<SyncEvent> events;
  int64_t next_index = 0, step = 0, position = 0;
  std::map<std::pair<SyncCause, std::string>, int64_t> extra_syncs;
  std::vector<uint64_t> key_at_position;
  absl::flat_hash_map<uint64_t, ir::GraphSignature> signatures;
  std::map<std::string, Recompile> recompiles;  // by location + what
  // Graphs run: in all, in the step in progress, and at most in one step (running totals: a run of
  // millions of steps keeps no per-step table).
  int64_t graphs = 0, graphs_this_step = 0, max_graphs_per_step = 0;
  bool warned_late_compile = false;
};

State& Get() {
  static State* s = new State;
  return *s;
}

const Options& Opts() { return Runtime::Get().options(); }

}  // namespace

// Where debug lines go: LAZYRT_DEBUG_FILE, else stderr.
void DebugLine(const std::string& line) {
  static FILE* out = [] {
    const std::string& path = Opts().debug_file;
    FILE* f = path.empty() ? nullptr : std::fopen(path.c_str(), "a");
    return f != nullptr ? f : stderr;
  }();
  std::fprintf(out, "lazyrt: %s\n", line.c_str());
  std::fflush(out);
}

namespace {

std::string ExplainRecompile(const std::string& what, const std::string& before, const std::string& now,
                             const std::string& location, int64_t count) {
  if (what == "constant value") {
    return absl::StrCat("a constant baked into the graph changed ", count, " time(s) (", before, " -> ", now,
                        "), created at ", location,
                        ": every new value compiles a new graph. Pass it as a device parameter (a plain host "
                        "scalar, not Scalar::Static).");
  }
  if (what == "shape") {
    return absl::StrCat("the shape of a tensor created at ", location, " changed ", count, " time(s) (", before,
                        " -> ", now, "): every new shape compiles a new graph. Pad or bucket to a few fixed shapes.");
  }
  return absl::StrCat("the step's graph changed ", count, " time(s): ", what, " of the node created at ", location,
                      " (", before, " -> ", now, ").");
}

std::string ExplainExtraSync(SyncCause cause, const std::string& location, int64_t count) {
  switch (cause) {
    case SyncCause::kItem:
      return absl::StrCat("item() at ", location, " forced ", count,
                          " sync(s) inside steps: each cuts the step's graph and waits for the device. Keep the "
                          "value on the device, or read it after mark_step().");
    case SyncCause::kToHost:
      return absl::StrCat("reading tensor values at ", location, " forced ", count,
                          " sync(s) inside steps: each cuts the step's graph and waits for the device.");
    case SyncCause::kBarrier:
      return absl::StrCat("barrier() at ", location, " split steps ", count,
                          " time(s) (intended when a whole step is too big to compile at once).");
    default:
      return absl::StrCat(SyncCauseName(cause), " at ", location, " synced ", count, " time(s) inside steps.");
  }
}

}  // namespace

double NowMs() { return std::chrono::duration<double, std::milli>(Clock::now() - Get().origin).count(); }

bool TimingEnabled() {
  const Options& o = Opts();
  return o.debug > 0 || !o.report.empty() || !o.trace.empty();
}

double TraceMsSince() {
  State& s = Get();
  std::lock_guard<std::mutex> lock(s.mu);
  return NowMs() - s.last_sync_end_ms;
}

void RecordSync(SyncEvent e, const ir::PostOrder* order) {
  State& s = Get();
  std::lock_guard<std::mutex> lock(s.mu);
  e.index = s.next_index++;
  e.step = s.step;
  e.position = s.position;
  ++s.graphs;
  s.max_graphs_per_step = std::max(s.max_graphs_per_step, ++s.graphs_this_step);
  if (e.cause != SyncCause::kMarkStep) s.extra_syncs[{e.cause, e.location}]++;

  // Recompiles: this step position ran a graph new to the process, and it ran another one before.
  // (Positions past kMaxPositions, in a program that syncs without ever ending a step, are not
  // compared: the table of graphs by position must stay bounded.)
  const bool tracked = static_cast<size_t>(e.position) < kMaxPositions;
  if (order != nullptr && tracked) {
    ir::GraphSignature signature = ir::SignatureOf(*order);
    if (static_cast<size_t>(e.position) < s.key_at_position.size()) {
      const uint64_t previous = s.key_at_position[static_cast<size_t>(e.position)];
      auto it = s.signatures.find(previous);
      if (previous != e.graph_key && it != s.signatures.end()) {
        const std::vector<ir::GraphDifference> causes = ir::RootCauses(it->second, signature);
        absl::flat_hash_set<std::string> counted;  // one count per recompile, however many nodes
        for (const ir::GraphDifference& d : causes) {
          const std::string key = absl::StrCat(d.created_at, "|", d.what);
          if (!counted.insert(key).second) continue;
          Recompile& r = s.recompiles[key];
          if (r.count++ == 0) {
            r.first_step = e.step;
            r.before = d.before;
          }
          r.what = d.what;
          r.now = d.now;
        }
        if (Opts().debug >= 1 && e.step > kWarmupSteps && !s.warned_late_compile && !causes.empty()) {
          s.warned_late_compile = true;
          const ir::GraphDifference& d = causes.front();
          DebugLine(absl::StrCat("warning: step ", e.step, " compiled a new graph at ", e.location, ": the ", d.what,
                                 " of the node created at ", d.created_at, " changed (", d.before, " -> ", d.now,
                                 ")"));
        }
      }
    }
    s.signatures[e.graph_key] = std::move(signature);
    if (s.signatures.size() > kMaxSignatures) {
      // A recompilation storm makes a new graph every step: keep the structures of the graphs some
      // step position last ran (what the next recompile is compared with), drop others.
      const absl::flat_hash_set<uint64_t> current(s.key_at_position.begin(), s.key_at_position.end());
      for (auto it = s.signatures.begin(); it != s.signatures.end() && s.signatures.size() > kMaxSignatures;) {
        if (it->first != e.graph_key && !current.contains(it->first)) {
          s.signatures.erase(it++);
        } else {
          ++it;
        }
      }
    }
  }
  if (tracked) {
    if (static_cast<size_t>(e.position) >= s.key_at_position.size()) s.key_at_position.resize(static_cast<size_t>(e.position) + 1);
    s.key_at_position[static_cast<size_t>(e.position)] = e.graph_key;
  }

  if (Opts().debug >= 2) {
    DebugLine(absl::StrFormat("sync #%d step %d.%d %s at %s: %d nodes, %d in, %d out, %s, key %.3f ms, compile %.2f ms, load %.2f ms",
                              e.index, e.step, e.position, SyncCauseName(e.cause), e.location, e.nodes, e.inputs,
                              e.outputs, SyncOutcomeName(e.outcome), e.key_ms, e.compile_ms, e.load_ms));
  }
  if (e.cause == SyncCause::kMarkStep) {
    ++s.step;
    s.position = 0;
    s.graphs_this_step = 0;
  } else {
    ++s.position;
  }
  s.last_sync_end_ms = NowMs();
  s.events.push_back(std::move(e));
  if (s.events.size() > kMaxEvents) s.events.pop_front();
}

void EndStep() {
  State& s = Get();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.step;
  s.position = 0;
  s.graphs_this_step = 0;
}

int64_t PeekNextSyncIndex() {
  State& s = Get();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.next_index;
}

void RecordExecution(int64_t index, double start_ms, double end_ms) {
  State& s = Get();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.events.empty() || index < s.events.front().index || index > s.events.back().index) return;
  SyncEvent& e = s.events[static_cast<size_t>(index - s.events.front().index)];
  e.execute_start_ms = start_ms;
  e.execute_ms = end_ms - start_ms;
}

}  // namespace detail

absl::string_view SyncOutcomeName(SyncOutcome outcome) {
  switch (outcome) {
    case SyncOutcome::kMemoryHit: return "memory_hit";
    case SyncOutcome::kDiskHit: return "disk_hit";
    case SyncOutcome::kCompiled: return "compiled";
  }
  return "?";
}

std::vector<SyncEvent> sync_events() {
  detail::State& s = detail::Get();
  std::lock_guard<std::mutex> lock(s.mu);
  return {s.events.begin(), s.events.end()};
}

std::vector<Finding> findings() {
  detail::State& s = detail::Get();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<Finding> out;
  for (const auto& [where, count] : s.extra_syncs) {
    Finding f;
    f.kind = "extra_sync";
    f.cause = std::string(SyncCauseName(where.first));
    f.location = where.second;
    f.count = count;
    f.message = detail::ExplainExtraSync(where.first, where.second, count);
    out.push_back(std::move(f));
  }
  for (const auto& [key, r] : s.recompiles) {
    if (r.count < detail::kRecompileFindingThreshold) continue;
    Finding f;
    f.kind = "recompile";
    f.location = key.substr(0, key.rfind('|'));
    f.count = r.count;
    f.what = r.what;
    f.before = r.before;
    f.now = r.now;
    f.message = detail::ExplainRecompile(r.what, r.before, r.now, f.location, r.count);
    out.push_back(std::move(f));
  }
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) { return a.count > b.count; });
  return out;
}

std::string diagnostics_summary() {
  std::vector<Finding> found = findings();
  detail::State& s = detail::Get();
  int64_t steps = 0, graphs = 0, max_graphs = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    steps = s.step;
    graphs = s.graphs;
    max_graphs = s.max_graphs_per_step;
  }
  std::string out = absl::StrFormat("%d graph(s) run over %d step(s); at most %d in one step; %d finding(s)\n",
                                    graphs, steps, max_graphs, found.size());
  for (const Finding& f : found) absl::StrAppend(&out, "  [", f.kind, " x", f.count, "] ", f.message, "\n");
  return out;
}

}  // namespace lazyrt
