#include "lazy/executable_cache.h"

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdio>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lazy/error.h"
#include "lazy/metrics.h"
#include "lazy/runtime.h"
#include "lowering/dtype.h"
#include "lowering/lower.h"
#include "pjrt_sim/cpu_isa.h"
#include "pjrt_sim/elapsed.h"
#include "pjrt_sim/gemm_tuning.h"
#include "pjrt_sim/version.h"

namespace lazyrt::detail {
namespace {

using Clock = std::chrono::steady_clock;

// The persistent cache's name for a graph key.
std::string DiskKey(ir::HashValue key) { return absl::StrCat("g", ir::HashToHex(key)); }

// A graph signature is in the device's terms, so that `lazyrt cache verify` can check an executable
// without the IR.
// The global shapes of an executable's parameters or results: an SPMD executable's are its per-partition
// shapes times the mesh axes their dims are split over (the loader checked the shardings against the mesh).
std::vector<pjrt::ArrayShape> GlobalShapes(std::vector<pjrt::ArrayShape> shapes,
                                           const google::protobuf::RepeatedPtrField<pjrt::proto::Sharding>& shardings,
                                           const pjrt::proto::Mesh& mesh) {
  for (size_t i = 0; i < shapes.size() && i < static_cast<size_t>(shardings.size()); ++i) {
    const auto& axes = shardings[static_cast<int>(i)].dim_axes();
    for (size_t d = 0; d < shapes[i].dims.size() && d < static_cast<size_t>(axes.size()); ++d) {
      const int64_t axis = axes[static_cast<int>(d)];
      if (axis >= 0 && axis < mesh.shape_size()) shapes[i].dims[d] *= mesh.shape(static_cast<int>(axis));
    }
  }
  return shapes;
}

cache::TensorSignature SignatureOf(const Shape& shape) {
  return {std::string(pjrt::PrimitiveTypeName(lowering::DeviceType(shape.dtype()))),
          std::vector<int64_t>(shape.dims().begin(), shape.dims().end())};
}

std::vector<cache::TensorSignature> SignatureOf(const std::vector<pjrt::ArrayShape>& shapes) {
  std::vector<cache::TensorSignature> out;
  for (const pjrt::ArrayShape& s : shapes) out.push_back({std::string(pjrt::PrimitiveTypeName(s.type)), s.dims});
  return out;
}

void CountDiskMiss(cache::MissReason reason) {
  Counter(counters::kPersistentCacheMiss).fetch_add(1);
  Counter(PersistentCacheMissCounter(cache::MissReasonName(reason))).fetch_add(1);
}

}  // namespace

void WarnOnce(const std::string& text) {
  static std::mutex mu;
  static auto* seen = new absl::flat_hash_set<std::string>;
  std::lock_guard<std::mutex> lock(mu);
  if (seen->insert(text).second) std::fprintf(stderr, "lazyrt: warning: %s\n", text.c_str());
}

ExecutableCache& ExecutableCache::Get() {
  static ExecutableCache* cache = new ExecutableCache;
  return *cache;
}

ExecutableCache::ExecutableCache() {
  const Options& options = Runtime::Get().options();
  compile_options_.all_reduce_combine_bytes = options.all_reduce_combine_bytes;
  compile_options_.gemm_tuning_file =
      options.gemm_tuning_file.empty() ? pjrt::GemmTuningRecord::DefaultPath() : options.gemm_tuning_file;
  // The runtime's and the lowering rules' versions too: the same IR lowered by other rules is another
  // program.
  ingredients_ = {.lazyrt_version = LAZYRT_VERSION,
                  .lowering_version = std::string(lowering::kLoweringVersion),
                  .compiler_version = pjrt::Executable::ProducerVersion(),
                  .device_kind = std::string(pjrt::Device::kKind),
                  .device_count = options.devices,
                  .compile_options = compile_options_.Fingerprint()};
  const cache::KeyIngredients& k = ingredients_;
  // And the CPU's ISA features: executables are tuned on them (and refused on other features), so two
  // machines sharing a cache directory each keep their own entry instead of replacing each other's. So too
  // an instrumented build's (pjrt::BuildFlavor), whose measurements are of its instrumented kernels.
  const std::string flavor(pjrt::BuildFlavor());
  const std::string context = absl::StrCat("lazyrt ", k.lazyrt_version, "|", k.lowering_version, "|", k.device_kind,
                                           "|", k.compiler_version, "|", k.compile_options, "|devices=", k.device_count,
                                           "|cpu=", pjrt::HostIsa(), flavor.empty() ? "" : "|build=", flavor);
  context_hash_ = ir::HashBytes(context.data(), context.size());
  if (!options.persistent_cache) return;
  absl::StatusOr<std::unique_ptr<cache::Store>> store =
      cache::Store::Open({.dir = options.cache_dir,
                          .producer_version = pjrt::Executable::ProducerVersion(),
                          .read_only = options.cache_read_only,
                          .min_compile_ms = options.cache_min_compile_ms,
                          .max_bytes = static_cast<uint64_t>(options.cache_max_bytes)});
  if (!store.ok()) {
    WarnOnce(absl::StrCat("persistent cache off: ", store.status().message()));
    return;
  }
  if (!(*store)->warning().empty()) WarnOnce((*store)->warning());
  store_ = *std::move(store);
}

ir::HashValue ExecutableCache::GraphKey(const ir::PostOrder& order) const {
  return ir::HashCombine(order.dag_hash(), context_hash_);
}

FoundExecutable ExecutableCache::FindOrCompile(ir::HashValue key, const ir::PostOrder& order,
                                               std::span<const ir::Value> roots, pjrt::Client& client,
                                               pjrt::Device* device, const SourceLocation& loc) {
  FoundExecutable found;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::shared_ptr<pjrt::Executable>* hit = executables_.Get(key)) {
      static std::atomic<int64_t>& hits = Counter(counters::kExecutableCacheHit);  // looked up once
      hits.fetch_add(1);
      found.executable = *hit;
      return found;
    }
  }
  const Clock::time_point load_start = Clock::now();
  cache::EntryMetadata graph = GraphMetadata(DiskKey(key), order, roots);
  // Held from a miss until the entry is stored, so that other processes missing the graph meanwhile
  // wait for this one's entry instead of compiling it too.
  cache::CompileLease lease;
  found.executable = LoadFromDisk(client, graph);
  if (found.executable == nullptr) found.executable = LoadAfterCompileLease(client, graph, lease, found);
  if (found.executable != nullptr) {
    found.source = ExecutableSource::kDisk;
    found.load_ms = MsSince(load_start) - found.compile_wait_ms;
  } else {
    found.source = ExecutableSource::kCompiled;
    const Clock::time_point lower_start = Clock::now();
    absl::StatusOr<pjrt::proto::Module> module =
        lowering::LowerGraph(order, absl::StrCat("graph_", ir::HashToHex(key)));
    ThrowIfError(module.status(), "sync: lowering the pending graph", loc);
    found.lower_ms = MsSince(lower_start);
    RecordTime("lower", found.lower_ms);
    const Clock::time_point compile_start = Clock::now();
    absl::StatusOr<std::shared_ptr<pjrt::Executable>> compiled = client.Compile(*module, compile_options_, device);
    ThrowIfError(
        compiled.status(),
        absl::StrCat("sync: compiling the pending graph (", order.size(), " nodes, ", roots.size(), " outputs)"), loc);
    found.compile_ms = MsSince(compile_start);
    RecordTime("compile", found.compile_ms);
    found.executable = *std::move(compiled);
    Counter(counters::kGraphsCompiled).fetch_add(1);
    StoreOnDisk(*found.executable, std::move(graph), found.compile_ms);
    lease.Release();
  }
  // Ops of an SPMD graph computed replicated for want of a partitioning rule: correct, but each gathers its
  // operands whole on every device.
  Counter(counters::kSpmdReplicatedFallbacks).fetch_add(found.executable->proto().replicated_fallbacks());
  std::lock_guard<std::mutex> lock(mu_);
  executables_.Put(key, found.executable);
  return found;
}

