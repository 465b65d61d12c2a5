#include "lazy/diagnostics.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cache/file_io.h"
#include "ir/graph_signature.h"
#include "lazy/diagnostics_internal.h"
#include "lazy/diagnostics_stacks.h"
#include "lazy/runtime.h"
#include "pjrt_sim/elapsed.h"

namespace lazyrt {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

// Events kept for the report; older ones are dropped (the analysis keeps running totals).
constexpr size_t kMaxEvents = 100000;
// Sync sites tracked; a program syncing from more places (generated code) is analysed for the first.
constexpr size_t kMaxSites = 256;
// Graph structures kept per program and in all, to explain a new graph against its closest variant.
constexpr size_t kMaxSignaturesPerProgram = 32;
constexpr size_t kMaxSignatures = 512;
// Of those, a new graph is compared with the program's first few and its latest few.
constexpr size_t kComparedFirst = 4, kComparedLast = 8;
// Variants per program whose differences are tracked one by one (a storm beyond is only counted).
constexpr size_t kMaxTrackedVariants = 4096;
// A new graph sharing less than this fraction of its nodes with every graph of a sync site is another
// program run there (an evaluation after training steps), not a recompile of one.
constexpr double kSameProgramSimilarity = 0.5;
// A program that ran this many distinct graphs recompiles repeatedly: its causes are warnings. Two
// graphs (one recompile: a last, smaller batch) is information.
constexpr size_t kWarningVariants = 3;
// Steps after which a new graph is unexpected enough to warn about at once (LAZYRT_DEBUG >= 1), and
// how many such warnings a run prints before leaving the rest to the analysis at exit.
constexpr int64_t kWarmupSteps = 2;
constexpr int64_t kMaxLateWarnings = 20;
// Distinct values listed in a finding; more are counted.
constexpr size_t kValuesShown = 4;

// A node that differs between the graphs of one program, by its id (ir::GraphDifference::id).
struct Factor {
  ir::DifferenceKind kind = ir::DifferenceKind::kStructure;
  std::string created_at;
  uint16_t context = 0;
  bool leaf = false;
  bool repeated = false;                // a count of nodes from one place (see ir::GraphDifference)
  int64_t order = 0;                    // first seen, for a stable report
  std::string base;                     // its value in the program's first graph
  std::map<size_t, std::string> value;  // variant -> its value there, where it differs from `base`
};

struct Variant {
  uint64_t key = 0;
  int64_t first_step = 0;
  std::vector<std::string> explained_by;  // factor ids that set it apart from its closest variant
};

// Related graphs run at one sync site: each new one is a recompile of the program.
struct Program {
  std::vector<Variant> variants;
  std::vector<std::pair<size_t, ir::GraphSignature>> signatures;  // variant -> structure (bounded)
  std::map<std::string, Factor> factors;
  int64_t syncs = 0;
};

struct Site {
  std::string location;
  uint16_t stack = 0;
  int64_t order = 0, syncs = 0;
  std::vector<Program> programs;
  absl::flat_hash_map<uint64_t, size_t> program_of_key;
};

struct ExtraSync {
  int64_t cut = 0;     // followed by another graph in its step
  int64_t waited = 0;  // the last graph of a step that mark_step() then ended with nothing left to run
  int64_t looped = 0;  // the only graph between two syncs at the same place, with no mark_step() anywhere
};

struct State {
  std::mutex mu;
  const Clock::time_point origin = Clock::now();
  double last_sync_end_ms = 0;
  std::deque<SyncEvent> events;
  int64_t next_index = 0, step = 0, position = 0;
  std::map<std::pair<std::string, uint16_t>, Site> sites;
  int64_t signatures = 0, factor_order = 0;
  // Keyed by cause, location and the sync's call stack.
  std::map<std::tuple<SyncCause, std::string, uint16_t>, ExtraSync> extra_syncs;
  // The last extra sync of the step in progress (the earlier ones cut it: a graph ran after them), and
  // whether a graph ran after it.
  std::optional<std::tuple<SyncCause, std::string, uint16_t>> last_extra_sync;
  int64_t extra_syncs_this_step = 0;
  bool graph_after_extra_sync = false;
  // The last extra sync repeated the one before it: the last iteration of such a loop cuts nothing
  // either, whatever runs next.
  bool extra_sync_looping = false;
  // Graphs run: in all, in the step in progress, and at most in one step (running totals: a run of
  // millions of steps keeps no per-step table).
  int64_t graphs = 0, graphs_this_step = 0, compiled_this_step = 0, max_graphs_per_step = 0;
  int64_t late_warnings = 0;
  // Call stacks by what the user sees of them: the first stack id with each text, for every id.
  absl::flat_hash_map<uint16_t, uint16_t> canonical_stack;
  absl::flat_hash_map<std::string, uint16_t> stack_by_text;
};

State& Get() {
  static State* s = new State;
  return *s;
}

const Options& Opts() { return Runtime::Get().options(); }

std::string SiteText(const std::string& location, const std::vector<std::string>& stack) {
  // The innermost user frame is the location itself; the callers tell a helper's call sites apart.
  std::vector<std::string> callers;
  for (const std::string& frame : stack) {
    if (callers.empty() && frame == location) continue;
    callers.push_back(frame);
  }
  return callers.empty() ? location : absl::StrCat(location, " (called from ", absl::StrJoin(callers, " <- "), ")");
}

}  // namespace

