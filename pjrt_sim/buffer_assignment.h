// Buffer assignment: one arena per execution, planned at compile time.
#pragma once

#include <cstdint>

#include "pjrt_sim/executable.pb.h"

namespace lazyrt::pjrt {

// Places every ARENA slot by liveness over the kernel schedule: a slot's bytes are reused once its
// last reader has run. The largest are placed first, each where no slot live with it is and the arena
// grows no more than at the lowest such offset: of those places, the one read the latest before it is
// written (likelier still cached). Sets offsets and the arena size; returns the bytes saved over no reuse.
int64_t AssignBuffers(proto::Executable& exe);

}  // namespace lazyrt::pjrt
