// The host memory behind a device's blocks: freed blocks kept for reuse, and blocks from a page up to a huge
// page cut out of huge-page chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

namespace lazyrt::pjrt {

// Not thread-safe: its device calls it under its lock.
//
// Why chunks: a block below a huge page from malloc lies on 4 KiB pages, and a kernel that streams through
// such blocks after the step's other work has evicted them takes a TLB miss (under a hypervisor, a
// two-level page walk) and a prefetcher restart every 4 KiB. The GPT's AdamW loops over [512, 128] weights
// and moments ran 460-1100 us a kernel in the step, 20-100 us run again at once; on huge pages 60-220 us
// (benchmarks/RESULTS.md, session 39). Blocks of a huge page or more are huge-page blocks of their own.
class BlockPool {
 public:
  // Blocks from this size up to kHugePage are cut from chunks; smaller ones (scalars, short vectors) fit
  // a page or two and come from malloc.
  static constexpr size_t kMinChunkedBlock = size_t{4} << 10;
  static constexpr size_t kHugePage = size_t{2} << 20;
  // Huge pages a chunk spans: a block that does not fit a chunk's rest starts the next chunk, so this
  // bounds the bytes left unused at the end of each chunk to under one block, at most a quarter of it.
  static constexpr size_t kChunkBytes = 4 * kHugePage;
  // Whether blocks are cut from chunks: not under AddressSanitizer, which then sees each block as an
  // allocation of its own and catches a kernel that writes past one.
#if defined(__SANITIZE_ADDRESS__)
  static constexpr bool kChunked = false;
#else
  static constexpr bool kChunked = true;
#endif

  // `max_cached_bytes`: freed blocks kept beyond this many bytes go back to the host (a chunk once all
  // its blocks are free).
  explicit BlockPool(int64_t max_cached_bytes) : max_cached_bytes_(max_cached_bytes) {}
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A 64-byte aligned block of at least `bytes` (a distinct one for 0): the block freed last of its
  // rounded size, else a new one; null where the host has no memory.
  void* Take(int64_t bytes);
  // Returns a block that Take gave for `bytes`.
  void Give(void* data, int64_t bytes);

  // Bytes of the freed blocks kept for reuse.
  int64_t cached_bytes() const { return cached_bytes_; }
  // Host bytes held in chunks, in use or not.
  int64_t chunk_bytes() const { return static_cast<int64_t>(chunks_.size() * kChunkBytes); }

  // The size a request of `bytes` takes: whole 64-byte lines, at least one.
  static size_t RoundedSize(int64_t bytes);

 private:
  struct Chunk {
    size_t used = 0;   // bytes cut from its start
    int64_t live = 0;  // blocks cut from it and not freed
  };
  static bool IsChunked(size_t rounded) { return kChunked && rounded >= kMinChunkedBlock && rounded < kHugePage; }
  void* Cut(size_t rounded);
  std::map<char*, Chunk>::iterator ChunkOf(void* block);
  // Frees the chunks none of whose blocks is in use, and their blocks from the free lists.
  void ReleaseFreeChunks();

  const int64_t max_cached_bytes_;
  int64_t cached_bytes_ = 0;
  // Freed blocks by rounded size, the last freed at the back.
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;
  std::map<char*, Chunk> chunks_;  // by start; the one blocks are cut from now is current_
  char* current_ = nullptr;
};

}  // namespace lazyrt::pjrt