// A place in lazyrt's own sources (its paths are relative to its source root).
bool InLazyrt(std::string_view location) {
  for (std::string_view layer : {"lazy/", "ir/", "pjrt_sim/", "lowering/", "cache/"}) {
    if (location.substr(0, layer.size()) == layer) return true;
  }
  return false;
}

// Where debug lines go: LAZYRT_DEBUG_FILE, else stderr.
// A debug file that cannot be opened as a regular file (a FIFO without a reader, a directory), or that a
// line would take past the file size limit (ulimit -f: SIGXFSZ), gives way to stderr with a warning.
void DebugLine(const std::string& line) {
  struct DebugFile {  // never destroyed: the exit analysis writes here after static destructors may run
    std::mutex mu;
    cache::UniqueFd file;
    bool opened = false;
  };
  static DebugFile* const debug_file = new DebugFile;
  std::lock_guard<std::mutex> lock(debug_file->mu);
  cache::UniqueFd& file = debug_file->file;
  bool& opened = debug_file->opened;
  const std::string& path = Opts().debug_file;
  const std::string text = absl::StrCat("lazyrt: ", line, "\n");
  auto fall_back = [&](const absl::Status& why) {
    std::fprintf(stderr, "lazyrt: warning: debug output goes to stderr: %s\n", std::string(why.message()).c_str());
    file = cache::UniqueFd();
  };
  if (!opened && !path.empty()) {
    opened = true;
    absl::StatusOr<cache::UniqueFd> fd = cache::OpenRegularFileForWriting(path, /*append=*/true);
    if (fd.ok()) {
      file = *std::move(fd);
    } else {
      fall_back(fd.status());
    }
  }
  if (file.valid()) {
    struct stat info;
    const uint64_t size = fstat(file.get(), &info) == 0 ? static_cast<uint64_t>(info.st_size) : 0;
    absl::Status s = cache::CheckFileSizeLimit(size + text.size(), path);
    if (s.ok()) s = cache::WriteAll(file.get(), text, path);
    if (s.ok()) return;
    fall_back(s);
  }
  std::fputs(text.c_str(), stderr);
}

