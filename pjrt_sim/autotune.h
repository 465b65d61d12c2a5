// Autotuning: the compiler's choice among kernel variants (GEMM panels, loop grains), made by timing
// them on the device, and stored in the executable so that loading it never measures again.
#pragma once

#include "absl/status/status.h"
#include "pjrt_sim/device.h"
#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/gemm_tuning.h"

namespace lazyrt::pjrt {

// Measures the candidate configurations of every kernel worth tuning on probe data in `device`'s memory,
// and keeps the fastest whose output is bit-identical to its reference's (a loop's serial run, a DOT's
// whole product on its GEMM library), so tuning never changes a result. Records every candidate's time
// in `exe.autotune`. With `gemm_tuning`, a DOT whose shape the machine's record lacks first has every
// GEMM library timed (each in its fastest variant); the fastest is recorded, the CPU's preferred one
// unless another beats it by kGemmLibraryMargin, and the DOT runs on whichever the record then names.
absl::Status Autotune(proto::Executable& exe, Device* device, const GemmTuningRecord* gemm_tuning = nullptr);

// How much faster than the preferred library another must measure to be recorded instead: more than
// the noise of a shared machine, so that the record does not flip on it.
inline constexpr double kGemmLibraryMargin = 0.10;

}  // namespace lazyrt::pjrt
