// The GraphExecutor: steps 1-4, 6 and 7 of the data flow in shared/DESIGN.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cache/entry_metadata.h"
#include "cache/store.h"
#include "ir/graph_signature.h"
#include "ir/post_order.h"
#include "lazy/diagnostics_internal.h"
#include "lazy/lru_cache.h"
#include "lazy/metrics.h"
#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lowering/lower.h"
#include "pjrt_sim/compiler.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/version.h"

namespace lazyrt {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Executables kept loaded in memory; beyond this the least recently used are dropped.
constexpr size_t kExecutableCacheCapacity = 1024;
// Executions a device may have queued before a sync waits for the oldest: the host runs ahead of the
// device by this many steps at most, so a step's memory is back in the pool when the step after next
// allocates (PJRT clients bound in-flight computations the same way).
constexpr size_t kMaxInFlight = 2;

// A warning on stderr, each distinct text once per process: a cache problem never fails a run, but it
// must not go unnoticed either.
void WarnOnce(const std::string& text) {
  static std::mutex mu;
  static auto* seen = new absl::flat_hash_set<std::string>;
  std::lock_guard<std::mutex> lock(mu);
  if (seen->insert(text).second) std::fprintf(stderr, "lazyrt: warning: %s\n", text.c_str());
}

// The device's name of a dtype, as a loaded executable's shapes name it (the graph signature of a
// cache entry is in the device's terms, so that the CLI can check an executable without the IR).
absl::string_view DeviceTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "s32";
    case DType::kI64: return "s64";
    case DType::kBool: return "pred";
  }
  return "?";
}

cache::TensorSignature SignatureOf(const Shape& shape) {
  return {std::string(DeviceTypeName(shape.dtype())), std::vector<int64_t>(shape.dims().begin(), shape.dims().end())};
}

std::vector<cache::TensorSignature> SignatureOf(const std::vector<pjrt::ArrayShape>& shapes) {
  std::vector<cache::TensorSignature> out;
  for (const pjrt::ArrayShape& s : shapes) out.push_back({std::string(pjrt::PrimitiveTypeName(s.type)), s.dims});
  return out;
}

struct Executor {
  std::mutex mu;
  LruCache<ir::HashValue, std::shared_ptr<pjrt::Executable>> executables{kExecutableCacheCapacity};
  pjrt::CompileOptions compile_options;
  // Everything besides the graph that changes the compiled result, and its hash.
  cache::KeyIngredients ingredients;
  ir::HashValue context_hash = 0;
  // The persistent cache (null when off or when its directory cannot be used).
  std::unique_ptr<cache::Store> store;
};

Executor& GetExecutor() {
  static Executor* e = [] {
    auto* ex = new Executor;
    const Options& options = Runtime::Get().options();
    // The runtime's and the lowering rules' versions too: the same IR lowered by other rules is
    // another program.
    ex->ingredients = {.lazyrt_version = LAZYRT_VERSION,
                       .lowering_version = std::string(lowering::kLoweringVersion),
                       .compiler_version = pjrt::Executable::ProducerVersion(),
                       .device_kind = std::string(pjrt::Device::kKind),
                       .device_count = options.devices,
                       .compile_options = ex->compile_options.Fingerprint()};
    const cache::KeyIngredients& k = ex->ingredients;
    const std::string context = absl::StrCat("lazyrt ", k.lazyrt_version, "|", k.lowering_version, "|", k.device_kind,
                                             "|", k.compiler_version, "|", k.compile_options,
                                             "|devices=", k.device_count);
    ex->context_hash = ir::HashBytes(context.data(), context.size());
    if (options.persistent_cache) {
      absl::StatusOr<std::unique_ptr<cache::Store>> store = cache::Store::Open(
          {.dir = options.cache_dir,
           .producer_version = pjrt::Executable::ProducerVersion(),
           .read_only = options.cache_read_only,
           .min_compile_ms = options.cache_min_compile_ms,
           .max_bytes = static_cast<uint64_t>(options.cache_max_bytes)});
      if (!store.ok()) {
        WarnOnce(absl::StrCat("persistent cache off: ", store.status().message()));
      } else {
        if (!(*store)->warning().empty()) WarnOnce((*store)->warning());
        ex->store = *std::move(store);
      }
    }
    return ex;
  }();
  return *e;
}

