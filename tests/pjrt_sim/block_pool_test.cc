#include "pjrt_sim/block_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

namespace lazyrt::pjrt {
namespace {

constexpr int64_t kBlock = 256 << 10;  // between a page and a huge page: cut from chunks
constexpr int64_t kBlocksPerChunk = static_cast<int64_t>(BlockPool::kChunkBytes) / kBlock;

uintptr_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(BlockPool, RoundsToWholeLinesAndGivesDistinctBlocksForNothing) {
  EXPECT_EQ(BlockPool::RoundedSize(0), 64u);
  EXPECT_EQ(BlockPool::RoundedSize(1), 64u);
  EXPECT_EQ(BlockPool::RoundedSize(64), 64u);
  EXPECT_EQ(BlockPool::RoundedSize(300), 320u);
  BlockPool pool(int64_t{1} << 30);
  void* a = pool.Take(0);
  void* b = pool.Take(0);
  ASSERT_NE(a, nullptr);
  EXPECT_NE(a, b);
  pool.Give(a, 0);
  pool.Give(b, 0);
  EXPECT_EQ(pool.cached_bytes(), 128);
}

TEST(BlockPool, CutsBlocksBetweenAPageAndAHugePageFromHugePageChunks) {
  if (!BlockPool::kChunked) GTEST_SKIP() << "every block is an allocation of its own under AddressSanitizer";
  BlockPool pool(int64_t{1} << 30);
  std::vector<void*> blocks;
  for (int64_t i = 0; i < kBlocksPerChunk + 1; ++i) blocks.push_back(pool.Take(kBlock));
  // Side by side in one chunk that starts on a huge page; the block past the chunk starts the next.
  EXPECT_EQ(Address(blocks[0]) % BlockPool::kHugePage, 0u);
  for (int64_t i = 1; i < kBlocksPerChunk; ++i) {
    EXPECT_EQ(Address(blocks[static_cast<size_t>(i)]), Address(blocks[0]) + static_cast<uintptr_t>(i * kBlock));
  }
  EXPECT_EQ(Address(blocks.back()) % BlockPool::kHugePage, 0u);
  EXPECT_EQ(pool.chunk_bytes(), static_cast<int64_t>(2 * BlockPool::kChunkBytes));
  for (void* b : blocks) std::memset(b, 0xab, kBlock);  // each is writable over its whole size
  // A block smaller than a page, and one of a huge page, are not cut from chunks.
  void* small = pool.Take(1000);
  void* huge = pool.Take(static_cast<int64_t>(BlockPool::kHugePage));
  EXPECT_EQ(Address(huge) % BlockPool::kHugePage, 0u);
  EXPECT_EQ(pool.chunk_bytes(), static_cast<int64_t>(2 * BlockPool::kChunkBytes));
  pool.Give(small, 1000);
  pool.Give(huge, static_cast<int64_t>(BlockPool::kHugePage));
  for (void* b : blocks) pool.Give(b, kBlock);
}

TEST(BlockPool, ReusesTheBlockFreedLastOfItsSize) {
  BlockPool pool(int64_t{1} << 30);
  for (int64_t bytes : {int64_t{100}, kBlock, int64_t{3} << 20}) {
    const int64_t cached = pool.cached_bytes();  // the sizes before
    void* a = pool.Take(bytes);
    void* b = pool.Take(bytes);
    pool.Give(a, bytes);
    pool.Give(b, bytes);
    EXPECT_EQ(pool.cached_bytes(), cached + 2 * static_cast<int64_t>(BlockPool::RoundedSize(bytes)));
    EXPECT_EQ(pool.Take(bytes), b) << bytes;
    EXPECT_EQ(pool.Take(bytes), a) << bytes;
    EXPECT_EQ(pool.cached_bytes(), cached);
    pool.Give(a, bytes);
    pool.Give(b, bytes);
    void* other_size = pool.Take(bytes + 64);  // a freed block serves only its own rounded size
    EXPECT_NE(other_size, a);
    EXPECT_NE(other_size, b);
    pool.Give(other_size, bytes + 64);
  }
}

TEST(BlockPool, ReturnsWholeChunksOnceTheFreedBlocksPassItsBound) {
  if (!BlockPool::kChunked) GTEST_SKIP() << "every block is an allocation of its own under AddressSanitizer";
  const int64_t bound = 3 * kBlock;
  BlockPool pool(bound);
  std::vector<void*> blocks;
  for (int64_t i = 0; i < 2 * kBlocksPerChunk; ++i) blocks.push_back(pool.Take(kBlock));
  ASSERT_EQ(pool.chunk_bytes(), static_cast<int64_t>(2 * BlockPool::kChunkBytes));
  // One block of the first chunk still in use keeps that chunk, and the freed blocks past the bound stay
  // while no chunk is free of blocks in use.
  for (size_t i = 1; i < static_cast<size_t>(kBlocksPerChunk); ++i) pool.Give(blocks[i], kBlock);
  EXPECT_EQ(pool.chunk_bytes(), static_cast<int64_t>(2 * BlockPool::kChunkBytes));
  EXPECT_EQ(pool.cached_bytes(), (kBlocksPerChunk - 1) * kBlock);
  // Its last block freed, the chunk goes back to the host with every block of it.
  pool.Give(blocks[0], kBlock);
  EXPECT_EQ(pool.chunk_bytes(), static_cast<int64_t>(BlockPool::kChunkBytes));
  EXPECT_EQ(pool.cached_bytes(), 0);
  // The second chunk: the same; under the bound, freed blocks stay for reuse.
  for (size_t i = static_cast<size_t>(kBlocksPerChunk); i < blocks.size(); ++i) pool.Give(blocks[i], kBlock);
  EXPECT_EQ(pool.chunk_bytes(), 0);
  EXPECT_EQ(pool.cached_bytes(), 0);
  void* again = pool.Take(kBlock);  // a new chunk
  EXPECT_EQ(pool.chunk_bytes(), static_cast<int64_t>(BlockPool::kChunkBytes));
  void* second = pool.Take(kBlock);
  pool.Give(again, kBlock);
  pool.Give(second, kBlock);
  EXPECT_EQ(pool.cached_bytes(), 2 * kBlock);
  EXPECT_EQ(pool.chunk_bytes(), static_cast<int64_t>(BlockPool::kChunkBytes));
  EXPECT_EQ(pool.Take(kBlock), second);
  pool.Give(second, kBlock);
}

TEST(BlockPool, FreesBlocksOfTheirOwnPastTheBound) {
  BlockPool pool(1000);
  void* a = pool.Take(640);
  void* b = pool.Take(640);
  pool.Give(a, 640);
  pool.Give(b, 640);  // over the bound: back to the host
  EXPECT_EQ(pool.cached_bytes(), 640);
  EXPECT_EQ(pool.Take(640), a);
  pool.Give(a, 640);
}

}  // namespace
}  // namespace lazyrt::pjrt
