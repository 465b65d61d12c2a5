#include "pjrt_sim/block_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace lazyrt::pjrt {
namespace {

constexpr int64_t kBlock = 256 << 10;  // between a page and a huge page: cut from chunks
constexpr int64_t kBlocksPerChunk = static_cast<int64_t>(BlockPool::kChunkBytes) / kBlock;
constexpr int64_t kChunk = static_cast<int64_t>(BlockPool::kChunkBytes);

uintptr_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

#define SKIP_UNLESS_CHUNKED() \
  if (!BlockPool::Chunked()) GTEST_SKIP() << "every block is an allocation of its own under AddressSanitizer"

TEST(BlockPool, BlockSizesAreWholeLinesAndChunkedOnesFourClassesAPowerOfTwo) {
  EXPECT_EQ(BlockPool::BlockBytes(0), 64u);
  EXPECT_EQ(BlockPool::BlockBytes(1), 64u);
  EXPECT_EQ(BlockPool::BlockBytes(300), 320u);
  EXPECT_EQ(BlockPool::BlockBytes(4000), 4032u);                        // under a page: not chunked
  EXPECT_EQ(BlockPool::BlockBytes(int64_t{3} << 20), size_t{3} << 20);  // a block of its own
  SKIP_UNLESS_CHUNKED();
  EXPECT_EQ(BlockPool::BlockBytes(4096), 4096u);
  EXPECT_EQ(BlockPool::BlockBytes(4097), 5120u);
  EXPECT_EQ(BlockPool::BlockBytes(kBlock), static_cast<size_t>(kBlock));
  EXPECT_EQ(BlockPool::BlockBytes(kBlock + 1), static_cast<size_t>(kBlock + kBlock / 4));
  EXPECT_EQ(BlockPool::BlockBytes(384 * 128 * 4), 196608u);  // a [384, 128] f32 weight: a class of its own
  EXPECT_EQ(BlockPool::BlockBytes(1800000), BlockPool::kMaxChunkedBlock);
  EXPECT_EQ(BlockPool::BlockBytes(1900000), kHugePage);  // past the last class: a huge page of its own
  for (int64_t bytes = 4096; bytes <= static_cast<int64_t>(BlockPool::kMaxChunkedBlock); bytes = bytes * 9 / 8 + 64) {
    const size_t size = BlockPool::BlockBytes(bytes);
    EXPECT_GE(size, static_cast<size_t>(bytes));
    EXPECT_LE(size, static_cast<size_t>(bytes) * 5 / 4 + 64) << bytes;
    EXPECT_EQ(size % 64, 0u);
  }
}

TEST(BlockPool, GivesDistinctBlocksForNothing) {
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
  SKIP_UNLESS_CHUNKED();
  BlockPool pool(int64_t{1} << 30);
  std::vector<void*> blocks;
  for (int64_t i = 0; i < kBlocksPerChunk + 1; ++i) blocks.push_back(pool.Take(kBlock));
  // Side by side in one chunk that starts on a huge page; the block past the chunk starts the next.
  EXPECT_EQ(Address(blocks[0]) % kHugePage, 0u);
  for (int64_t i = 1; i < kBlocksPerChunk; ++i) {
    EXPECT_EQ(Address(blocks[static_cast<size_t>(i)]), Address(blocks[0]) + static_cast<uintptr_t>(i * kBlock));
  }
  EXPECT_EQ(Address(blocks.back()) % kHugePage, 0u);
  EXPECT_EQ(pool.chunk_bytes(), 2 * kChunk);
  for (void* b : blocks) std::memset(b, 0xab, kBlock);  // each is writable over its whole size
  // A block smaller than a page, and one of a huge page, are not cut from chunks.
  void* small = pool.Take(1000);
  void* huge = pool.Take(static_cast<int64_t>(kHugePage));
  EXPECT_EQ(Address(huge) % kHugePage, 0u);
  EXPECT_EQ(pool.chunk_bytes(), 2 * kChunk);
  pool.Give(small, 1000);
  pool.Give(huge, static_cast<int64_t>(kHugePage));
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
    EXPECT_EQ(pool.cached_bytes(), cached + 2 * static_cast<int64_t>(BlockPool::BlockBytes(bytes)));
    EXPECT_EQ(pool.Take(bytes), b) << bytes;
    EXPECT_EQ(pool.Take(bytes), a) << bytes;
    EXPECT_EQ(pool.cached_bytes(), cached);
    pool.Give(a, bytes);
    pool.Give(b, bytes);
    void* other_size = pool.Take(bytes * 2);  // a freed block serves only its own size
    EXPECT_NE(other_size, a);
    EXPECT_NE(other_size, b);
    pool.Give(other_size, bytes * 2);
  }
}

TEST(BlockPool, AFreedChunkedBlockServesEveryRequestOfItsClass) {
  SKIP_UNLESS_CHUNKED();
  BlockPool pool(int64_t{1} << 30);
  void* a = pool.Take(kBlock + 1);
  pool.Give(a, kBlock + 1);
  EXPECT_EQ(pool.Take(kBlock + kBlock / 4), a);  // the top of the class
  pool.Give(a, kBlock + kBlock / 4);
  // Shapes that change every step take the blocks their class freed: the chunks do not grow.
  for (int64_t step = 0; step < 200; ++step) {
    const int64_t bytes = kBlock + 64 * (step % 50);
    void* x = pool.Take(bytes);
    void* y = pool.Take(bytes);
    pool.Give(x, bytes);
    pool.Give(y, bytes);
  }
  EXPECT_EQ(pool.chunk_bytes(), kChunk);
}

