#include "pjrt_sim/block_pool.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <iterator>
#include <string_view>

#include "pjrt_sim/cpu_isa.h"
#include "pjrt_sim/huge_pages.h"

namespace lazyrt::pjrt {

bool BlockPool::Chunked() {
  static const bool chunked = BuildFlavor() != std::string_view("asan");
  return chunked;
}

size_t BlockPool::BlockBytes(int64_t bytes) {
  const size_t rounded = std::max<size_t>(64, (static_cast<size_t>(std::max<int64_t>(bytes, 0)) + 63) / 64 * 64);
  if (rounded < kMinChunkedBlock || rounded >= kHugePage || !Chunked()) return rounded;
  if (rounded > kMaxChunkedBlock) return kHugePage;  // past the last class: a whole huge page of its own
  const size_t step = std::bit_floor(rounded) / 4;   // four classes per power of two
  return (rounded + step - 1) / step * step;
}

BlockPool::~BlockPool() {
  for (auto& [size, blocks] : free_blocks_) {
    if (IsChunked(size)) continue;  // freed with their chunks
    for (void* b : blocks) std::free(b);
  }
  for (auto& [start, chunk] : chunks_) std::free(start);
}

void* BlockPool::Take(int64_t bytes) {
  const size_t size = BlockBytes(bytes);
  auto it = free_blocks_.find(size);
  if (it != free_blocks_.end() && !it->second.empty()) {
    void* reused = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= static_cast<int64_t>(size);
    if (IsChunked(size)) ChunkOf(reused).live += 1;
    return reused;
  }
  if (IsChunked(size)) return Cut(size);
  if (size < kHugePage) return std::aligned_alloc(64, size);
  return AllocateOnHugePages(size);
}

void* BlockPool::Cut(size_t block_bytes) {
  auto current = current_ != nullptr ? chunks_.find(current_) : chunks_.end();
  if (current == chunks_.end() || current->second.used + block_bytes > kChunkBytes) {
    char* start = static_cast<char*>(AllocateOnHugePages(kChunkBytes));
    if (start == nullptr) return nullptr;
    current = chunks_.emplace(start, Chunk{}).first;
    current_ = start;
  }
  Chunk& chunk = current->second;
  char* block = current->first + chunk.used;
  chunk.used += block_bytes;
  chunk.live += 1;
  return block;
}

BlockPool::Chunk& BlockPool::ChunkOf(void* block) {
  auto after = chunks_.upper_bound(static_cast<char*>(block));  // the first chunk starting after it
  // A chunked block lies in the chunk starting last before it; anything else is a caller's error that
  // would corrupt the counts.
  if (after == chunks_.begin() ||
      static_cast<char*>(block) >= std::prev(after)->first + std::prev(after)->second.used) {
    std::abort();
  }
  return std::prev(after)->second;
}

void BlockPool::Give(void* data, int64_t bytes) {
  if (data == nullptr) return;
  const size_t size = BlockBytes(bytes);
  const bool chunked = IsChunked(size);
  if (chunked) ChunkOf(data).live -= 1;
  if (!chunked && cached_bytes_ + static_cast<int64_t>(size) > max_cached_bytes_) {
    std::free(data);
    return;
  }
  free_blocks_[size].push_back(data);
  cached_bytes_ += static_cast<int64_t>(size);
  if (chunked && cached_bytes_ > max_cached_bytes_) ReleaseFreeChunks();
}

void BlockPool::ReleaseFreeChunks() {
  std::vector<std::pair<char*, char*>> released;  // [start, end) of each
  int64_t released_bytes = 0;
  for (auto it = chunks_.begin(); it != chunks_.end() && cached_bytes_ - released_bytes > max_cached_bytes_;) {
    if (it->second.live > 0 || it->first == current_) {
      ++it;
      continue;
    }
    released.emplace_back(it->first, it->first + kChunkBytes);
    released_bytes += static_cast<int64_t>(it->second.used);  // all of it on the free lists
    it = chunks_.erase(it);
  }
  if (released.empty()) return;
  auto in_released = [&](void* block) {
    char* b = static_cast<char*>(block);
    return std::ranges::any_of(released, [b](const auto& r) { return b >= r.first && b < r.second; });
  };
  for (auto& [size, blocks] : free_blocks_) {
    if (!IsChunked(size)) continue;
    const auto removed = std::ranges::remove_if(blocks, in_released);
    cached_bytes_ -= static_cast<int64_t>(size) * static_cast<int64_t>(removed.size());
    blocks.erase(removed.begin(), removed.end());
  }
  for (const auto& r : released) std::free(r.first);
}

}  // namespace lazyrt::pjrt
