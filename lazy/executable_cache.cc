#include "lazy/executable_cache.h"

#include <chrono>
#include <cstdio>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lazy/error.h"
#include "lazy/metrics.h"
#include "lazy/runtime.h"
#include "lowering/lower.h"
#include "pjrt_sim/version.h"

namespace lazyrt::detail {
namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// The persistent cache's name for a graph key.
std::string DiskKey(ir::HashValue key) { return absl::StrCat("g", ir::HashToHex(key)); }

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
  // The runtime's and the lowering rules' versions too: the same IR lowered by other rules is another
  // program.
  const std::string context = absl::StrCat("lazyrt ", LAZYRT_VERSION, "|", lowering::kLoweringVersion, "|",
                                           pjrt::Device::kKind, "|", pjrt::Executable::ProducerVersion(), "|",
                                           compile_options_.Fingerprint(), "|devices=", options.devices);
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
  if (!(*store)->trusted()) WarnOnce((*store)->warning());
  store_ = *std::move(store);
}

ir::HashValue ExecutableCache::GraphKey(const ir::PostOrder& order) const {
  return ir::HashCombine(order.dag_hash(), context_hash_);
}

FoundExecutable ExecutableCache::FindOrCompile(ir::HashValue key, const ir::PostOrder& order, size_t outputs,
                                               pjrt::Client& client, pjrt::Device* device,
                                               const SourceLocation& loc) {
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
  const std::string disk_key = DiskKey(key);
  if ((found.executable = LoadFromDisk(client, disk_key)) != nullptr) {
    found.source = ExecutableSource::kDisk;
    found.load_ms = MsSince(load_start);
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
    ThrowIfError(compiled.status(),
                 absl::StrCat("sync: compiling the pending graph (", order.size(), " nodes, ", outputs, " outputs)"),
                 loc);
    found.compile_ms = MsSince(compile_start);
    RecordTime("compile", found.compile_ms);
    found.executable = *std::move(compiled);
    Counter(counters::kGraphsCompiled).fetch_add(1);
    StoreOnDisk(disk_key, *found.executable, order, outputs, found.compile_ms);
  }
  std::lock_guard<std::mutex> lock(mu_);
  executables_.Put(key, found.executable);
  return found;
}

// Step 5: the executable stored under `disk_key` by an earlier process, or null (a miss, counted by
// reason; an entry that does not load is reported, removed and compiled afresh).
std::shared_ptr<pjrt::Executable> ExecutableCache::LoadFromDisk(pjrt::Client& client, const std::string& disk_key) {
  if (store_ == nullptr) return nullptr;
  const Clock::time_point start = Clock::now();
  cache::LookupResult found = store_->Lookup(disk_key);
  if (const cache::Miss* miss = std::get_if<cache::Miss>(&found)) {
    Counter(counters::kPersistentCacheMiss).fetch_add(1);
    Counter(PersistentCacheMissCounter(cache::MissReasonName(miss->reason))).fetch_add(1);
    return nullptr;
  }
  const cache::Entry& entry = std::get<cache::Entry>(found);
  absl::StatusOr<std::shared_ptr<pjrt::Executable>> loaded = client.LoadSerializedExecutable(entry.payload);
  if (!loaded.ok()) {
    store_->ReportUnloadable(disk_key, loaded.status().message());
    Counter(counters::kPersistentCacheMiss).fetch_add(1);
    Counter(PersistentCacheMissCounter(cache::MissReasonName(cache::MissReason::kUnloadable))).fetch_add(1);
    WarnOnce(absl::StrCat("cache entry ", disk_key, " did not load (", loaded.status().message(), "); compiling"));
    return nullptr;
  }
  Counter(counters::kPersistentCacheHit).fetch_add(1);
  RecordTime("persistent_cache_load", MsSince(start));
  RecordTime("persistent_cache_compile_ms_saved", entry.header.compile_ms);
  return *std::move(loaded);
}

// Stores a freshly compiled executable for later processes. Failing to write is a warning.
void ExecutableCache::StoreOnDisk(const std::string& disk_key, const pjrt::Executable& exe,
                                  const ir::PostOrder& order, size_t outputs, double compile_ms) {
  if (store_ == nullptr) return;
  const std::string metadata =
      absl::StrCat("{\"nodes\": ", order.size(), ", \"parameters\": ", order.parameter_positions().size(),
                   ", \"outputs\": ", outputs, ", \"module\": \"", exe.proto().module_name(), "\"}");
  absl::StatusOr<cache::PutOutcome> put = store_->Put(disk_key, exe.Serialize(), compile_ms, metadata);
  if (!put.ok()) {
    Counter(counters::kPersistentCacheWriteFailure).fetch_add(1);
    WarnOnce(absl::StrCat("could not store a compiled graph in the persistent cache: ", put.status().message()));
  } else if (*put == cache::PutOutcome::kWritten) {
    Counter(counters::kPersistentCacheWrite).fetch_add(1);
  }
}

}  // namespace lazyrt::detail
