// The GraphExecutor: the path of one step in shared/DESIGN.md. Sync() runs it as its steps, as LTC's
// SyncTensorsGraphInternal delegates: collect the pending tensors, build the arguments, find or compile
// the executable (executable_cache.cc), launch it, commit its results to the tensors.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/graph_signature.h"
#include "ir/post_order.h"
#include "lazy/diagnostics_internal.h"
#include "lazy/executable_cache.h"
#include "lazy/metrics.h"
#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lowering/dtype.h"
#include "pjrt_sim/element_ops.h"

namespace lazyrt {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Executions a device may have queued before a sync waits for the oldest: the host runs ahead of the
// device by this many steps at most, so a step's memory is back in the pool when the step after next
// allocates (PJRT clients bound in-flight computations the same way).
constexpr size_t kMaxInFlight = 2;

// Serializes syncs: the registry, the RNG state and the event log change together.
std::mutex& ExecutorMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

std::atomic<int64_t>& SyncCounter(SyncCause cause) {
  switch (cause) {
    case SyncCause::kMarkStep: {
      static std::atomic<int64_t>& c = Counter(counters::kSyncMarkStep);
      return c;
    }
    case SyncCause::kItem: {
      static std::atomic<int64_t>& c = Counter(counters::kSyncItem);
      return c;
    }
    case SyncCause::kToHost: {
      static std::atomic<int64_t>& c = Counter(counters::kSyncToHost);
      return c;
    }
    case SyncCause::kToDevice: {
      static std::atomic<int64_t>& c = Counter(counters::kSyncToDevice);
      return c;
    }
    case SyncCause::kBarrier: {
      static std::atomic<int64_t>& c = Counter(counters::kSyncBarrier);
      return c;
    }
    case SyncCause::kGraphLimit: {
      static std::atomic<int64_t>& c = Counter(counters::kSyncGraphLimit);
      return c;
    }
    case SyncCause::kExit: {
      static std::atomic<int64_t>& c = Counter(counters::kSyncExit);
      return c;
    }
  }
  std::abort();  // unreachable: the switch covers every cause
}

// Step 1: the live tensors with pending IR, and their values (the graph's roots), in registry order.
struct PendingGraph {
  std::vector<std::shared_ptr<TensorImpl>> tensors;
  std::vector<ir::Value> roots;
};
PendingGraph CollectPending(DeviceState& state) {
  PendingGraph pending;
  for (std::shared_ptr<TensorImpl>& t : state.LiveTensors()) {
    if (!t->ir || t->ir.node->op() == ir::OpKind::kDeviceData) continue;
    pending.roots.push_back(t->ir);
    pending.tensors.push_back(std::move(t));
  }
  return pending;
}

// A host scalar leaf as a device buffer of the leaf's dtype.
std::shared_ptr<pjrt::Buffer> UploadScalar(double value, const Shape& shape, pjrt::Client& client, pjrt::Device* device,
                                           const SourceLocation& loc) {
  alignas(8) unsigned char bytes[8] = {};
  const pjrt::PrimitiveType type = lowering::DeviceType(shape.dtype());
  pjrt::StoreElement(value, type, bytes);
  absl::StatusOr<std::shared_ptr<pjrt::Buffer>> buffer = client.BufferFromHost(bytes, {type, {}}, device);
  ThrowIfError(buffer.status(), "sync: uploading a scalar", loc);
  return *std::move(buffer);
}

// Step 2: the graph's parameters in post-order: the leaves' buffers, host scalars uploaded.
std::vector<std::shared_ptr<pjrt::Buffer>> BuildArguments(const ir::PostOrder& order, Runtime& rt, DeviceState& state,
                                                          const SourceLocation& loc) {
  static std::atomic<int64_t>& transfers = Counter(counters::kTransfersToDevice);  // looked up once
  std::vector<std::shared_ptr<pjrt::Buffer>> args;
  args.reserve(order.parameter_positions().size());
  for (uint32_t pos : order.parameter_positions()) {
    const ir::Node* leaf = order.nodes()[pos];
    if (const auto* b = dynamic_cast<const BufferLeaf*>(leaf->leaf_data().get())) {
      args.push_back(b->buffer);
    } else {
      const auto& s = static_cast<const ScalarLeaf&>(*leaf->leaf_data());
      args.push_back(UploadScalar(s.value, leaf->shape(), rt.client(), state.device, loc));
      transfers.fetch_add(1);
    }
  }
  return args;
}

// Launches `exe` on the device's stream, after waiting for all but kMaxInFlight - 1 earlier executions.
// Its results are ready when their events fire.
// The public op of an index-checking node, for an index error found when its graph runs.
const char* IndexingApiName(const ir::Node& node) {
  if (node.api_name() != nullptr) return node.api_name();
  if (node.op() == ir::OpKind::kGather) return "gather";
  if (node.op() == ir::OpKind::kScatterAdd) return "scatter_add";
  if (node.op() == ir::OpKind::kIndexAdd) return "index_add";
  return "index_select";
}

// Names the index-checking sites of the graph (the lowering numbers them 1, 2, ... in post order, as
// ir::ChecksIndices picks them) as "<op> (called at file:line)"; nullptr for a graph without any. The
// names are copied: the kernels may fail after the graph is freed.
pjrt::Executable::SiteNamer SiteNamerOf(const ir::PostOrder& order) {
  std::vector<std::pair<const char*, SourceLocation>> sites;
  for (const ir::Node* node : order.nodes()) {
    if (ir::ChecksIndices(node->op())) sites.emplace_back(IndexingApiName(*node), node->created_at());
  }
  if (sites.empty()) return nullptr;
  return [sites = std::move(sites)](int64_t site) -> std::string {
    if (site < 1 || site > static_cast<int64_t>(sites.size())) return "";
    const auto& [op, where] = sites[static_cast<size_t>(site - 1)];
    return absl::StrCat(op, " (called at ", ir::LocationText(where), ")");
  };
}

std::vector<std::shared_ptr<pjrt::Buffer>> Launch(pjrt::Executable& exe,
                                                  const std::vector<std::shared_ptr<pjrt::Buffer>>& args,
                                                  DeviceState& state, size_t expected_results,
                                                  pjrt::Executable::SiteNamer name_site, SyncEvent& event,
                                                  const SourceLocation& loc) {
  while (state.in_flight.size() >= kMaxInFlight) {
    state.in_flight.front()->Wait().IgnoreError();  // an error is reported by the buffers that have it
    state.in_flight.pop_front();
  }
  // Counted before the launch: a small graph may run (and free its arena) before Execute returns.
  const int64_t live_bytes = state.device->memory_stats().bytes_in_use;
  // With timing on, markers on the (in-order) stream bracket the execution.
  const bool timing = TimingEnabled();
  auto exec_start = std::make_shared<double>(0);
  if (timing) state.device->stream().Enqueue([exec_start] { *exec_start = NowMs(); });
  absl::StatusOr<std::vector<std::shared_ptr<pjrt::Buffer>>> results =
      exe.Execute(args, state.device, std::move(name_site));
  ThrowIfError(results.status(), "sync: launching the graph", loc);
  if (results->size() != expected_results) {
    ThrowIfError(absl::InternalError(absl::StrCat("the executable gave ", results->size(), " results for ",
                                                  expected_results, " pending tensors")),
                 "sync: launching the graph", loc);
  }
  event.device = state.device->id();
  event.arena_bytes = exe.proto().arena_bytes();
  event.peak_bytes = live_bytes + event.arena_bytes;
  for (const auto& r : *results) event.peak_bytes += r->shape().byte_size();
  RecordMemorySample(*state.device, event.peak_bytes);
  if (timing) {
    state.device->stream().Enqueue([exec_start, index = PeekNextSyncIndex(), device = state.device] {
      RecordExecution(index, *exec_start, NowMs());
      RecordMemorySample(*device);  // the arena is back
    });
  }
  if (!results->empty()) state.in_flight.push_back(results->back()->ready());
  return *std::move(results);
}

// Step 7: the synced tensors hold device buffers and drop their IR.
void Commit(PendingGraph& pending, std::vector<std::shared_ptr<pjrt::Buffer>>& results, DeviceState& state) {
  for (size_t i = 0; i < pending.tensors.size(); ++i) {
    pending.tensors[i]->buffer = std::move(results[i]);
    pending.tensors[i]->ir = {};
  }
  state.UnregisterSynced(pending.tensors);
  state.AdvanceRng();
}

// Synced graphs go to the releaser thread in batches: waking it costs several microseconds, which a
// small graph's sync should not pay every time. A batch goes once it holds kRetiredNodes nodes or
// keeps kRetiredBytes of device memory alive through its leaves (a training step's graph holds the
// previous parameters: those go at once), and at wait_device().
constexpr int64_t kRetiredNodes = 1 << 16;
constexpr int64_t kRetiredBytes = 1 << 20;

void HandOverRetired(Runtime& rt, DeviceState& state) {
  if (state.retired_graphs.empty()) return;
  rt.releaser().Enqueue([graphs = std::move(state.retired_graphs)]() mutable { graphs.clear(); });
  state.retired_graphs = {};
  state.retired_nodes = 0;
  state.retired_bytes = 0;
}

void Retire(Runtime& rt, DeviceState& state, std::vector<ir::Value> graph, int64_t nodes, int64_t leaf_bytes) {
  state.retired_graphs.push_back(std::move(graph));
  state.retired_nodes += nodes;
  state.retired_bytes += leaf_bytes;
  if (state.retired_nodes >= kRetiredNodes || state.retired_bytes >= kRetiredBytes) HandOverRetired(rt, state);
}

SyncOutcome OutcomeOf(ExecutableSource source) {
  switch (source) {
    case ExecutableSource::kMemory: return SyncOutcome::kMemoryHit;
    case ExecutableSource::kDisk: return SyncOutcome::kDiskHit;
    case ExecutableSource::kCompiled: return SyncOutcome::kCompiled;
  }
  std::abort();  // unreachable: the switch covers every source
}

}  // namespace

