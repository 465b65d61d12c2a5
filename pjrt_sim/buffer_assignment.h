// Buffer assignment: one arena per execution, planned at compile time.
#pragma once

#include <cstdint>

#include "pjrt_sim/executable.pb.h"

namespace lazyrt::pjrt {

// Places every ARENA slot by liveness over the kernel schedule: a slot's bytes are reused once its
// last reader has run. The largest are placed first, each at the lowest offset clear of the slots live
// with it. Sets offsets and the arena size; returns the bytes saved over no reuse.
int64_t AssignBuffers(proto::Executable& exe);

}  // namespace lazyrt::pjrt
