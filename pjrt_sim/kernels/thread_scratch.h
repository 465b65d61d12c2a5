// Per-thread scratch arrays of the kernels, on huge pages.
#pragma once

#include <cstddef>

namespace lazyrt::pjrt {

// One thread's scratch array: the memory and its size.
struct ScratchArray {
  void* data = nullptr;
  size_t capacity = 0;
  ScratchArray() = default;
  ScratchArray(const ScratchArray&) = delete;
  ScratchArray& operator=(const ScratchArray&) = delete;
  ~ScratchArray();
};

// Makes `array` hold at least `bytes`, keeping what it held: whole huge pages, at least twice what it had
// (under AddressSanitizer exactly `bytes` from malloc, so that a kernel writing past its scratch is caught).
// Throws std::bad_alloc where the host has no memory.
void GrowScratch(ScratchArray& array, size_t bytes);

// Scratch a kernel's thread reuses from one run to the next: at least `bytes`, 64-byte aligned. Its
// contents are unspecified, and kept when it grows; a pointer stays valid until the next call with the
// same Tag on the same thread. Each Tag names an array of its own, so that a kernel can hold several.
// The cost: each array a thread uses takes at least a huge page: the f32 GPT's peak resident memory went
// 242 -> 257 MB with its two pool threads (~7 MB a thread).
//
// Why huge pages: on the 2-vCPU KVM machines of sessions 35-41, a store to a 4 KiB page not stored to
// for 20 ms took ~1 us, for 100 ms ~5 us, for 500 ms ~22 us; to a huge page 0.02-0.16 us
// (benchmarks/RESULTS.md, session 41). Scratch written once a training step (a scalar program's registers,
// a column reduction's sums) paid that on every page, every step.
template <typename Tag>
void* ThreadScratch(size_t bytes) {
  thread_local ScratchArray array;
  if (bytes > array.capacity) GrowScratch(array, bytes);
  return array.data;
}

}  // namespace lazyrt::pjrt
