// Checks that a Module is well formed before anything trusts it: ids and operand references in range
// and topologically ordered, every shape consistent with its opcode and operands, attributes in range.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "pjrt_sim/module.pb.h"

namespace lazyrt::pjrt {

// The most elements an array of a verified module has (2^40: 4 TiB of f32); the kernels check the
// iteration spaces they are given against it too.
inline constexpr int64_t kMaxElements = int64_t{1} << 40;

// Whether an array of `dims` is one a kernel can walk: every dim in [0, kMaxElements] and their product,
// a 0 counting as 1, at most kMaxElements. Bounded also where a dim is 0 (an empty array): strides and
// partial products are computed from the other dims ([0, 2^32, 2^32] would overflow them).
bool DimsInRange(std::span<const int64_t> dims);

// OK, or INVALID_ARGUMENT naming the first bad instruction ("%5 add: ...") and what is wrong.
absl::Status VerifyModule(const proto::Module& module);

}  // namespace lazyrt::pjrt
