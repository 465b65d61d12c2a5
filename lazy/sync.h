// Sync barriers: where the pending graph is compiled (or found in a cache) and executed.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"
#include "lazy/tensor.h"

namespace lazyrt {

// Why a sync happened (shared/DESIGN.md "Sync causes").
enum class SyncCause : uint8_t { kMarkStep, kItem, kToHost, kToDevice, kBarrier, kGraphLimit, kExit };
absl::string_view SyncCauseName(SyncCause cause);  // "mark_step", "item", "to_device", ...

// Ends the step on `device`: every live tensor with pending IR is computed by one graph. Returns once
// the work is enqueued; reading a result waits for it.
void sync(Device device = {}, LAZYRT_HERE);
// Alias of sync(), PyTorch/XLA's name.
void mark_step(Device device = {}, LAZYRT_HERE);
// A barrier inside a step: splits a graph too big to compile at once.
void barrier(Device device = {}, LAZYRT_HERE);
// Blocks until every result enqueued on `device` so far is computed and the graphs already synced
// are released.
void wait_device(Device device = {});

namespace detail {
// The sync behind all of the above and behind item()/to_host().
void Sync(Device device, SyncCause cause, const SourceLocation& loc);
}  // namespace detail

}  // namespace lazyrt