cache::EntryMetadata ExecutableCache::GraphMetadata(const std::string& disk_key, const ir::PostOrder& order,
                                                    std::span<const ir::Value> roots) const {
  cache::EntryMetadata m;
  m.key = disk_key;
  m.graph_hash = ir::HashToHex(order.dag_hash());
  m.ingredients = ingredients_;
  for (uint32_t pos : order.parameter_positions()) m.parameters.push_back(SignatureOf(order.nodes()[pos]->shape()));
  for (const ir::Value& root : roots) m.results.push_back(SignatureOf(root.shape()));
  m.nodes = static_cast<int64_t>(order.size());
  return m;
}

// Step 5: the executable stored under graph.key by an earlier process, or null (a miss, counted by
// reason). The entry must fit the graph, since a checksum proves an entry undamaged, not that it
// belongs here: the store checks the signature the entry records, and here the loaded executable's
// parameters and results are checked against the graph's. An entry that does not load or fit is
// reported, removed and compiled afresh.
std::shared_ptr<pjrt::Executable> ExecutableCache::LoadFromDisk(pjrt::Client& client, const cache::EntryMetadata& graph,
                                                                bool count_miss) {
  if (store_ == nullptr) return nullptr;
  auto count = [count_miss](cache::MissReason reason) {
    if (count_miss) CountDiskMiss(reason);
  };
  const std::string& disk_key = graph.key;
  const Clock::time_point start = Clock::now();
  cache::LookupResult found = store_->Lookup(disk_key, &graph);
  if (const cache::Miss* miss = std::get_if<cache::Miss>(&found)) {
    count(miss->reason);
    if (miss->reason == cache::MissReason::kGraphMismatch || miss->reason == cache::MissReason::kKeyChanged) {
      WarnOnce(absl::StrCat("persistent cache miss for graph ", disk_key, " (", cache::MissReasonName(miss->reason),
                            "): ", miss->detail));
    }
    return nullptr;
  }
  const cache::Entry& entry = std::get<cache::Entry>(found);
  absl::StatusOr<std::shared_ptr<pjrt::Executable>> loaded = client.LoadSerializedExecutable(entry.payload);
  if (!loaded.ok()) {
    store_->ReportUnloadable(disk_key, loaded.status().message());
    count(cache::MissReason::kUnloadable);
    WarnOnce(absl::StrCat("cache entry ", disk_key, " did not load (", loaded.status().message(), "); compiling"));
    return nullptr;
  }
  cache::EntryMetadata actual;
  actual.key = disk_key;
  const pjrt::proto::Executable& proto = (*loaded)->proto();
  actual.parameters =
      SignatureOf(GlobalShapes((*loaded)->parameter_shapes(), proto.parameter_shardings(), proto.mesh()));
  actual.results = SignatureOf(GlobalShapes((*loaded)->output_shapes(), proto.output_shardings(), proto.mesh()));
  if (std::optional<std::string> mismatch = cache::SignatureMismatch(actual, graph)) {
    const std::string detail = absl::StrCat("the entry's executable does not fit the graph: ", *mismatch);
    store_->ReportUnusable(disk_key, cache::Miss{cache::MissReason::kGraphMismatch, detail});
    count(cache::MissReason::kGraphMismatch);
    WarnOnce(absl::StrCat("cache entry ", disk_key, ": ", detail, "; compiling"));
    return nullptr;
  }
  Counter(counters::kPersistentCacheHit).fetch_add(1);
  RecordTime("persistent_cache_load", MsSince(start));
  RecordTime("persistent_cache_compile_ms_saved", entry.header.compile_ms);
  return *std::move(loaded);
}