namespace {

// Ends the step in progress: its extra syncs either cut it (a graph ran after them) or only made the
// host wait (the step's work was all done by then).
void EndStepLocked(State& s) {
  if (s.last_extra_sync) {
    ExtraSync& x = s.extra_syncs[*s.last_extra_sync];
    ++(s.extra_sync_looping ? x.looped : s.graph_after_extra_sync ? x.cut : x.waited);
  }
  s.extra_sync_looping = false;
  if (Opts().debug >= 2 && s.graphs_this_step > 0) {
    DebugLine(absl::StrFormat("step %d: %d graph(s), %d new, %d extra sync(s)", s.step, s.graphs_this_step,
                              s.compiled_this_step, s.extra_syncs_this_step));
  }
  s.last_extra_sync.reset();
  s.extra_syncs_this_step = 0;
  s.graph_after_extra_sync = false;
  ++s.step;
  s.position = 0;
  s.graphs_this_step = 0;
  s.compiled_this_step = 0;
}

std::string DifferenceText(const ir::GraphDifference& d) {
  return absl::StrCat("the ", ir::DifferenceKindName(d.kind), " of the node created at ", d.created_at, " (", d.before,
                      " -> ", d.now, ")");
}

// The first stack with the same user frames as `stack`. Two return addresses can be one place to the
// user: a loop the compiler unrolled, a call duplicated by inlining. Without debug information every
// stack reads the same, and a site is its file:line alone.
uint16_t CanonicalStack(State& s, uint16_t stack) {
  if (stack == 0) return 0;
  auto it = s.canonical_stack.find(stack);
  if (it != s.canonical_stack.end()) return it->second;
  const uint16_t canonical = s.stack_by_text.try_emplace(StackText(UserFrames(stack, 8)), stack).first->second;
  s.canonical_stack.emplace(stack, canonical);
  return canonical;
}

// A graph new to its sync site: another program there, or a variant of one explained by its root
// causes against the closest variant seen before.
void RecordNewGraph(State& s, Site& site, const SyncEvent& e, const ir::PostOrder& order) {
  ir::GraphSignature signature = ir::SignatureOf(order);
  size_t best_program = site.programs.size(), best_variant = 0;
  ir::GraphComparison best;
  for (size_t p = 0; p < site.programs.size(); ++p) {
    const std::vector<std::pair<size_t, ir::GraphSignature>>& signatures = site.programs[p].signatures;
    for (size_t k = 0; k < signatures.size(); ++k) {
      // The first graphs and the latest: comparing with every kept graph would cost a large graph's
      // recompilation storm seconds per step.
      if (k >= kComparedFirst && k + kComparedLast < signatures.size()) continue;
      const auto& [v, known] = signatures[k];
      ir::GraphComparison c = ir::CompareGraphs(known, signature);
      if (c.similarity < kSameProgramSimilarity) continue;
      if (best_program == site.programs.size() || c.causes.size() < best.causes.size() ||
          (c.causes.size() == best.causes.size() && c.similarity > best.similarity)) {
        best_program = p;
        best_variant = v;
        best = std::move(c);
      }
    }
  }
  const bool new_program = best_program == site.programs.size();
  if (new_program) site.programs.emplace_back();
  Program& program = site.programs[best_program];
  site.program_of_key[e.graph_key] = best_program;
  ++program.syncs;
  const size_t index = program.variants.size();
  if (index >= kMaxTrackedVariants) return;
  Variant variant{.key = e.graph_key, .first_step = e.step, .explained_by = {}};
  if (!new_program) {
    // The values of the differing nodes, against the program's first graph (whose structure is kept
    // first): what the findings list for each cause.
    const ir::GraphComparison base =
        best_variant == 0 ? best : ir::CompareGraphs(program.signatures.front().second, signature);
    for (const ir::GraphDifference& d : base.causes) {
      auto [it, inserted] = program.factors.try_emplace(d.id);
      Factor& f = it->second;
      if (inserted) {
        f = Factor{.kind = d.kind,
                   .created_at = d.created_at,
                   .context = d.context,
                   .leaf = d.leaf,
                   .repeated = d.repeated,
                   .order = s.factor_order++,
                   .base = d.before,
                   .value = {}};
      }
      f.value[index] = d.now;
    }
    for (const ir::GraphDifference& d : best.causes) variant.explained_by.push_back(d.id);
    if (Opts().debug >= 1 && e.step > kWarmupSteps && s.late_warnings < kMaxLateWarnings) {
      ++s.late_warnings;
      // With two graphs alone, a constant that changed with a shape most likely follows from it.
      const bool shapes = std::any_of(best.causes.begin(), best.causes.end(), [](const ir::GraphDifference& d) {
        return d.kind == ir::DifferenceKind::kShape;
      });
      std::vector<std::string> causes;
      for (const ir::GraphDifference& d : best.causes) {
        if (!shapes || d.kind != ir::DifferenceKind::kConstantValue) causes.push_back(DifferenceText(d));
      }
      DebugLine(absl::StrCat("warning: step ", e.step, " compiled a new graph at ", e.location, ": ",
                             causes.empty() ? "an unexplained difference" : absl::StrJoin(causes, "; "),
                             s.late_warnings == kMaxLateWarnings
                                 ? " (further new graphs are not warned about; the analysis at exit lists them)"
                                 : ""));
    }
  }
  program.variants.push_back(std::move(variant));
  if (program.signatures.size() < kMaxSignaturesPerProgram && s.signatures < static_cast<int64_t>(kMaxSignatures)) {
    program.signatures.emplace_back(index, std::move(signature));
    ++s.signatures;
  } else if (program.signatures.size() > kComparedFirst) {
    // Full: the first graphs stay (the base of the factors' values), the oldest of the others goes.
    program.signatures.erase(program.signatures.begin() + kComparedFirst);
    program.signatures.emplace_back(index, std::move(signature));
  }
}

}  // namespace

