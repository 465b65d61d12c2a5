// The host memory behind a device's blocks: freed blocks kept for reuse, and blocks from a page up to a huge
// page cut out of huge-page chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "pjrt_sim/huge_pages.h"

namespace lazyrt::pjrt {

// Not thread-safe: its device calls it under its lock.
//
// Why chunks: a block below a huge page from malloc lies on 4 KiB pages (huge_pages.h says what that costs
// a kernel streaming through it). The GPT's AdamW loops over [512, 128] weights and moments, whose blocks the
// step's other work had evicted, ran 460-1140 us a kernel in the step and 20-190 us run again at once; cut
// from huge pages, 50-310 us, most under 100 (benchmarks/RESULTS.md, session 39).
//
// Chunked blocks take sizes of a few classes (four per power of two, at most 25% over the request): a freed
// one serves any request of its class, so the bytes of a class are at most the most of it ever in use at
// once, however the shapes vary. A chunk goes back to the host once all its blocks are free and the freed
// bytes kept pass the bound; until then its free blocks are kept, past the bound if they must be.
class BlockPool {
 public:
  // Blocks from this size up to kMaxChunkedBlock are cut from chunks; smaller ones (scalars, short
  // vectors) fit a page or two and come from malloc; larger ones are blocks of their own on huge pages,
  // a whole one for those under a huge page.
  static constexpr size_t kMinChunkedBlock = size_t{4} << 10;
  static constexpr size_t kMaxChunkedBlock = size_t{7} << 18;  // 1.75 MiB, the last class below a huge page
  // A block that does not fit the rest of a chunk starts the next one: this bounds the bytes left unused
  // at a chunk's end to under one block, at most 22% of the chunk.
  static constexpr size_t kChunkBytes = 4 * kHugePage;
  // Whether blocks are cut from chunks: not under AddressSanitizer, which then sees each block as an
  // allocation of its own and catches a kernel that writes past one.
  static bool Chunked();

  // `max_cached_bytes`: the freed bytes to keep for reuse.
  explicit BlockPool(int64_t max_cached_bytes) : max_cached_bytes_(max_cached_bytes) {}
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A 64-byte aligned block of BlockBytes(bytes) (a distinct one for 0): the block of that size freed
  // last, else a new one; null where the host has no memory.
  void* Take(int64_t bytes);
  // Returns a block that Take gave for `bytes`.
  void Give(void* data, int64_t bytes);

  // The bytes a request of `bytes` takes: whole 64-byte lines, at least one; a chunked block's class.
  static size_t BlockBytes(int64_t bytes);
  // Bytes of the freed blocks kept for reuse.
  int64_t cached_bytes() const { return cached_bytes_; }
  // Host bytes held in chunks, in use or not.
  int64_t chunk_bytes() const { return static_cast<int64_t>(chunks_.size() * kChunkBytes); }

 private:
  struct Chunk {
    size_t used = 0;   // bytes cut from its start
    int64_t live = 0;  // blocks cut from it and not freed
  };
  static bool IsChunked(size_t block_bytes) {
    return block_bytes >= kMinChunkedBlock && block_bytes <= kMaxChunkedBlock && Chunked();
  }
  void* Cut(size_t block_bytes);
  Chunk& ChunkOf(void* block);
  // Frees chunks none of whose blocks is in use, and their blocks from the free lists, until the freed
  // bytes kept are within the bound; not the chunk blocks are being cut from.
  void ReleaseFreeChunks();

  const int64_t max_cached_bytes_;
  int64_t cached_bytes_ = 0;
  // Freed blocks by size, the last freed at the back.
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;
  std::map<char*, Chunk> chunks_;  // by start
  char* current_ = nullptr;        // the chunk blocks are cut from now
};

}  // namespace lazyrt::pjrt
