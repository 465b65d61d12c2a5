// The compiler's working form of a Module: plain structs the passes rewrite in place. Invariant: an
// instruction's operands have smaller ids, so id order is a topological order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pjrt_sim/module.pb.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

using proto::CompareDirection;
using proto::Opcode;

struct HloInst {
  Opcode opcode = proto::OPCODE_INVALID;
  std::vector<int64_t> operands;
  ArrayShape shape;
  int64_t parameter_number = 0;
  double value = 0;
  std::vector<int64_t> dims, start, limit, stride;
  int64_t axis = 0;
  CompareDirection direction = proto::EQ;
  int64_t stream = 0;
  bool transpose_lhs = false;
  bool transpose_rhs = false;
};

struct HloModule {
  std::string name;
  std::vector<HloInst> insts;
  std::vector<int64_t> outputs;
  int64_t num_parameters = 0;
};

PrimitiveType FromProto(proto::ElementType type);
proto::ElementType ToProto(PrimitiveType type);
ArrayShape FromProto(const proto::Shape& shape);
proto::Shape ToProto(const ArrayShape& shape);

// A verified module in working form.
absl::StatusOr<HloModule> FromProto(const proto::Module& module);

// Opcode classes.
bool IsElementwise(Opcode op);   // unary, binary, compare, select, convert
bool IsUnary(Opcode op);         // one operand, elementwise (incl. CONVERT)
bool IsBinary(Opcode op);        // two operands, elementwise (incl. COMPARE)
bool IsGenerator(Opcode op);     // CONSTANT, IOTA, RNG_*: computed from the point alone
// Lowercase opcode name ("add", "reduce_sum").
std::string OpcodeName(Opcode op);

}  // namespace lazyrt::pjrt