void Sync(Device device, SyncCause cause, const SourceLocation& loc) {
  Runtime& rt = Runtime::Get();
  DeviceState& state = rt.device_state(device, loc);
  ExecutableCache& executables = ExecutableCache::Get();
  std::lock_guard<std::mutex> lock(ExecutorMutex());
  const Clock::time_point start = Clock::now();
  state.traced_nodes = 0;
  SyncCounter(cause).fetch_add(1);

  PendingGraph pending = CollectPending(state);
  if (pending.tensors.empty()) {
    if (cause == SyncCause::kMarkStep) EndStep();  // a step boundary all the same
    return;
  }
  SyncEvent event;
  event.cause = cause;
  event.location = ir::LocationText(loc);
  event.start_ms = NowMs();
  event.trace_ms = TraceMsSince();

  // Post-order (DeviceData leaves become parameters), arguments, graph key.
  ir::PostOrder order(pending.roots);
  const ir::HashValue key = executables.GraphKey(order);
  std::vector<std::shared_ptr<pjrt::Buffer>> args = BuildArguments(order, rt, state, loc);
  int64_t arg_bytes = 0;
  for (const auto& a : args) arg_bytes += a->shape().byte_size();
  event.graph_key = key;
  event.nodes = static_cast<int64_t>(order.size());
  event.inputs = static_cast<int64_t>(args.size());
  event.outputs = static_cast<int64_t>(pending.roots.size());
  event.key_ms = MsSince(start);
  RecordTime("trace_to_key", event.key_ms);

  const FoundExecutable found = executables.FindOrCompile(key, order, pending.roots, rt.client(), state.device, loc);
  event.outcome = OutcomeOf(found.source);
  event.load_ms = found.load_ms;
  event.lower_ms = found.lower_ms;
  event.compile_ms = found.compile_ms;

  const Clock::time_point launch_start = Clock::now();
  std::vector<std::shared_ptr<pjrt::Buffer>> results =
      Launch(*found.executable, args, state, pending.tensors.size(), SiteNamerOf(order), event, loc);
  Commit(pending, results, state);
  event.launch_ms = MsSince(launch_start);
  RecordTime("launch", event.launch_ms);
  RecordTime("sync", MsSince(start));
  RecordSync(std::move(event), &order);
  // Last: `order` points into the graph, which may be freed as soon as it is handed over.
  Retire(rt, state, std::move(pending.roots), static_cast<int64_t>(order.size()), arg_bytes);
}

