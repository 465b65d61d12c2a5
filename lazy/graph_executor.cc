// The GraphExecutor: steps 1-4, 6 and 7 of the data flow in shared/DESIGN.md.
#include <chrono>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "ir/post_order.h"
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

struct Executor {
  std::mutex mu;
  LruCache<ir::HashValue, std::shared_ptr<pjrt::Executable>> executables{kExecutableCacheCapacity};
  pjrt::CompileOptions compile_options;
  // Everything besides the graph that changes the compiled result.
  ir::HashValue context_hash = 0;
};

Executor& GetExecutor() {
  static Executor* e = [] {
    auto* ex = new Executor;
    const std::string context = absl::StrCat(pjrt::Device::kKind, "|", pjrt::kCompilerVersion, "|",
                                             ex->compile_options.Fingerprint());
    ex->context_hash = ir::HashBytes(context.data(), context.size());
    return ex;
  }();
  return *e;
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

}  // namespace

void Sync(Device device, SyncCause cause, const SourceLocation& loc) {
  Runtime& rt = Runtime::Get();
  DeviceState& state = rt.device_state(device, loc);
  Executor& ex = GetExecutor();
  std::lock_guard<std::mutex> lock(ex.mu);
  const Clock::time_point start = Clock::now();
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
  if (pending.empty()) return;

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
      Counter("transfers_to_device").fetch_add(1);
    }
  }
  RecordTime("trace_to_key", MsSince(start));

  // 4 / 6. In-memory cache, else lower and compile.
  std::shared_ptr<pjrt::Executable> exe;
  if (std::shared_ptr<pjrt::Executable>* hit = ex.executables.Get(key)) {
    exe = *hit;
    Counter("executable_cache_hit").fetch_add(1);
  } else {
    const Clock::time_point lower_start = Clock::now();
    absl::StatusOr<pjrt::proto::Module> module = lowering::LowerGraph(order, absl::StrCat("graph_", ir::HashToHex(key)));
    ThrowIfError(module.status(), "sync: lowering the pending graph", loc);
    RecordTime("lower", MsSince(lower_start));
    const Clock::time_point compile_start = Clock::now();
    absl::StatusOr<std::shared_ptr<pjrt::Executable>> compiled =
        rt.client().Compile(*module, ex.compile_options, state.device);
    ThrowIfError(compiled.status(),
                 absl::StrCat("sync: compiling the pending graph (", order.size(), " nodes, ", roots.size(),
                              " outputs)"),
                 loc);
    RecordTime("compile", MsSince(compile_start));
    exe = *std::move(compiled);
    ex.executables.Put(key, exe);
    Counter("graphs_compiled").fetch_add(1);
  }

  // Execute; then 7: the synced tensors hold device buffers and drop their IR.
  const Clock::time_point exec_start = Clock::now();
  while (state.in_flight.size() >= kMaxInFlight) {
    state.in_flight.front()->Wait().IgnoreError();  // an error is reported by the buffers that have it
    state.in_flight.pop_front();
  }
  absl::StatusOr<std::vector<std::shared_ptr<pjrt::Buffer>>> results = exe->Execute(args, state.device);
  ThrowIfError(results.status(), "sync: launching the graph", loc);
  for (size_t i = 0; i < pending.size(); ++i) {
    pending[i]->buffer = (*results)[i];
    pending[i]->ir = {};
  }
  if (!results->empty()) state.in_flight.push_back(results->back()->ready());
  state.UnregisterSynced(pending);
  rt.releaser().Enqueue([graph = std::move(roots)]() mutable { graph.clear(); });
  state.AdvanceRng();
  RecordTime("launch", MsSince(exec_start));
  RecordTime("sync", MsSince(start));
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
  rt.releaser().Synchronize();  // buffers held only by released graphs are free too
}

}  // namespace lazyrt
