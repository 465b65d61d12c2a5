// Software prefetch of the next block a streaming kernel reads and writes. A step's arrays are far larger
// than the caches, and its kernels write into arena memory last touched long before: each store of a
// block waited on the line's read for ownership, and each load on memory, with nothing overlapping them.
// Asking for the next block's lines while this one is computed overlaps the two: a layer norm over
// [4096, 128] on data fresh from memory (micro's BM_NormalizeKernel) took 592 / 950 us (forward /
// gradient) without, 362 / 559 us with the inputs and the output of the next block of rows prefetched
// (benchmarks/RESULTS.md).
#pragma once

#include <cstdint>

namespace lazyrt::pjrt {

inline constexpr int64_t kCacheLine = 64;
// At most this many bytes are asked for ahead of a block: the next block's lines land in the core's L1
// (32-48 KiB on the machines seen) beside the block being computed, and more evicted that block's. The
// MLP's AdamW update (7 arrays, 28 KiB a block ahead) ran 198 -> 245 us with its next block prefetched.
inline constexpr int64_t kMostPrefetchedBytes = int64_t{12} << 10;

// Asks for the lines of [p, p + bytes) to be brought into the cache, to be read.
inline void PrefetchToRead(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += kCacheLine) __builtin_prefetch(c + off, 0, 3);
}

// The same, to be written (in a state that lets the store proceed without waiting for the line).
inline void PrefetchToWrite(void* p, int64_t bytes) {
  char* c = static_cast<char*>(p);
  for (int64_t off = 0; off < bytes; off += kCacheLine) __builtin_prefetch(c + off, 1, 3);
}

}  // namespace lazyrt::pjrt
