// Turns an optimized HloModule into the kernels of an executable: decides which instructions are
// materialized and which are fused into their consumers (elementwise chains, broadcasts, transposes
// and slices as affine loads, and elementwise producers into reductions), then emits each kernel's
// program. Also assigns every materialized value a slot.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/hlo.h"

namespace lazyrt::pjrt {

struct FusionOptions {
  bool enabled = true;
  // Largest fused program, in steps; a bigger chain is cut into several kernels.
  int64_t max_program_steps = 48;
};

// Fills `exe`'s parameters, slots (kind and shape; arena offsets are left to AssignBuffers),
// kernels (in schedule order) and outputs. Returns the number of instructions fused away.
absl::StatusOr<int64_t> EmitKernels(const HloModule& module, const FusionOptions& options,
                                    proto::Executable& exe);

// Places every ARENA slot by liveness over the kernel schedule: a slot's bytes are reused once its
// last reader has run. Sets offsets and the arena size; returns the bytes saved over no reuse.
int64_t AssignBuffers(proto::Executable& exe);

}  // namespace lazyrt::pjrt