std::shared_ptr<pjrt::Executable> ExecutableCache::LoadAfterCompileLease(pjrt::Client& client,
                                                                         const cache::EntryMetadata& graph,
                                                                         cache::CompileLease& lease,
                                                                         FoundExecutable& found) {
  if (store_ == nullptr) return nullptr;
  const double bound_ms = Runtime::Get().options().compile_wait_ms;
  lease = store_->AcquireCompileLease(graph.key, absl::Milliseconds(bound_ms));
  if (!lease.error().empty()) {
    WarnOnce(absl::StrCat("no compile lease for graph ", graph.key, " (", lease.error(),
                          "): other processes missing it at the same time may compile it too"));
  }
  const int64_t pid = lease.holder_pid();
  const std::string holder = pid != 0 ? absl::StrCat("process ", pid) : "another process";
  if (lease.waited()) {
    found.compile_wait_ms = absl::ToDoubleMilliseconds(lease.wait_time());
    Counter(counters::kCompileWaits).fetch_add(1);
    RecordTime("compile_wait", found.compile_wait_ms);
  }
  // Looked for after a lease taken at once too: the entry may have been stored between the miss and
  // the lease. The miss is counted already (a damaged entry found again is the same miss).
  if (store_->Contains(graph.key)) {
    if (std::shared_ptr<pjrt::Executable> stored = LoadFromDisk(client, graph, /*count_miss=*/false)) {
      lease.Release();
      found.detail =
          pid != 0 ? absl::StrCat("compiled by another process (pid ", pid, ")") : "compiled by another process";
      return stored;
    }
  }
  if (lease.timed_out()) {
    WarnOnce(absl::StrCat("waited ", static_cast<int64_t>(found.compile_wait_ms), " ms for ", holder,
                          " compiling graph ", graph.key, " (the bound, LAZYRT_COMPILE_WAIT_MS=", bound_ms,
                          "); compiling it here too"));
  } else if (lease.waited()) {
    const bool died = pid != 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    WarnOnce(absl::StrCat(holder, died ? " died while compiling graph " : " stopped compiling graph ", graph.key,
                          " without storing it", died ? "" : " (its compile failed, or was not worth storing)",
                          "; compiling it here"));
  }
  return nullptr;
}

// Stores a freshly compiled executable for later processes, with the graph's metadata. Failing to
// write is a warning.
void ExecutableCache::StoreOnDisk(const pjrt::Executable& exe, cache::EntryMetadata graph, double compile_ms) {
  if (store_ == nullptr) return;
  graph.module = exe.proto().module_name();
  absl::StatusOr<cache::PutOutcome> put =
      store_->Put(graph.key, exe.Serialize(), compile_ms, cache::EncodeEntryMetadata(graph));
  if (!put.ok()) {
    Counter(counters::kPersistentCacheWriteFailure).fetch_add(1);
    WarnOnce(absl::StrCat("could not store a compiled graph in the persistent cache: ", put.status().message()));
  } else if (*put == cache::PutOutcome::kWritten) {
    Counter(counters::kPersistentCacheWrite).fetch_add(1);
  }
}

}  // namespace lazyrt::detail