double NowMs() { return MsSince(Get().origin); }

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
  // The sync's call stack (outside the lock: capture is the costly part), to tell a helper's callers
  // apart; 0 when diagnostics are off.
  const uint16_t captured = TimingEnabled() ? CaptureCallStack() : 0;
  State& s = Get();
  std::lock_guard<std::mutex> lock(s.mu);
  const uint16_t stack = CanonicalStack(s, captured);
  e.index = s.next_index++;
  e.step = s.step;
  e.position = s.position;
  ++s.graphs;
  s.max_graphs_per_step = std::max(s.max_graphs_per_step, ++s.graphs_this_step);
  if (e.outcome != SyncOutcome::kMemoryHit) ++s.compiled_this_step;
  const bool graph_between = s.graph_after_extra_sync;
  s.graph_after_extra_sync = true;
  if (e.cause != SyncCause::kMarkStep && e.cause != SyncCause::kExit) {
    std::tuple<SyncCause, std::string, uint16_t> key{e.cause, e.location, stack};
    if (s.last_extra_sync) {
      // A graph runs after it: it cut its step, unless this is the same sync again with nothing in
      // between (a loop that syncs by item() each iteration, an evaluation without mark_step()).
      ExtraSync& last = s.extra_syncs[*s.last_extra_sync];
      const bool again = *s.last_extra_sync == key && !graph_between;
      ++(again || s.extra_sync_looping ? last.looped : last.cut);
      s.extra_sync_looping = again;
    }
    s.last_extra_sync = std::move(key);
    ++s.extra_syncs_this_step;
    s.graph_after_extra_sync = false;
  }

  // Graph variants per sync site: a graph the site ran before costs nothing to recognise; a new one is
  // compared with the site's earlier graphs.
  auto site_it = s.sites.find({e.location, stack});
  if (site_it == s.sites.end() && s.sites.size() < kMaxSites) {
    site_it = s.sites.emplace(std::pair{e.location, stack}, Site{}).first;
    site_it->second.location = e.location;
    site_it->second.stack = stack;
    site_it->second.order = static_cast<int64_t>(s.sites.size());
  }
  if (site_it != s.sites.end()) {
    Site& site = site_it->second;
    ++site.syncs;
    auto known = site.program_of_key.find(e.graph_key);
    if (known != site.program_of_key.end()) {
      ++site.programs[known->second].syncs;
    } else if (order != nullptr) {
      RecordNewGraph(s, site, e, *order);
    }
  }

  if (Opts().debug >= 2) {
    DebugLine(absl::StrFormat(
        "sync #%d step %d.%d %s at %s: %d nodes, %d in, %d out, %s, key %.3f ms, compile %.2f ms, load %.2f ms",
        e.index, e.step, e.position, SyncCauseName(e.cause), e.location, e.nodes, e.inputs, e.outputs,
        SyncOutcomeName(e.outcome), e.key_ms, e.compile_ms, e.load_ms));
  }
  if (Opts().debug >= 3) {
    DebugLine(absl::StrFormat("sync #%d memory on %s: peak %s (arena %s plus live buffers and results)", e.index,
                              Device{e.device}.ToString(), pjrt::HumanBytes(e.peak_bytes),
                              pjrt::HumanBytes(e.arena_bytes)));
  }
  if (e.cause == SyncCause::kMarkStep) {
    EndStepLocked(s);
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
  EndStepLocked(s);
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

namespace {

std::string ExtraSyncAdvice(SyncCause cause) {
  switch (cause) {
    case SyncCause::kItem:
      return "If the value decides a branch, keep the decision on the device: compute both sides and pick with "
             "where(cond, a, b) or a mask, or use a static sentinel (a padding value known in advance instead of "
             "max().item() + 1); if the branch is always safe to take, drop the test. If the value is only "
             "logged, read it after mark_step().";
    case SyncCause::kToHost:
      return "Read values for logging after mark_step(), and every N steps rather than every step.";
    case SyncCause::kToDevice:
      return "Move tensors to another device after mark_step(), or create them on the device that uses them.";
    case SyncCause::kBarrier: return "Intended when a whole step is too big to compile at once; otherwise remove it.";
    case SyncCause::kGraphLimit:
      return "Raise LAZYRT_GRAPH_LIMIT, or end steps with mark_step() before the graph grows this large.";
    case SyncCause::kMarkStep:
    case SyncCause::kExit: return "";
  }
  return "";
}

std::string SyncWhat(SyncCause cause) {
  switch (cause) {
    case SyncCause::kItem: return "item()";
    case SyncCause::kToHost: return "reading tensor values (to_vector(), printing)";
    case SyncCause::kToDevice: return "moving a pending tensor to another device (to(device))";
    case SyncCause::kBarrier: return "barrier()";
    case SyncCause::kGraphLimit: return "the graph-size limit";
    case SyncCause::kMarkStep: return "mark_step()";
    case SyncCause::kExit: return "the exit sync";
  }
  return "a sync";
}

void AddExtraSyncFindings(const State& s, std::vector<Finding>& out) {
  // The step in progress counts as if it ended now (a program may never call mark_step()).
  std::map<std::tuple<SyncCause, std::string, uint16_t>, ExtraSync> extra_syncs = s.extra_syncs;
  if (s.last_extra_sync) {
    ExtraSync& x = extra_syncs[*s.last_extra_sync];
    ++(s.graph_after_extra_sync && !s.extra_sync_looping ? x.cut : x.looped);
  }
  for (const auto& [key, x] : extra_syncs) {
    const SyncCause cause = std::get<0>(key);
    const std::string& location = std::get<1>(key);
    const uint16_t stack = std::get<2>(key);
    const std::vector<std::string> frames = UserFrames(stack);
    const std::string where = SiteText(location, frames);
    auto add = [&](FindingKind kind, int64_t count, bool repeats, std::string text) {
      if (count == 0) return;
      Finding f;
      f.kind = kind;
      // One sync is a one-off; a barrier is what the user asked for.
      f.severity = repeats && cause != SyncCause::kBarrier ? Severity::kWarning : Severity::kInfo;
      f.location = location;
      f.stack = frames;
      f.count = count;
      f.cause = std::string(SyncCauseName(cause));
      f.message = absl::StrCat(std::move(text), " ", ExtraSyncAdvice(cause));
      out.push_back(std::move(f));
    };
    add(FindingKind::kExtraSync, x.cut, x.cut >= 2,
        absl::StrCat(SyncWhat(cause), " at ", where, " synced ", x.cut,
                     " time(s) inside a step: each cuts the step's graph in two (two smaller graphs, less fusion) "
                     "and the host waits for the device."));
    // Waiting before a mark_step() that then has nothing to run is the trap (logging a value each
    // step); a loop that has no mark_step() at all can only run by such syncs: information.
    add(FindingKind::kHostWait, x.waited + x.looped, x.waited >= 2,
        x.waited > 0
            ? absl::StrCat(SyncWhat(cause), " at ", where, " synced ", x.waited + x.looped,
                           " time(s) at the end of a step: nothing was cut, but each time the host waits for the "
                           "device instead of tracing the next step while it runs.")
            : absl::StrCat(SyncWhat(cause), " at ", where, " synced ", x.looped,
                           " time(s) in a loop without mark_step(): nothing was cut, but each time the host waits "
                           "for the device. If a value per iteration is not needed, accumulate on the device and "
                           "read once after the loop."));
  }
}

// The value of factor `f` in variant `v`.
const std::string& ValueIn(const Factor& f, size_t v) {
  auto it = f.value.find(v);
  return it == f.value.end() ? f.base : it->second;
}

// Which variants share a value: class ids numbered by first appearance, so two factors that vary
// together (an optional input and the weights only it reads) have equal partitions.
std::vector<int> Partition(const Factor& f, size_t variants) {
  std::map<std::string, int> classes;
  std::vector<int> p(variants);
  for (size_t v = 0; v < variants; ++v)
    p[v] = classes.try_emplace(ValueIn(f, v), static_cast<int>(classes.size())).first->second;
  return p;
}

// Whether partition `fine` determines `coarse` (equal in `fine` implies equal in `coarse`).
bool Determines(const std::vector<std::vector<int>>& fine, const std::vector<int>& coarse) {
  std::map<std::vector<int>, int> seen;
  for (size_t v = 0; v < coarse.size(); ++v) {
    std::vector<int> key;
    for (const std::vector<int>& p : fine) key.push_back(p[v]);
    auto [it, inserted] = seen.emplace(std::move(key), coarse[v]);
    if (!inserted && it->second != coarse[v]) return false;
  }
  return true;
}

// The values `f` takes, the first graph's first (unless !with_base), " / "-separated.
std::string ValuesText(const Factor& f, size_t variants, bool with_base = true) {
  std::vector<std::string> values;
  if (with_base) values.push_back(f.base);
  std::set<std::string> seen{f.base};
  size_t distinct = values.size();
  for (size_t v = 0; v < variants; ++v) {
    const std::string& value = ValueIn(f, v);
    if (!seen.insert(value).second) continue;
    ++distinct;
    if (values.size() < kValuesShown) values.push_back(value);
  }
  std::string text = absl::StrJoin(values, " / ");
  if (distinct > values.size()) absl::StrAppend(&text, " / ... (", distinct + (with_base ? 0 : 1), " values in all)");
  return text;
}

std::string CauseText(const Factor& f, const std::string& place, size_t variants) {
  const std::string values = ValuesText(f, variants);
  switch (f.kind) {
    case ir::DifferenceKind::kConstantValue:
      return absl::StrCat("a constant baked into the graph (a static scalar) created at ", place, " (", values,
                          "): every new value compiles a new graph. Pass it as a plain host scalar, which becomes a "
                          "device parameter, not as Scalar::Static.");
    case ir::DifferenceKind::kShape:
      return absl::StrCat("the shape of the ", f.leaf ? "input" : "tensor", " created at ", place, " (", values,
                          "): every new shape compiles a new graph. Pad or bucket to a few fixed shapes (a last "
                          "smaller batch: drop it, or pad it and mask the padding).");
    case ir::DifferenceKind::kPresence:
      return f.leaf ? absl::StrCat("the input created at ", place, " (", values,
                                   "): each combination of inputs present is a graph of its own. Always pass it "
                                   "(zeros when absent) and mask its contribution, so there is one graph.")
                    : absl::StrCat("the computation created at ", place, " (", values,
                                   "): a branch taken in some steps and not others. Compute it always and select the "
                                   "result with where() or a mask.");
    case ir::DifferenceKind::kAttribute:
      return absl::StrCat("an attribute of the op created at ", place, " (", values,
                          "): every new value compiles a new graph. Keep it fixed, or pass the varying part as a "
                          "tensor.");
    case ir::DifferenceKind::kStructure:
      return absl::StrCat("the op created at ", place, " (", values,
                          "): the program takes different paths. Make the path independent of host values.");
  }
  return "";
}

// Where a differing node came from. An input's stack is where the graph read it, not where the tensor
// was created (a FromData earlier in the step, a gradient of the previous micro-step).
std::string PlaceText(const Factor& f, const std::string& location, const std::vector<std::string>& frames) {
  if (!f.leaf || frames.empty() || frames.front() == location) return SiteText(location, frames);
  return absl::StrCat(location, " (read at ", StackText(frames), ")");
}

void AddRecompileFindings(const State& s, std::vector<Finding>& out) {
  std::vector<const Site*> sites;
  for (const auto& [key, site] : s.sites) sites.push_back(&site);
  std::sort(sites.begin(), sites.end(), [](const Site* a, const Site* b) { return a->order < b->order; });
  for (const Site* site : sites) {
    const std::vector<std::string> site_frames = UserFrames(site->stack);
    for (const Program& program : site->programs) {
      const size_t n = program.variants.size();
      if (n < 2) continue;
      std::vector<std::pair<const std::string*, const Factor*>> by_order;
      for (const auto& [id, f] : program.factors) by_order.emplace_back(&id, &f);
      std::sort(by_order.begin(), by_order.end(),
                [](const auto& a, const auto& b) { return a.second->order < b.second->order; });
      std::vector<const Factor*> factors;
      std::vector<std::string> ids;
      for (const auto& [id, f] : by_order) {
        ids.push_back(*id);
        factors.push_back(f);
      }
      std::vector<std::vector<int>> partitions;
      for (const Factor* f : factors) partitions.push_back(Partition(*f, n));
      // A constant that follows the shapes (a mean's 1/n over a smaller batch) is not a cause of its own.
      std::vector<std::vector<int>> shape_partitions;
      for (size_t i = 0; i < factors.size(); ++i) {
        if (factors[i]->kind == ir::DifferenceKind::kShape) shape_partitions.push_back(partitions[i]);
      }
      // How many nodes a loop created (one update per parameter given a gradient) follows from what
      // varies upstream; it is a cause of its own only when nothing else explains it.
      std::vector<std::vector<int>> other_partitions;
      for (size_t i = 0; i < factors.size(); ++i) {
        if (!factors[i]->repeated) other_partitions.push_back(partitions[i]);
      }
      // Factors that vary together are one cause; the one to show is an input the user created, if any.
      std::map<std::vector<int>, std::vector<size_t>> causes;
      std::vector<std::vector<int>> cause_order;
      for (size_t i = 0; i < factors.size(); ++i) {
        if (factors[i]->kind == ir::DifferenceKind::kConstantValue && !shape_partitions.empty() &&
            Determines(shape_partitions, partitions[i])) {
          continue;
        }
        if (factors[i]->repeated && !other_partitions.empty() && Determines(other_partitions, partitions[i])) continue;
        auto [it, inserted] = causes.try_emplace(partitions[i]);
        if (inserted) cause_order.push_back(partitions[i]);
        it->second.push_back(i);
      }
      const std::string site_text = SiteText(site->location, site_frames);
      for (const std::vector<int>& partition : cause_order) {
        const std::vector<size_t>& members = causes[partition];
        auto rank = [&](size_t i) {
          const Factor& f = *factors[i];
          const bool user = !InLazyrt(f.created_at);
          return std::tuple{f.repeated, f.kind == ir::DifferenceKind::kPresence && !f.leaf, !user, f.order};
        };
        const size_t primary =
            *std::min_element(members.begin(), members.end(), [&](size_t a, size_t b) { return rank(a) < rank(b); });
        const Factor& f = *factors[primary];
        // New graphs this cause set apart from their closest variant.
        std::set<std::string> member_ids;
        for (size_t i : members) member_ids.insert(ids[i]);
        int64_t count = 0;
        for (const Variant& v : program.variants) {
          count += std::any_of(v.explained_by.begin(), v.explained_by.end(),
                               [&](const std::string& id) { return member_ids.contains(id); });
        }
        Finding out_f;
        out_f.kind = FindingKind::kRecompile;
        out_f.severity = n >= kWarningVariants ? Severity::kWarning : Severity::kInfo;
        out_f.stack = UserFrames(f.context);
        // A node lazyrt created for the user (a gradient, an optimizer's state) is the user's call's doing.
        out_f.location = InLazyrt(f.created_at) && !out_f.stack.empty() ? out_f.stack.front() : f.created_at;
        out_f.count = std::max<int64_t>(count, 1);
        out_f.what = std::string(ir::DifferenceKindName(f.kind));
        out_f.before = f.base;
        out_f.now = ValuesText(f, n, /*with_base=*/false);
        const std::string place = PlaceText(f, out_f.location, out_f.stack);
        for (size_t i : members) {
          if (i == primary) continue;
          const std::string other = PlaceText(*factors[i], factors[i]->created_at, UserFrames(factors[i]->context));
          if (other == place) continue;
          if (std::find(out_f.also_at.begin(), out_f.also_at.end(), other) == out_f.also_at.end()) {
            out_f.also_at.push_back(other);
          }
        }
        out_f.sync_site = site_text;
        out_f.variants = static_cast<int64_t>(n);
        out_f.site_syncs = program.syncs;
        out_f.message = absl::StrCat("the sync at ", site_text, " ran ", n, " distinct graphs over ", program.syncs,
                                     " syncs; ", out_f.count, out_f.count == 1 ? " of them differs" : " of them differ",
                                     " from the closest earlier one in ", CauseText(f, place, n));
        if (!out_f.also_at.empty()) {
          absl::StrAppend(&out_f.message, " Varies together with what was created at ",
                          absl::StrJoin(out_f.also_at, ", "), ".");
        }
        out.push_back(std::move(out_f));
      }
    }
  }
}

}  // namespace
}  // namespace detail