TEST(BlockPool, ReturnsWholeChunksOnceTheFreedBlocksPassItsBound) {
  SKIP_UNLESS_CHUNKED();
  const int64_t bound = 3 * kBlock;
  BlockPool pool(bound);
  std::vector<void*> blocks;
  for (int64_t i = 0; i < 3 * kBlocksPerChunk; ++i) blocks.push_back(pool.Take(kBlock));
  ASSERT_EQ(pool.chunk_bytes(), 3 * kChunk);
  auto give = [&](int64_t from, int64_t to) {
    for (int64_t i = from; i < to; ++i) pool.Give(blocks[static_cast<size_t>(i)], kBlock);
  };
  // One block of the first chunk still in use keeps it, past the bound: nothing else can be returned.
  give(1, kBlocksPerChunk);
  EXPECT_EQ(pool.chunk_bytes(), 3 * kChunk);
  EXPECT_EQ(pool.cached_bytes(), (kBlocksPerChunk - 1) * kBlock);
  // A block taken again from a free list counts as in use: freeing the rest of its chunk keeps the chunk.
  void* again = pool.Take(kBlock);
  EXPECT_EQ(again, blocks[static_cast<size_t>(kBlocksPerChunk - 1)]);
  pool.Give(blocks[0], kBlock);
  EXPECT_EQ(pool.chunk_bytes(), 3 * kChunk);
  std::memset(again, 0xab, kBlock);  // still the pool's memory
  // Its last block freed, the chunk goes back to the host with all its blocks.
  pool.Give(again, kBlock);
  EXPECT_EQ(pool.chunk_bytes(), 2 * kChunk);
  EXPECT_EQ(pool.cached_bytes(), 0);
  // The chunk blocks are cut from stays, its freed blocks past the bound.
  give(kBlocksPerChunk, 3 * kBlocksPerChunk);
  EXPECT_EQ(pool.chunk_bytes(), kChunk);
  EXPECT_EQ(pool.cached_bytes(), kChunk);
  void* reused = pool.Take(kBlock);
  EXPECT_EQ(reused, blocks.back());
  pool.Give(reused, kBlock);
}

TEST(BlockPool, ReturnsOnlyTheChunksTheBoundNeeds) {
  SKIP_UNLESS_CHUNKED();
  BlockPool pool(kChunk + kChunk / 2);
  std::vector<void*> blocks;
  for (int64_t i = 0; i < 3 * kBlocksPerChunk; ++i) blocks.push_back(pool.Take(kBlock));
  for (int64_t i = 0; i < 2 * kBlocksPerChunk; ++i) pool.Give(blocks[static_cast<size_t>(i)], kBlock);
  // The first chunk freed was within the bound; the second took the freed bytes past it: one chunk went back.
  EXPECT_EQ(pool.chunk_bytes(), 2 * kChunk);
  EXPECT_EQ(pool.cached_bytes(), kChunk);
  for (int64_t i = 2 * kBlocksPerChunk; i < 3 * kBlocksPerChunk; ++i) pool.Give(blocks[static_cast<size_t>(i)], kBlock);
}

TEST(BlockPool, ReleasingAChunkTakesItsBlocksOffTheFreeLists) {
  SKIP_UNLESS_CHUNKED();
  BlockPool pool(kChunk / 2);
  // Chunk A: half of it blocks of one size, half of another; then the first blocks of chunk B.
  std::vector<void*> a;
  for (int64_t i = 0; i < kBlocksPerChunk / 2; ++i) a.push_back(pool.Take(kBlock));
  for (int64_t i = 0; i < kBlocksPerChunk; ++i) a.push_back(pool.Take(kBlock / 2));
  ASSERT_EQ(pool.chunk_bytes(), kChunk);
  void* b_big = pool.Take(kBlock);
  void* b_small = pool.Take(kBlock / 2);
  ASSERT_EQ(pool.chunk_bytes(), 2 * kChunk);
  const uintptr_t b_start = Address(b_big);
  for (size_t i = 0; i < a.size(); ++i)
    pool.Give(a[i], i < static_cast<size_t>(kBlocksPerChunk / 2) ? kBlock : kBlock / 2);
  EXPECT_EQ(pool.chunk_bytes(), kChunk);  // A, all free past the bound, went back
  EXPECT_EQ(pool.cached_bytes(), 0);
  pool.Give(b_big, kBlock);
  pool.Give(b_small, kBlock / 2);
  // Of either size, the free lists hold B's block alone: the next request of the size is cut from B.
  for (int64_t bytes : {kBlock, kBlock / 2}) {
    void* reused = pool.Take(bytes);
    void* cut = pool.Take(bytes);
    EXPECT_EQ(reused, bytes == kBlock ? b_big : b_small);
    EXPECT_GE(Address(cut), b_start);
    EXPECT_LT(Address(cut), b_start + static_cast<uintptr_t>(kChunk));
    pool.Give(reused, bytes);
    pool.Give(cut, bytes);
  }
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
