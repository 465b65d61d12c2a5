// Host memory on transparent huge pages: the device's large blocks and chunks (BlockPool), and host arrays a
// device reads in place (lazy/host_memory.h). Header-only, so that programs that do not link the runtime (the
// libtorch peers) can share their input arrays' memory with it.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>

namespace lazyrt::pjrt {

inline constexpr size_t kHugePage = size_t{2} << 20;

// `bytes` starting on a huge page, advised to be made of huge pages (THP, where the kernel gives them on
// request: the "madvise" mode these VMs run); null where the host has no memory; std::free releases it. With
// 4 KiB pages a stream misses the TLB every 1024 floats (under a hypervisor, a two-level page walk) and the
// CPU's prefetchers stop at each page boundary (on a Zen 3 BM_Gelu ran 8-18% and BM_AdamWUpdate/2048 16-29%
// faster on huge pages: benchmarks/RESULTS.md). Only whole huge pages of it are huge: the rest of a last
// partial one is ordinary pages.
inline void* AllocateOnHugePages(size_t bytes) {
  void* data = nullptr;
  if (posix_memalign(&data, kHugePage, bytes) != 0) return nullptr;
  madvise(data, bytes, MADV_HUGEPAGE);  // advice: without THP the pages are ordinary ones
  return data;
}

}  // namespace lazyrt::pjrt
