// Where a graph's executable comes from: the in-memory LRU, the persistent cache (steps 4 and 5 of the
// data flow in shared/DESIGN.md), or the compiler (step 6), which then stores it in both. Internal to
// lazy/.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "cache/entry_metadata.h"
#include "cache/store.h"
#include "ir/hash.h"
#include "ir/post_order.h"
#include "lazy/lru_cache.h"
#include "lazy/tensor.h"
#include "pjrt_sim/client.h"
#include "pjrt_sim/compiler.h"
#include "pjrt_sim/executable.h"

namespace lazyrt::detail {

// Where FindOrCompile found the executable.
enum class ExecutableSource { kMemory, kDisk, kCompiled };

struct FoundExecutable {
  std::shared_ptr<pjrt::Executable> executable;
  ExecutableSource source = ExecutableSource::kMemory;
  double load_ms = 0;     // reading and loading a persistent entry (kDisk)
  double lower_ms = 0;    // lowering the graph (kCompiled)
  double compile_ms = 0;  // compiling the module (kCompiled)
  // Waiting for another process that was compiling the same graph (cache/compile_lease.h).
  double compile_wait_ms = 0;
  // "compiled by another process (pid N)" for a disk hit on what another process compiled while this
  // one waited; empty otherwise.
  std::string detail;
};

class ExecutableCache {
 public:
  // The process's cache, configured from the runtime's options on first use.
  static ExecutableCache& Get();

  // The graph key of a post-ordered graph: its DAG hash combined with everything besides the graph that
  // changes the compiled result (runtime, lowering and compiler versions, device kind and count, compile
  // options).
  ir::HashValue GraphKey(const ir::PostOrder& order) const;

  // The executable of `order` (whose key is `key`, whose results are `roots`) from memory, else from
  // disk, else lowered and compiled for `device`. A disk entry is used only when it fits the graph
  // (its parameters' and results' dtypes and shapes). Throws lazyrt::Error (at `loc`) when lowering
  // or compiling fails.
  FoundExecutable FindOrCompile(ir::HashValue key, const ir::PostOrder& order, std::span<const ir::Value> roots,
                                pjrt::Client& client, pjrt::Device* device, const SourceLocation& loc);

  // Calls f(key, executable) for every executable held in memory, most recently used first.
  template <typename F>
  void ForEachLoaded(F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    executables_.ForEach(f);
  }

  // The directory of the persistent cache in use ("" when off).
  std::string PersistentCacheDir() const { return store_ != nullptr ? store_->dir() : ""; }

 private:
  ExecutableCache();
  // What an entry of this graph records and a load checks: the key, the graph's hash, the key's
  // ingredients and the graph's signature.
  cache::EntryMetadata GraphMetadata(const std::string& disk_key, const ir::PostOrder& order,
                                     std::span<const ir::Value> roots) const;
  // `count_miss` false: a second look for a graph whose miss is already counted (after the compile lease).
  std::shared_ptr<pjrt::Executable> LoadFromDisk(pjrt::Client& client, const cache::EntryMetadata& graph,
                                                 bool count_miss = true);
  void StoreOnDisk(const pjrt::Executable& exe, cache::EntryMetadata graph, double compile_ms);
  // After a disk miss: takes the graph's compile lease into `lease`, waiting for another process that
  // holds it. Returns the executable when another process stored it meanwhile (noted in `found`), else
  // null, the lease then held by this process when it could be taken.
  std::shared_ptr<pjrt::Executable> LoadAfterCompileLease(pjrt::Client& client, const cache::EntryMetadata& graph,
                                                          cache::CompileLease& lease, FoundExecutable& found);

  // Executables kept loaded in memory; beyond this the least recently used are dropped.
  static constexpr size_t kCapacity = 1024;

  std::mutex mu_;  // guards executables_ (FindOrCompile runs under the executor's lock; ForEach need not)
  LruCache<ir::HashValue, std::shared_ptr<pjrt::Executable>> executables_{kCapacity};
  pjrt::CompileOptions compile_options_;
  cache::KeyIngredients ingredients_;  // everything besides the graph in a key
  ir::HashValue context_hash_ = 0;
  std::unique_ptr<cache::Store> store_;  // null when off or when its directory cannot be used
};

// A warning on stderr, each distinct text once per process: a cache problem never fails a run, but it
// must not go unnoticed either.
void WarnOnce(const std::string& text);

}  // namespace lazyrt::detail
