// How a kernel splits the points it computes over the device's pool: into chunks of a grain.
#pragma once

#include <cstdint>
#include <functional>

namespace lazyrt::pjrt {

// Whether ForEachChunk(n, grain, ...) hands its chunks to the pool: more than one, of a positive grain.
bool SplitsIntoChunks(int64_t n, int64_t grain);

// Calls fn(begin, end) for [0, n) in tasks of `grain` elements over the pool, or once with [0, n) on the
// calling thread if grain <= 0 or grain >= n.
void ForEachChunk(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace lazyrt::pjrt
