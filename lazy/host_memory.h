// Host arrays for a device to read in place (Tensor::FromExternal): on huge pages. A dataset that batches are
// sliced from without a copy is read by the step's first kernels straight from this memory; on 4 KiB pages
// each page of it costs them a TLB miss and a prefetcher restart (the MLP peer's step ran ~14% slower with its
// dataset in a std::vector, medians of 6 alternating runs: benchmarks/RESULTS.md, session 39). Header-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "pjrt_sim/huge_pages.h"

namespace lazyrt {

// Rounds each allocation up to whole huge pages (under 2 MiB more), so that all of it can be huge.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  explicit HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t n) {
    if (n > (SIZE_MAX - pjrt::kHugePage) / sizeof(T)) throw std::bad_array_new_length();
    const size_t bytes = (n * sizeof(T) + pjrt::kHugePage - 1) / pjrt::kHugePage * pjrt::kHugePage;
    void* data = pjrt::AllocateOnHugePages(bytes);
    if (data == nullptr) throw std::bad_alloc();
    return static_cast<T*>(data);
  }
  void deallocate(T* data, size_t) { std::free(data); }
  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) { return true; }
};

template <class T>
using HostVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace lazyrt
