// The NORMALIZE kernels: layer and RMS normalization over the trailing dims, and their gradients, row by
// row (statistics accumulated in f64 in a fixed order, two-pass for the variance); layer norm's with its
// affine too.
#pragma once

#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/kernels/kernels.h"
#include "pjrt_sim/opcode.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

// Why a NORMALIZE operation is malformed (INVALID_ARGUMENT), the module verifier's rule and the kernel
// loader's: `op` one of the kNormalize class, over the dims from `axis` on, with `epsilon`.
// - LAYER_NORM, RMS_NORM (x), their *_GRAD (x, dy): operands and result of x's shape and one float type.
// - Layer norm with its affine, f32 or f64 only: LAYER_NORM (x, weight, bias), weight and bias of the
//   normalized dims x[axis:]; LAYER_NORM_GRAD (x, dy, weight), axis >= 1, the result packed: x's dims with
//   dim axis - 1 (T rows a group) grown by 2, each group's T rows of dx followed by the group's sums of
//   dy x_hat and of dy (summed over the groups outside, into the weight's and the bias's gradients).
absl::Status CheckNormalize(Opcode op, std::span<const ArrayShape> operands, const ArrayShape& result, int64_t axis,
                            double epsilon);

// Validates a NORMALIZE kernel against its slots' shapes and builds it.
absl::StatusOr<std::unique_ptr<Kernel>> BuildNormalizeKernel(const proto::Kernel& kernel,
                                                             std::span<const ArrayShape> inputs,
                                                             const ArrayShape& output);

}  // namespace lazyrt::pjrt
