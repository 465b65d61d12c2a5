// Turns an optimized HloModule into the kernels of an executable: decides which instructions are
// materialized and which are fused into their consumers (elementwise chains, broadcasts, transposes
// and slices as affine loads, and elementwise producers into reductions), then emits each kernel's
// program. Also gives every materialized value a slot (placed later by AssignBuffers).
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
  // A loop and a reduction of its space that read one value as one kernel (sibling fusion).
  bool siblings = true;
};

// Fills `exe`'s parameters, slots (kind and shape; arena offsets are left to AssignBuffers),
// kernels (in schedule order) and outputs. Returns the number of instructions fused away.
absl::StatusOr<int64_t> EmitKernels(const HloModule& module, const FusionOptions& options, proto::Executable& exe);

// How many modules in this process were emitted again without sibling fusion because it had ordered a
// kernel before one it reads (a bug; tests expect 0).
int64_t SiblingFusionFallbacks();

}  // namespace lazyrt::pjrt