std::string PersistentCacheDir() { return ExecutableCache::Get().PersistentCacheDir(); }

}  // namespace detail

absl::string_view SyncCauseName(SyncCause cause) {
  switch (cause) {
    case SyncCause::kMarkStep: return "mark_step";
    case SyncCause::kItem: return "item";
    case SyncCause::kToHost: return "to_host";
    case SyncCause::kToDevice: return "to_device";
    case SyncCause::kBarrier: return "barrier";
    case SyncCause::kGraphLimit: return "graph_limit";
    case SyncCause::kExit: return "exit";
  }
  return "?";
}

void sync(Device device, SourceLocation loc) { detail::Sync(device, SyncCause::kMarkStep, loc); }
void mark_step(Device device, SourceLocation loc) { detail::Sync(device, SyncCause::kMarkStep, loc); }
void barrier(Device device, SourceLocation loc) { detail::Sync(device, SyncCause::kBarrier, loc); }
void wait_device(Device device) {
  detail::Runtime& rt = detail::Runtime::Get();
  rt.device_state(device, SourceLocation::current()).device->stream().Synchronize();
  {
    std::lock_guard<std::mutex> lock(detail::ExecutorMutex());
    detail::HandOverRetired(rt, rt.device_state(device, SourceLocation::current()));
  }
  rt.releaser().Synchronize();  // buffers held only by released graphs are free too
}

}  // namespace lazyrt
