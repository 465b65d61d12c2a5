#include "pjrt_sim/block_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>

namespace lazyrt::pjrt {

namespace {
// `bytes` (a multiple of `alignment`) starting on a huge page where `alignment` is one, advised to be made of
// huge pages (THP, where the kernel allows them on request). With 4 KiB pages a stream missed the TLB every
// 1024 floats, and the CPU's prefetchers stop at page boundaries (on a Zen 3 BM_Gelu ran 8-18% and
// BM_AdamWUpdate/2048 16-29% faster: benchmarks/RESULTS.md). A block's last partial huge page is ordinary
// pages.
void* HugePageBlock(size_t bytes) {
  void* data = nullptr;
  if (posix_memalign(&data, BlockPool::kHugePage, bytes) != 0) return nullptr;
  madvise(data, bytes, MADV_HUGEPAGE);  // advice: without THP the pages are ordinary ones
  return data;
}
}  // namespace

size_t BlockPool::RoundedSize(int64_t bytes) {
  return std::max<size_t>(64, (static_cast<size_t>(std::max<int64_t>(bytes, 0)) + 63) / 64 * 64);
}

BlockPool::~BlockPool() {
  for (auto& [size, blocks] : free_blocks_) {
    if (IsChunked(size)) continue;  // freed with their chunks
    for (void* b : blocks) std::free(b);
  }
  for (auto& [start, chunk] : chunks_) std::free(start);
}

void* BlockPool::Take(int64_t bytes) {
  const size_t rounded = RoundedSize(bytes);
  auto it = free_blocks_.find(rounded);
  if (it != free_blocks_.end() && !it->second.empty()) {
    void* reused = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= static_cast<int64_t>(rounded);
    if (IsChunked(rounded)) ChunkOf(reused)->second.live += 1;
    return reused;
  }
  if (IsChunked(rounded)) return Cut(rounded);
  if (rounded < kHugePage) return std::aligned_alloc(64, rounded);
  return HugePageBlock(rounded);
}

void* BlockPool::Cut(size_t rounded) {
  auto current = current_ != nullptr ? chunks_.find(current_) : chunks_.end();
  if (current == chunks_.end() || current->second.used + rounded > kChunkBytes) {
    char* start = static_cast<char*>(HugePageBlock(kChunkBytes));
    if (start == nullptr) return nullptr;
    current = chunks_.emplace(start, Chunk{}).first;
    current_ = start;
  }
  Chunk& chunk = current->second;
  char* block = current->first + chunk.used;
  chunk.used += rounded;
  chunk.live += 1;
  return block;
}

std::map<char*, BlockPool::Chunk>::iterator BlockPool::ChunkOf(void* block) {
  auto it = chunks_.upper_bound(static_cast<char*>(block));  // the first chunk starting after it
  return std::prev(it);  // a chunked block lies in a chunk: the one starting last before it
}

void BlockPool::Give(void* data, int64_t bytes) {
  if (data == nullptr) return;
  const size_t rounded = RoundedSize(bytes);
  const bool chunked = IsChunked(rounded);
  if (chunked) ChunkOf(data)->second.live -= 1;
  if (!chunked && cached_bytes_ + static_cast<int64_t>(rounded) > max_cached_bytes_) {
    std::free(data);
    return;
  }
  free_blocks_[rounded].push_back(data);
  cached_bytes_ += static_cast<int64_t>(rounded);
  if (chunked && cached_bytes_ > max_cached_bytes_) ReleaseFreeChunks();
}

void BlockPool::ReleaseFreeChunks() {
  std::vector<std::pair<char*, char*>> released;  // [start, end) of each
  for (auto it = chunks_.begin(); it != chunks_.end();) {
    if (it->second.live > 0) {
      ++it;
      continue;
    }
    released.emplace_back(it->first, it->first + kChunkBytes);
    if (it->first == current_) current_ = nullptr;
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
