// Checks that a Module is well formed before anything trusts it: ids and operand references in range
// and topologically ordered, every shape consistent with its opcode and operands, attributes in range.
#pragma once

#include "absl/status/status.h"
#include "pjrt_sim/module.pb.h"

namespace lazyrt::pjrt {

// OK, or INVALID_ARGUMENT naming the first bad instruction ("%5 add: ...") and what is wrong.
absl::Status VerifyModule(const proto::Module& module);

}  // namespace lazyrt::pjrt
