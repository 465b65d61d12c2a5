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
#include "lazy/distributed_internal.h"
#include "lazy/executable_cache.h"
#include "lazy/metrics.h"
#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lowering/dtype.h"
#include "pjrt_sim/elapsed.h"
#include "pjrt_sim/element_ops.h"

namespace lazyrt {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

// Executions a device may have queued before a sync waits for the oldest: the host runs ahead of the
// device by this many steps at most, so a step's memory is back in the pool when the step after next
// allocates (PJRT clients bound in-flight computations the same way).
constexpr size_t kMaxInFlight = 2;

// A host that waited for a launch slot resumes when the execution then running reaches its spare-core
// kernel, if that executable's runs went on from there for at least this many times what the host runs
// between two such waits; otherwise at once, as it does where the execution has no such kernel.
constexpr int64_t kSpareCoreMargin = 2;

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
  std::vector<Tensor> tensors;
  std::vector<ir::Value> roots;
};
PendingGraph CollectPending(DeviceState& state) {
  PendingGraph pending;
  for (Tensor& t : state.LiveTensors()) {
    const ir::Value& ir = t.impl()->ir;
    if (!ir || ir.node->op() == ir::OpKind::kDeviceData) continue;
    pending.roots.push_back(ir);
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

// A leaf's global value on the host: a host scalar, a buffer read back, or pieces on a mesh assembled.
std::vector<unsigned char> HostValue(const ir::Node& leaf, const SourceLocation& loc) {
  const Shape& shape = leaf.shape();
  std::vector<unsigned char> bytes(static_cast<size_t>(shape.byte_size()));
  absl::Status status = absl::OkStatus();
  if (const auto* b = dynamic_cast<const BufferLeaf*>(leaf.leaf_data().get())) {
    if (b->buffer) {
      status = b->buffer->ToHost(bytes.data(), bytes.size());
    } else {
      absl::StatusOr<std::vector<unsigned char>> assembled = AssembleOnHost(*b->sharded, shape);
      status = assembled.status();
      if (assembled.ok()) bytes = *std::move(assembled);
    }
  } else {
    pjrt::StoreElement(static_cast<const ScalarLeaf&>(*leaf.leaf_data()).value, lowering::DeviceType(shape.dtype()),
                       bytes.data());
  }
  ThrowIfError(status, "sync: reading an input of the graph", loc);
  return bytes;
}

std::shared_ptr<pjrt::Buffer> Upload(const std::vector<unsigned char>& bytes, const Shape& shape, pjrt::Client& client,
                                     pjrt::Device* device, const SourceLocation& loc) {
  absl::StatusOr<std::shared_ptr<pjrt::Buffer>> buffer = client.BufferFromHost(
      bytes.data(), {lowering::DeviceType(shape.dtype()), {shape.dims().begin(), shape.dims().end()}}, device);
  ThrowIfError(buffer.status(), "sync: uploading an input of the graph", loc);
  return *std::move(buffer);
}

// The layout an SPMD executable records for a value of `rank` dims: one mesh axis or -1 per dim.
std::vector<int64_t> DimAxes(const pjrt::proto::Sharding& sharding, size_t rank) {
  if (sharding.dim_axes().empty()) return std::vector<int64_t>(rank, -1);
  return {sharding.dim_axes().begin(), sharding.dim_axes().end()};
}

// Step 2 of an SPMD graph: each partition's parameters on its device. Pieces already laid out as the
// executable wants are passed on; any other value is sliced on the host and uploaded piece by piece.
std::vector<std::vector<std::shared_ptr<pjrt::Buffer>>> BuildPartitionArguments(const ir::PostOrder& order,
                                                                                const pjrt::Executable& exe,
                                                                                Runtime& rt,
                                                                                const SourceLocation& loc) {
  static std::atomic<int64_t>& transfers = Counter(counters::kTransfersToDevice);
  const pjrt::proto::Executable& p = exe.proto();
  const std::vector<int64_t> mesh(p.mesh().shape().begin(), p.mesh().shape().end());
  const std::vector<int64_t> devices(p.mesh().device_ids().begin(), p.mesh().device_ids().end());
  std::vector<std::vector<std::shared_ptr<pjrt::Buffer>>> args(devices.size());
  for (size_t i = 0; i < order.parameter_positions().size(); ++i) {
    const ir::Node& leaf = *order.nodes()[order.parameter_positions()[i]];
    const Shape& shape = leaf.shape();
    const std::vector<int64_t> axes =
        DimAxes(p.parameter_shardings(static_cast<int>(i)), static_cast<size_t>(shape.rank()));
    const auto* b = dynamic_cast<const BufferLeaf*>(leaf.leaf_data().get());
    if (b != nullptr && b->sharded != nullptr && b->sharded->SameLayout(mesh, devices, axes)) {
      for (size_t q = 0; q < devices.size(); ++q) {
        if (b->sharded->shards[q] != nullptr) args[q].push_back(b->sharded->shards[q]);
      }
      continue;
    }
    const std::vector<unsigned char> global = HostValue(leaf, loc);
    const std::vector<int64_t> dims(shape.dims().begin(), shape.dims().end());
    const int64_t width = pjrt::ByteWidth(lowering::DeviceType(shape.dtype()));
    for (size_t q = 0; q < devices.size(); ++q) {
      pjrt::Device* device = LocalDevice(rt, devices[q]);
      if (device == nullptr) continue;  // another process's partition
      std::vector<int64_t> local = dims;
      for (size_t d = 0; d < axes.size(); ++d) {
        if (axes[d] >= 0) local[d] /= mesh[static_cast<size_t>(axes[d])];
      }
      args[q].push_back(Upload(ShardBytes(global, dims, width, axes, mesh, static_cast<int64_t>(q)),
                               Shape(shape.dtype(), local), rt.client(), device, loc));
      transfers.fetch_add(1);
    }
  }
  return args;
}

// Step 2: the graph's parameters in post-order: the leaves' buffers, host scalars uploaded.
std::vector<std::shared_ptr<pjrt::Buffer>> BuildArguments(const ir::PostOrder& order, Runtime& rt, DeviceState& state,
                                                          const SourceLocation& loc) {
  static std::atomic<int64_t>& transfers = Counter(counters::kTransfersToDevice);  // looked up once
  std::vector<std::shared_ptr<pjrt::Buffer>> args;
  args.reserve(order.parameter_positions().size());
  for (uint32_t pos : order.parameter_positions()) {
    const ir::Node* leaf = order.nodes()[pos];
    if (const auto* b = dynamic_cast<const BufferLeaf*>(leaf->leaf_data().get()); b && b->buffer) {
      args.push_back(b->buffer);
    } else if (b) {  // pieces on a mesh, used by a graph on one device: the whole value goes there
      args.push_back(Upload(HostValue(*leaf, loc), leaf->shape(), rt.client(), state.device, loc));
      transfers.fetch_add(1);
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
// names are copied: the kernels may fail after the graph is freed. An executable without such kernels
// needs none, and the walk over every node is not free (2 us of a 1000-node graph's 34 us cache hit).
pjrt::Executable::SiteNamer SiteNamerOf(const ir::PostOrder& order, const pjrt::Executable& exe) {
  if (!exe.checks_indices()) return nullptr;
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

// Waits until fewer than `limit` executions are in flight on `state`'s device. Where the device's pool has
// a thread on every core, the host's tracing takes a core from the pool wherever it runs: at the start of
// the running execution, from a thread in the middle of its panel of a product, which the others then wait
// for; from its spare-core kernel on, from a thread with nothing to do. Resuming there, the MLP peer's step
// went 0.451 -> 0.434 ms near and 0.561-0.571 -> 0.524-0.541 far (benchmarks/RESULTS.md, 2026-11-29). It
// costs the host time to trace the step after the one it launches now: it has the rest of the running
// execution and the next, where it had all of both. So the host waits there only where the rest alone
// lasted kSpareCoreMargin times what it runs between waits. That run time's average drops at once to a
// shorter run and rises over a few: one long pause of the host's (an evaluation, a checkpoint) must not
// keep it from waiting for many steps after.
// With several devices in one process, other devices' executions may be using the pool meanwhile.
void AwaitLaunchSlot(DeviceState& state, size_t limit) {
  limit = std::max<size_t>(limit, 1);
  if (state.in_flight.size() < limit) return;
  if (state.resumed_at != Clock::time_point{}) {
    const int64_t ran = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - state.resumed_at).count();
    state.host_run_ns = state.host_run_ns < 0 || ran < state.host_run_ns ? ran : (3 * state.host_run_ns + ran) / 4;
  }
  while (state.in_flight.size() >= limit) {
    state.in_flight.front().done->Wait().IgnoreError();  // an error is reported by the buffers that have it
    state.in_flight.pop_front();
  }
  if (!state.in_flight.empty()) {
    const DeviceState::InFlight& running = state.in_flight.front();
    if (running.spare_core != nullptr && state.host_run_ns >= 0 &&
        running.after_spare_core_ns >= kSpareCoreMargin * state.host_run_ns) {
      running.spare_core->Wait().IgnoreError();  // set at the latest when the execution ends
    }
  }
  state.resumed_at = Clock::now();
}

std::vector<std::shared_ptr<pjrt::Buffer>> Launch(pjrt::Executable& exe,
                                                  const std::vector<std::shared_ptr<pjrt::Buffer>>& args,
                                                  DeviceState& state, size_t expected_results,
                                                  pjrt::Executable::SiteNamer name_site, SyncEvent& event,
                                                  const SourceLocation& loc) {
  AwaitLaunchSlot(state, kMaxInFlight);
  // Counted before the launch: a small graph may run (and free its arena) before Execute returns.
  const pjrt::MemoryStats before = state.device->memory_stats();
  // With timing on, markers on the (in-order) stream bracket the execution.
  const bool timing = TimingEnabled();
  auto exec_start = std::make_shared<double>(0);
  if (timing) state.device->stream().Enqueue([exec_start] { *exec_start = NowMs(); });
  auto spare_core = exe.spare_core_kernel() >= 0 ? std::make_shared<pjrt::Event>() : nullptr;
  absl::StatusOr<std::vector<std::shared_ptr<pjrt::Buffer>>> results =
      exe.Execute(args, state.device, std::move(name_site), spare_core);
  ThrowIfError(results.status(), "sync: launching the graph", loc);
  if (results->size() != expected_results) {
    ThrowIfError(absl::InternalError(absl::StrCat("the executable gave ", results->size(), " results for ",
                                                  expected_results, " pending tensors")),
                 "sync: launching the graph", loc);
  }
  event.device = state.device->id();
  event.arena_bytes = exe.proto().arena_bytes();
  // The arenas of queued executions count as the largest of them (Device::ReserveArena).
  event.peak_bytes = before.bytes_in_use + std::max<int64_t>(0, event.arena_bytes - before.arena_bytes);
  for (const auto& r : *results) event.peak_bytes += r->shape().byte_size();
  RecordMemorySample(*state.device, event.peak_bytes);
  if (timing) {
    state.device->stream().Enqueue([exec_start, index = PeekNextSyncIndex(), device = state.device] {
      RecordExecution(index, *exec_start, NowMs());
      RecordMemorySample(*device);  // the arena is back
    });
  }
  if (!results->empty()) {
    state.in_flight.push_back({results->back()->ready(), std::move(spare_core), exe.after_spare_core_ns()});
  }
  return *std::move(results);
}

// Launches an SPMD executable on its mesh's devices; each pending tensor gets its pieces, laid out as the
// executable says.
void LaunchPartitioned(const pjrt::Executable& exe, const std::vector<std::vector<std::shared_ptr<pjrt::Buffer>>>& args,
                       PendingGraph& pending, Runtime& rt, DeviceState& state, pjrt::Executable::SiteNamer name_site,
                       const SourceLocation& loc) {
  const pjrt::proto::Executable& p = exe.proto();
  std::vector<pjrt::Device*> devices;
  for (int64_t d : p.mesh().device_ids()) devices.push_back(LocalDevice(rt, d));  // null: another process's
  // As Launch does: at most kMaxInFlight executions ahead of the devices (one event per partition each).
  // Without the bound a host that traces faster than the mesh computes queues every step, and each queued
  // step holds its results: a 30-step run's peak grew to 30 steps' parameters and moments on each device.
  const size_t remote = static_cast<size_t>(std::count(devices.begin(), devices.end(), nullptr));
  AwaitLaunchSlot(state, kMaxInFlight * (devices.size() - remote));
  absl::StatusOr<std::vector<std::vector<std::shared_ptr<pjrt::Buffer>>>> results =
      exe.ExecutePartitioned(args, devices, CrossProcessCommunicator(), std::move(name_site));
  ThrowIfError(results.status(), "sync: launching the graph on its mesh", loc);
  for (size_t i = 0; i < pending.tensors.size(); ++i) {
    auto data = std::make_shared<ShardedData>();
    data->mesh_shape.assign(p.mesh().shape().begin(), p.mesh().shape().end());
    data->mesh_devices.assign(p.mesh().device_ids().begin(), p.mesh().device_ids().end());
    TensorImpl& tensor = *pending.tensors[i].impl();
    data->dim_axes = DimAxes(p.output_shardings(static_cast<int>(i)), static_cast<size_t>(tensor.shape.rank()));
    for (std::vector<std::shared_ptr<pjrt::Buffer>>& partition : *results) {
      data->shards.push_back(partition.empty() ? nullptr : partition[i]);
    }
    tensor.sharded = std::move(data);
    tensor.buffer = nullptr;
    tensor.ir = {};
  }
  for (const std::vector<std::shared_ptr<pjrt::Buffer>>& partition : *results) {
    if (!partition.empty()) state.in_flight.push_back({partition.back()->ready(), nullptr});
  }
  state.UnregisterSynced(pending.tensors);
  state.AdvanceRng();
}

// Step 7: the synced tensors hold device buffers and drop their IR.
void Commit(PendingGraph& pending, std::vector<std::shared_ptr<pjrt::Buffer>>& results, DeviceState& state) {
  for (size_t i = 0; i < pending.tensors.size(); ++i) {
    TensorImpl& tensor = *pending.tensors[i].impl();
    tensor.buffer = std::move(results[i]);
    tensor.sharded = nullptr;
    tensor.ir = {};
  }
  state.UnregisterSynced(pending.tensors);
  state.AdvanceRng();
}

// Synced graphs go to the releaser thread in batches: waking it costs several microseconds, which a
// small graph's sync should not pay every time. A batch goes once it holds kRetiredNodes nodes or
// keeps kRetiredBytes of device memory alive through its leaves (a training step's graph holds the
// previous parameters: those go at once), and at wait_device(). A batch of fewer than
// kInlineReleaseNodes nodes is freed on the calling thread instead: the MLP step's 237 nodes took 7 us
// there, less than waking the releaser costs the caller on a VM (6-15 us, Stream::wake_ns), and on a
// machine whose cores the device keeps busy the releaser's work took CPU from it as well (the step
// 0.487 -> 0.477 ms, 10 alternating pairs on a 2-core Zen 5). The GPT step's 2173 nodes took 262 us.
constexpr int64_t kRetiredNodes = 1 << 16;
constexpr int64_t kRetiredBytes = 1 << 20;
constexpr int64_t kInlineReleaseNodes = 1024;

void HandOverRetired(Runtime& rt, DeviceState& state) {
  if (state.retired_graphs.empty()) return;
  if (state.retired_nodes >= kInlineReleaseNodes) {
    rt.releaser().Enqueue([graphs = std::move(state.retired_graphs)]() mutable { graphs.clear(); });
  }
  state.retired_graphs = {};  // a small batch is freed here
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
  int64_t arg_bytes = 0;
  for (uint32_t pos : order.parameter_positions()) arg_bytes += order.nodes()[pos]->shape().byte_size();
  event.graph_key = key;
  event.nodes = static_cast<int64_t>(order.size());
  event.inputs = static_cast<int64_t>(order.parameter_positions().size());
  event.outputs = static_cast<int64_t>(pending.roots.size());
  event.key_ms = MsSince(start);
  RecordTime("trace_to_key", event.key_ms);

  const FoundExecutable found = executables.FindOrCompile(key, order, pending.roots, rt.client(), state.device, loc);
  event.outcome = OutcomeOf(found.source);
  event.load_ms = found.load_ms;
  event.lower_ms = found.lower_ms;
  event.compile_ms = found.compile_ms;
  event.compile_wait_ms = found.compile_wait_ms;
  event.outcome_detail = found.detail;

  const Clock::time_point launch_start = Clock::now();
  if (found.executable->num_partitions() > 1) {
    AgreeOnGraph(key, order, loc);  // before any collective can hang on a rank that traced otherwise
    RecordReshardings(key, found.executable->proto(), order);
    LaunchPartitioned(*found.executable, BuildPartitionArguments(order, *found.executable, rt, loc), pending, rt, state,
                      SiteNamerOf(order, *found.executable), loc);
  } else {
    std::vector<std::shared_ptr<pjrt::Buffer>> results =
        Launch(*found.executable, BuildArguments(order, rt, state, loc), state, pending.tensors.size(),
               SiteNamerOf(order, *found.executable), event, loc);
    Commit(pending, results, state);
  }
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