absl::string_view SyncOutcomeName(SyncOutcome outcome) {
  switch (outcome) {
    case SyncOutcome::kMemoryHit: return "memory_hit";
    case SyncOutcome::kDiskHit: return "disk_hit";
    case SyncOutcome::kCompiled: return "compiled";
  }
  return "?";
}

absl::string_view FindingKindName(FindingKind kind) {
  switch (kind) {
    case FindingKind::kExtraSync: return "extra_sync";
    case FindingKind::kHostWait: return "host_wait";
    case FindingKind::kRecompile: return "recompile";
    case FindingKind::kResharding: return "resharding";
  }
  return "?";
}

absl::string_view SeverityName(Severity severity) {
  switch (severity) {
    case Severity::kInfo: return "info";
    case Severity::kWarning: return "warning";
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
  detail::AddExtraSyncFindings(s, out);
  detail::AddRecompileFindings(s, out);
  detail::AddReshardingFindings(out);
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    return a.severity != b.severity ? a.severity > b.severity : a.count > b.count;
  });
  return out;
}

std::vector<SyncSiteSummary> sync_sites() {
  detail::State& s = detail::Get();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<std::pair<int64_t, SyncSiteSummary>> sites;
  for (const auto& [key, site] : s.sites) {
    SyncSiteSummary summary{.location = site.location,
                            .stack = detail::UserFrames(site.stack),
                            .syncs = site.syncs,
                            .programs = static_cast<int64_t>(site.programs.size()),
                            .graphs = 0};
    for (const detail::Program& p : site.programs) summary.graphs += static_cast<int64_t>(p.variants.size());
    sites.emplace_back(site.order, std::move(summary));
  }
  std::sort(sites.begin(), sites.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<SyncSiteSummary> out;
  for (auto& [order, summary] : sites) out.push_back(std::move(summary));
  return out;
}

std::string diagnostics_summary() {
  std::vector<Finding> found = findings();
  const std::vector<SyncSiteSummary> sites = sync_sites();
  detail::State& s = detail::Get();
  int64_t steps = 0, graphs = 0, max_graphs = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    steps = s.step;
    graphs = s.graphs;
    max_graphs = s.max_graphs_per_step;
  }
  const auto warnings =
      std::count_if(found.begin(), found.end(), [](const Finding& f) { return f.severity == Severity::kWarning; });
  std::string out =
      absl::StrFormat("%d graph(s) run over %d step(s); at most %d in one step; %d finding(s), %d warning(s)\n", graphs,
                      steps, max_graphs, found.size(), warnings);
  for (const SyncSiteSummary& site : sites) {
    if (site.graphs < 2) continue;
    absl::StrAppend(&out, "  sync at ", detail::SiteText(site.location, site.stack), ": ", site.graphs,
                    " distinct graph(s) in ", site.programs, " program(s) over ", site.syncs, " sync(s)\n");
  }
  for (const Finding& f : found) {
    absl::StrAppend(&out, "  [", FindingKindName(f.kind), " ", SeverityName(f.severity), " x", f.count, "] ", f.message,
                    "\n");
  }
  return out;
}

}  // namespace lazyrt
