// Where nodes live: thread-local slabs filled one node after another, in creation order.
//
// Tracing creates a step's nodes one after another and a traversal walks them operand by operand,
// which is mostly back along creation order. With the general allocator a graph's nodes are scattered
// among tensor handles and the holes the previous step's graph left, and a walk along a chain waits
// on one cache miss per node; packed in creation order, the walk reads memory the hardware
// prefetcher can stay ahead of. A slab is freed when its last node dies, on whatever thread.
#pragma once

#include <cstddef>

namespace lazyrt::ir {

namespace node_arena {
void* Allocate(size_t bytes);
void Free(void* p);
}  // namespace node_arena

// A standard allocator over node_arena, for std::allocate_shared (which places the control block and
// the node together).
template <typename T>
struct NodeAllocator {
  using value_type = T;
  NodeAllocator() = default;
  template <typename U>
  NodeAllocator(const NodeAllocator<U>&) {}  // NOLINT: rebinding is implicit by design
  T* allocate(size_t n) { return static_cast<T*>(node_arena::Allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t) { node_arena::Free(p); }
  template <typename U>
  bool operator==(const NodeAllocator<U>&) const {
    return true;
  }
};

}  // namespace lazyrt::ir