// The persistent cache's name for a graph key.
std::string DiskKey(ir::HashValue key) { return absl::StrCat("g", ir::HashToHex(key)); }

// What a cache entry of the graph `order` (roots `roots`) records and a load checks: the key, the
// graph's hash, the key's ingredients and the graph's signature.
cache::EntryMetadata GraphMetadata(const Executor& ex, const std::string& key, const ir::PostOrder& order,
                                   std::span<const ir::Value> roots) {
  cache::EntryMetadata m;
  m.key = key;
  m.graph_hash = ir::HashToHex(order.dag_hash());
  m.ingredients = ex.ingredients;
  for (uint32_t pos : order.parameter_positions()) m.parameters.push_back(SignatureOf(order.nodes()[pos]->shape()));
  for (const ir::Value& root : roots) m.results.push_back(SignatureOf(root.shape()));
  m.nodes = static_cast<int64_t>(order.size());
  return m;
}

void CountDiskMiss(cache::MissReason reason) {
  Counter("persistent_cache_miss").fetch_add(1);
  Counter(absl::StrCat("persistent_cache_miss_", cache::MissReasonName(reason))).fetch_add(1);
}

// Step 5: the executable stored under `key` by an earlier process, or null (a miss, counted by
// reason). The entry must fit the graph: its recorded signature is checked by the store, and the
// loaded executable's parameters and results against the graph's, since a checksum proves an entry
// undamaged, not that it belongs here. An entry that does not load or fit is reported, removed and
// compiled afresh.
std::shared_ptr<pjrt::Executable> LoadFromDisk(Executor& ex, pjrt::Client& client, const std::string& key,
                                               const cache::EntryMetadata& graph) {
  if (ex.store == nullptr) return nullptr;
  const Clock::time_point start = Clock::now();
  cache::LookupResult found = ex.store->Lookup(key, &graph);
  if (const cache::Miss* miss = std::get_if<cache::Miss>(&found)) {
    CountDiskMiss(miss->reason);
    if (miss->reason == cache::MissReason::kGraphMismatch || miss->reason == cache::MissReason::kKeyChanged) {
      WarnOnce(absl::StrCat("persistent cache miss for graph ", key, " (", cache::MissReasonName(miss->reason),
                            "): ", miss->detail));
    }
    return nullptr;
  }
  const cache::Entry& entry = std::get<cache::Entry>(found);
  absl::StatusOr<std::shared_ptr<pjrt::Executable>> loaded = client.LoadSerializedExecutable(entry.payload);
  if (!loaded.ok()) {
    ex.store->ReportUnloadable(key, loaded.status().message());
    CountDiskMiss(cache::MissReason::kUnloadable);
    WarnOnce(absl::StrCat("cache entry ", key, " did not load (", loaded.status().message(), "); compiling"));
    return nullptr;
  }
  cache::EntryMetadata actual;
  actual.key = key;
  actual.parameters = SignatureOf((*loaded)->parameter_shapes());
  actual.results = SignatureOf((*loaded)->output_shapes());
  if (std::optional<std::string> mismatch = cache::SignatureMismatch(actual, graph)) {
    const std::string detail = absl::StrCat("the entry's executable does not fit the graph: ", *mismatch);
    ex.store->ReportUnusable(key, cache::Miss{cache::MissReason::kGraphMismatch, detail});
    CountDiskMiss(cache::MissReason::kGraphMismatch);
    WarnOnce(absl::StrCat("cache entry ", key, ": ", detail, "; compiling"));
    return nullptr;
  }
  Counter("persistent_cache_hit").fetch_add(1);
  RecordTime("persistent_cache_load", MsSince(start));
  RecordTime("persistent_cache_compile_ms_saved", entry.header.compile_ms);
  return *std::move(loaded);
}

