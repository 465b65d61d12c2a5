// The NORMALIZE kernels: layer and RMS normalization over the trailing dims, and their gradients, row by
// row (statistics accumulated in f64 in a fixed order, two-pass for the variance); layer norm's with its
// affine too (pjrt_sim/normalize_shapes.h).
#pragma once

#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/kernels/kernels.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

// Validates a NORMALIZE kernel against its slots' shapes and builds it.
absl::StatusOr<std::unique_ptr<Kernel>> BuildNormalizeKernel(const proto::Kernel& kernel,
                                                             std::span<const ArrayShape> inputs,
                                                             const ArrayShape& output);

}  // namespace lazyrt::pjrt
