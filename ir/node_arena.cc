#include "ir/node_arena.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace lazyrt::ir::node_arena {
namespace {

// Small enough that a node kept alive for long (a cached leaf) pins little memory; large enough for
// about 80 nodes.
constexpr size_t kSlabBytes = size_t{16} << 10;
constexpr size_t kAlign = 16;

// While a thread fills a slab, its allocations are counted in a plain thread-local integer, not in
// the slab's atomic count: one locked instruction less per node (locked instructions are much of
// what tracing an op costs, benchmarks/RESULTS.md). The filler's reference is a bias far above any allocation count, so
// frees on other threads never bring the count to zero meanwhile; when the thread moves on, it
// trades the bias for the allocations it made.
constexpr int64_t kFillerBias = int64_t{1} << 40;

struct alignas(kAlign) Slab {
  // kFillerBias while a thread fills it, plus one per live allocation once it is full (minus the frees
  // meanwhile): whoever brings it to zero frees the slab.
  std::atomic<int64_t> refs{kFillerBias};
};

constexpr size_t kFirstOffset = (sizeof(Slab) + kAlign - 1) / kAlign * kAlign;

Slab* SlabOf(void* p) { return reinterpret_cast<Slab*>(reinterpret_cast<uintptr_t>(p) & ~(kSlabBytes - 1)); }

void Release(Slab* slab, int64_t refs) {
  if (slab->refs.fetch_sub(refs, std::memory_order_acq_rel) == refs) {
    slab->~Slab();
    std::free(slab);
  }
}

// The slab this thread is filling.
struct Filling {
  Slab* slab = nullptr;
  size_t used = 0;
  int64_t allocations = 0;  // from this slab, by this thread
  // Gives up the filler's reference, keeping one per allocation made.
  void Retire() {
    if (slab != nullptr) Release(slab, kFillerBias - allocations);
    slab = nullptr;
    allocations = 0;
  }
  ~Filling() { Retire(); }
};
thread_local Filling filling;

}  // namespace

void* Allocate(size_t bytes) {
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  if (bytes > kSlabBytes - kFirstOffset) throw std::bad_alloc();  // never for a node
  Filling& f = filling;
  if (f.slab == nullptr || f.used + bytes > kSlabBytes) {
    f.Retire();
    void* memory = std::aligned_alloc(kSlabBytes, kSlabBytes);
    if (memory == nullptr) throw std::bad_alloc();
    f.slab = new (memory) Slab;
    f.used = kFirstOffset;
  }
  ++f.allocations;
  void* p = reinterpret_cast<char*>(f.slab) + f.used;
  f.used += bytes;
  return p;
}

void Free(void* p) { Release(SlabOf(p), 1); }

}  // namespace lazyrt::ir::node_arena