// Stores a freshly compiled executable for later processes, with the graph's metadata. Failing to
// write is a warning.
void StoreOnDisk(Executor& ex, const std::string& key, const pjrt::Executable& exe, cache::EntryMetadata metadata,
                 double compile_ms) {
  if (ex.store == nullptr) return;
  metadata.module = exe.proto().module_name();
  absl::StatusOr<cache::PutOutcome> put =
      ex.store->Put(key, exe.Serialize(), compile_ms, cache::EncodeEntryMetadata(metadata));
  if (!put.ok()) {
    Counter("persistent_cache_write_failure").fetch_add(1);
    WarnOnce(absl::StrCat("could not store a compiled graph in the persistent cache: ", put.status().message()));
  } else if (*put == cache::PutOutcome::kWritten) {
    Counter("persistent_cache_write").fetch_add(1);
  }
}

// A host scalar leaf as a device buffer of the leaf's dtype.
std::shared_ptr<pjrt::Buffer> UploadScalar(double value, const Shape& shape, pjrt::Client& client,
                                           pjrt::Device* device, const SourceLocation& loc) {
  alignas(8) unsigned char bytes[8] = {};
  pjrt::PrimitiveType type = pjrt::PrimitiveType::kF32;
  switch (shape.dtype()) {
    case DType::kF32: { float v = static_cast<float>(value); std::memcpy(bytes, &v, 4); type = pjrt::PrimitiveType::kF32; break; }
    case DType::kF64: { std::memcpy(bytes, &value, 8); type = pjrt::PrimitiveType::kF64; break; }
    case DType::kBF16: { uint16_t v = pjrt::FloatToBf16(static_cast<float>(value)); std::memcpy(bytes, &v, 2); type = pjrt::PrimitiveType::kBF16; break; }
    case DType::kF16: { uint16_t v = pjrt::FloatToHalf(static_cast<float>(value)); std::memcpy(bytes, &v, 2); type = pjrt::PrimitiveType::kF16; break; }
    case DType::kI32: { int32_t v = pjrt::SaturatingCast<int32_t>(value); std::memcpy(bytes, &v, 4); type = pjrt::PrimitiveType::kS32; break; }
    case DType::kI64: { int64_t v = pjrt::SaturatingCast<int64_t>(value); std::memcpy(bytes, &v, 8); type = pjrt::PrimitiveType::kS64; break; }
    case DType::kBool: { bytes[0] = value != 0; type = pjrt::PrimitiveType::kPred; break; }
  }
  absl::StatusOr<std::shared_ptr<pjrt::Buffer>> buffer = client.BufferFromHost(bytes, {type, {}}, device);
  ThrowIfError(buffer.status(), "sync: uploading a scalar", loc);
  return *std::move(buffer);
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

}  // namespace

