// Lowers a lazy IR graph to the device's Module format: one rule per op, composites decomposed
// (softmax, log_softmax, mean, gelu's tanh form, relu, one_hot), implicit broadcasting made explicit.
#pragma once

#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/node.h"
#include "ir/post_order.h"
#include "pjrt_sim/module.pb.h"

namespace lazyrt::lowering {

// The lowering rules' version: part of every graph key, so that an executable compiled from what an
// older rule emitted is never found for the same IR. Bump it whenever a rule changes its output.
// 3: exact gelu lowers to the GELU opcode; op kinds hashed by a stable id (OpKindStableId), not their
// number, which the ops appended in lazyrt-lowering/2's time had shifted under unchanged keys.
inline constexpr absl::string_view kLoweringVersion = "lazyrt-lowering/3";

// The Module computing the roots of `order`. Parameter i is the i-th DeviceData leaf of `order`
// (order.parameter_positions()[i]); output j is root j. Fails only on an op with no lowering rule.
absl::StatusOr<pjrt::proto::Module> LowerGraph(const ir::PostOrder& order, std::string name);

}  // namespace lazyrt::lowering
