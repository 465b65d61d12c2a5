// Autotuning: the compiler's choice among kernel variants (GEMM panels, loop grains), made by timing
// them on the device, and stored in the executable so that loading it never measures again.
#pragma once

#include "absl/status/status.h"
#include "pjrt_sim/device.h"
#include "pjrt_sim/executable.pb.h"

namespace lazyrt::pjrt {

// Measures the candidate configurations of every kernel worth tuning on probe data in `device`'s memory,
// and keeps the fastest whose output is bit-identical to its reference's (a loop's serial run, a DOT's
// whole product on its GEMM library), so tuning never changes a result. Records every candidate's time
// in `exe.autotune`.
absl::Status Autotune(proto::Executable& exe, Device* device);

}  // namespace lazyrt::pjrt