void Sync(Device device, SyncCause cause, const SourceLocation& loc) {
  Runtime& rt = Runtime::Get();
  DeviceState& state = rt.device_state(device, loc);
  Executor& ex = GetExecutor();
  std::lock_guard<std::mutex> lock(ex.mu);
  const Clock::time_point start = Clock::now();
  state.traced_nodes = 0;
  static std::atomic<int64_t>* const by_cause[] = {
      &Counter("sync_mark_step"), &Counter("sync_item"), &Counter("sync_to_host"),
      &Counter("sync_barrier"), &Counter("sync_graph_limit"), &Counter("sync_exit")};
  by_cause[static_cast<size_t>(cause)]->fetch_add(1);

  // 1. Live tensors with pending IR.
  std::vector<std::shared_ptr<TensorImpl>> pending;
  std::vector<ir::Value> roots;
  for (std::shared_ptr<TensorImpl>& t : state.LiveTensors()) {
    if (!t->ir || t->ir.node->op() == ir::OpKind::kDeviceData) continue;
    roots.push_back(t->ir);
    pending.push_back(std::move(t));
  }
  if (pending.empty()) {
    if (cause == SyncCause::kMarkStep) EndStep();  // a step boundary all the same
    return;
  }
  SyncEvent event;
  event.cause = cause;
  event.location = ir::LocationText(loc);
  event.start_ms = NowMs();
  event.trace_ms = TraceMsSince();

  // 2-3. Post-order, parameters, graph key.
  ir::PostOrder order(roots);
  const ir::HashValue key = ir::HashCombine(order.dag_hash(), ex.context_hash);
  std::vector<std::shared_ptr<pjrt::Buffer>> args;
  args.reserve(order.parameter_positions().size());
  for (uint32_t pos : order.parameter_positions()) {
    const ir::Node* leaf = order.nodes()[pos];
    if (const auto* b = dynamic_cast<const BufferLeaf*>(leaf->leaf_data().get())) {
      args.push_back(b->buffer);
    } else {
      const auto& s = static_cast<const ScalarLeaf&>(*leaf->leaf_data());
      args.push_back(UploadScalar(s.value, leaf->shape(), rt.client(), state.device, loc));
      static std::atomic<int64_t>& transfers = Counter("transfers_to_device");  // looked up once
      transfers.fetch_add(1);
    }
  }
  int64_t arg_bytes = 0;
  for (const auto& a : args) arg_bytes += a->shape().byte_size();
  event.graph_key = key;
  event.nodes = static_cast<int64_t>(order.size());
  event.inputs = static_cast<int64_t>(args.size());
  event.outputs = static_cast<int64_t>(roots.size());
  event.key_ms = MsSince(start);
  RecordTime("trace_to_key", event.key_ms);

  // 4 / 5 / 6. In-memory cache, else the persistent cache, else lower and compile.
  std::shared_ptr<pjrt::Executable> exe;
  const Clock::time_point lookup_start = Clock::now();
  if (std::shared_ptr<pjrt::Executable>* hit = ex.executables.Get(key)) {
    exe = *hit;
    Counter("executable_cache_hit").fetch_add(1);
    event.outcome = SyncOutcome::kMemoryHit;
  } else if ((exe = LoadFromDisk(ex, rt.client(), DiskKey(key), GraphMetadata(ex, DiskKey(key), order, roots))) !=
             nullptr) {
    ex.executables.Put(key, exe);
    event.outcome = SyncOutcome::kDiskHit;
    event.load_ms = MsSince(lookup_start);
  } else {
    event.outcome = SyncOutcome::kCompiled;
    const Clock::time_point lower_start = Clock::now();
    absl::StatusOr<pjrt::proto::Module> module = lowering::LowerGraph(order, absl::StrCat("graph_", ir::HashToHex(key)));
    ThrowIfError(module.status(), "sync: lowering the pending graph", loc);
    event.lower_ms = MsSince(lower_start);
    RecordTime("lower", event.lower_ms);
    const Clock::time_point compile_start = Clock::now();
    absl::StatusOr<std::shared_ptr<pjrt::Executable>> compiled =
        rt.client().Compile(*module, ex.compile_options, state.device);
    ThrowIfError(compiled.status(),
                 absl::StrCat("sync: compiling the pending graph (", order.size(), " nodes, ", roots.size(),
                              " outputs)"),
                 loc);
    const double compile_ms = MsSince(compile_start);
    event.compile_ms = compile_ms;
    RecordTime("compile", compile_ms);
    exe = *std::move(compiled);
    ex.executables.Put(key, exe);
    Counter("graphs_compiled").fetch_add(1);
    StoreOnDisk(ex, DiskKey(key), *exe, GraphMetadata(ex, DiskKey(key), order, roots), compile_ms);
  }

  // Execute; then 7: the synced tensors hold device buffers and drop their IR.
  const Clock::time_point exec_start = Clock::now();
  while (state.in_flight.size() >= kMaxInFlight) {
    state.in_flight.front()->Wait().IgnoreError();  // an error is reported by the buffers that have it
    state.in_flight.pop_front();
  }
  // With timing on, markers on the (in-order) stream bracket the execution.
  const bool timing = TimingEnabled();
  auto exec_times = std::make_shared<double>(0);
  if (timing) state.device->stream().Enqueue([exec_times] { *exec_times = NowMs(); });
  absl::StatusOr<std::vector<std::shared_ptr<pjrt::Buffer>>> results = exe->Execute(args, state.device);
  ThrowIfError(results.status(), "sync: launching the graph", loc);
  if (timing) {
    state.device->stream().Enqueue([exec_times, index = PeekNextSyncIndex()] { RecordExecution(index, *exec_times, NowMs()); });
  }
  if (results->size() != pending.size()) {  // an executable that does not fit would index out of bounds
    ThrowIfError(absl::InternalError(absl::StrCat("the executable gave ", results->size(), " results for ",
                                                  pending.size(), " pending tensors")),
                 "sync: launching the graph", loc);
  }
  for (size_t i = 0; i < pending.size(); ++i) {
    pending[i]->buffer = (*results)[i];
    pending[i]->ir = {};
  }
  if (!results->empty()) state.in_flight.push_back(results->back()->ready());
  state.UnregisterSynced(pending);
  state.AdvanceRng();
  event.launch_ms = MsSince(exec_start);
  RecordTime("launch", event.launch_ms);
  RecordTime("sync", MsSince(start));
  const bool new_graph = event.outcome != SyncOutcome::kMemoryHit;
  RecordSync(std::move(event), new_graph ? &order : nullptr);
  // Last: `order` points into the graph, which may be freed as soon as it is handed over.
  Retire(rt, state, std::move(roots), static_cast<int64_t>(order.size()), arg_bytes);
}

