#include "pjrt_sim/kernels/thread_scratch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "pjrt_sim/block_pool.h"
#include "pjrt_sim/huge_pages.h"

namespace lazyrt::pjrt {
namespace thread_scratch_test {

uintptr_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

struct First;
struct Second;

TEST(ThreadScratch, GrowsKeepingItsBytesAndEachTagIsAnArrayOfItsOwn) {
  // Past any size an earlier test of this thread may have asked for.
  constexpr size_t kSmall = size_t{3} << 20, kLarge = size_t{7} << 20;
  auto* first = static_cast<uint32_t*>(ThreadScratch<First>(kSmall));
  EXPECT_EQ(Address(first) % 64, 0u);
  std::iota(first, first + kSmall / 4, 17u);
  auto* second = static_cast<uint32_t*>(ThreadScratch<Second>(kSmall));
  std::memset(second, 0xff, kSmall);                   // a separate array: the first keeps its values
  EXPECT_EQ(ThreadScratch<First>(kSmall / 2), first);  // smaller: the same memory
  auto* grown = static_cast<uint32_t*>(ThreadScratch<First>(kLarge));
  for (size_t i = 0; i < kSmall / 4; ++i) ASSERT_EQ(grown[i], 17u + i) << i;
  std::memset(grown, 0, kLarge);  // all of it is there
  if (BlockPool::Chunked()) {
    EXPECT_EQ(Address(grown) % kHugePage, 0u);
  }
}

TEST(ThreadScratch, EachThreadHasItsOwn) {
  void* here = ThreadScratch<First>(4096);
  void* there = nullptr;
  std::thread([&] { there = ThreadScratch<First>(4096); }).join();
  EXPECT_NE(here, there);
}

}  // namespace thread_scratch_test
}  // namespace lazyrt::pjrt
