#include "pjrt_sim/kernels/thread_scratch.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "pjrt_sim/block_pool.h"
#include "pjrt_sim/huge_pages.h"

namespace lazyrt::pjrt {

ScratchArray::~ScratchArray() {
  std::free(data);
  // A use after the thread's arrays are gone then grows a new one (and leaks it) instead of reusing freed memory.
  data = nullptr;
  capacity = 0;
}

void GrowScratch(ScratchArray& array, size_t bytes) {
  if (bytes <= array.capacity) return;
  if (bytes > SIZE_MAX / 4) throw std::bad_alloc();  // no capacity below could hold it without wrapping
  // Huge pages where the device cuts its blocks from chunks of them (BlockPool::Chunked): not under
  // AddressSanitizer, which sees the exact size only of what malloc gave.
  const bool huge = BlockPool::Chunked();
  const size_t capacity = huge ? (std::max(bytes, 2 * array.capacity) + kHugePage - 1) / kHugePage * kHugePage : bytes;
  void* data = nullptr;
  if (huge) {
    data = AllocateOnHugePages(capacity);
  } else if (posix_memalign(&data, 64, capacity) != 0) {
    data = nullptr;
  }
  if (data == nullptr) throw std::bad_alloc();
  if (array.capacity > 0) std::memcpy(data, array.data, array.capacity);
  std::free(array.data);
  array.data = data;
  array.capacity = capacity;
}

}  // namespace lazyrt::pjrt
