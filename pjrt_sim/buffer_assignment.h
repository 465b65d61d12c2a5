// Buffer assignment: one arena per execution, planned at compile time.
#pragma once

#include <cstdint>

#include "pjrt_sim/executable.pb.h"

namespace lazyrt::pjrt {

// Places every ARENA slot by liveness over the kernel schedule: a slot's bytes are reused once its
// last reader has run. The largest are placed first, each clear of the slots live with it, the arena
// growing no more than at the lowest such offset: of that offset and the offsets of slots dead before it
// is written, the one whose bytes were read the latest (likelier still cached). Sets offsets and the arena
// size; returns the bytes saved over no reuse.
int64_t AssignBuffers(proto::Executable& exe);

}  // namespace lazyrt::pjrt
