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

struct alignas(kAlign) Slab {
  // One reference per live allocation, plus one for the thread still filling it: whoever drops the
  // last frees the slab.
  std::atomic<int64_t> refs{1};
};

constexpr size_t kFirstOffset = (sizeof(Slab) + kAlign - 1) / kAlign * kAlign;

Slab* SlabOf(void* p) { return reinterpret_cast<Slab*>(reinterpret_cast<uintptr_t>(p) & ~(kSlabBytes - 1)); }

void Unref(Slab* slab) {
  if (slab->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    slab->~Slab();
    std::free(slab);
  }
}

// The slab this thread is filling.
struct Filling {
  Slab* slab = nullptr;
  size_t used = 0;
  ~Filling() {
    if (slab != nullptr) Unref(slab);
    slab = nullptr;
  }
};
thread_local Filling filling;

}  // namespace

void* Allocate(size_t bytes) {
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  if (bytes > kSlabBytes - kFirstOffset) throw std::bad_alloc();  // never for a node
  Filling& f = filling;
  if (f.slab == nullptr || f.used + bytes > kSlabBytes) {
    if (f.slab != nullptr) Unref(f.slab);
    void* memory = std::aligned_alloc(kSlabBytes, kSlabBytes);
    if (memory == nullptr) throw std::bad_alloc();
    f.slab = new (memory) Slab;
    f.used = kFirstOffset;
  }
  f.slab->refs.fetch_add(1, std::memory_order_relaxed);
  void* p = reinterpret_cast<char*>(f.slab) + f.used;
  f.used += bytes;
  return p;
}

void Free(void* p) { Unref(SlabOf(p)); }

}  // namespace lazyrt::ir::node_arena