std::string KernelProfileText() {
  struct Row {
    std::string graph, kind, iteration, label;
    int kernel = 0;
    pjrt::Executable::KernelTime time;
  };
  std::vector<Row> rows;
  int64_t total_ns = 0;
  {
    Executor& ex = GetExecutor();
    std::lock_guard<std::mutex> lock(ex.mu);
    ex.executables.ForEach([&](const ir::HashValue& key, const std::shared_ptr<pjrt::Executable>& exe) {
      const std::vector<pjrt::Executable::KernelTime> times = exe->kernel_times();
      for (size_t k = 0; k < times.size(); ++k) {
        if (times[k].runs == 0) continue;
        const pjrt::proto::Kernel& kernel = exe->proto().kernels(static_cast<int>(k));
        rows.push_back({ir::HashToHex(key), pjrt::proto::Kernel::Kind_Name(kernel.kind()),
                        pjrt::KernelIterationText(kernel), kernel.label(), static_cast<int>(k), times[k]});
        total_ns += times[k].total_ns;
      }
    });
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.time.total_ns > b.time.total_ns; });
  constexpr size_t kShown = 30;
  std::string out = absl::StrFormat("device time by kernel: %.1f ms in %d kernels of the loaded executables%s\n",
                                    static_cast<double>(total_ns) / 1e6, rows.size(),
                                    rows.size() > kShown ? absl::StrCat(", the ", kShown, " longest") : "");
  absl::StrAppend(&out, absl::StrFormat("  %-16s %4s  %-6s  %-24s %7s %10s %9s %6s  %s\n", "GRAPH", "#", "KIND",
                                        "ITERATION", "RUNS", "TOTAL ms", "MEAN us", "SHARE", "LABEL"));
  for (size_t i = 0; i < rows.size() && i < kShown; ++i) {
    const Row& r = rows[i];
    absl::StrAppend(&out, absl::StrFormat("  %-16s %4d  %-6s  %-24s %7d %10.2f %9.1f %5.1f%%  %s\n", r.graph,
                                          r.kernel, r.kind, r.iteration, r.time.runs, r.time.total_ns / 1e6,
                                          r.time.total_ns / 1e3 / static_cast<double>(r.time.runs),
                                          100.0 * static_cast<double>(r.time.total_ns) / static_cast<double>(std::max<int64_t>(1, total_ns)),
                                          r.label));
  }
  return out;
}

std::string PersistentCacheDir() {
  const Executor& ex = GetExecutor();
  return ex.store != nullptr ? ex.store->dir() : "";
}

}  // namespace detail

absl::string_view SyncCauseName(SyncCause cause) {
  switch (cause) {
    case SyncCause::kMarkStep: return "mark_step";
    case SyncCause::kItem: return "item";
    case SyncCause::kToHost: return "to_host";
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
    std::lock_guard<std::mutex> lock(detail::GetExecutor().mu);
    detail::HandOverRetired(rt, rt.device_state(device, SourceLocation::current()));
  }
  rt.releaser().Synchronize();  // buffers held only by released graphs are free too
}

}  // namespace lazyrt
