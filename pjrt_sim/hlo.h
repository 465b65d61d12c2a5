// The compiler's working form of a Module: plain structs the passes rewrite in place. Invariant: an
// instruction's operands have smaller ids, so id order is a topological order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pjrt_sim/module.pb.h"
#include "pjrt_sim/opcode.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

struct HloInst {
  Opcode opcode = Opcode::kParameter;
  std::vector<int64_t> operands;
  ArrayShape shape;
  int64_t parameter_number = 0;
  double value = 0;
  std::vector<int64_t> dims, start, limit, stride;
  int64_t axis = 0;
  CompareDirection direction = CompareDirection::kEq;
  int64_t stream = 0;
  bool transpose_lhs = false;
  bool transpose_rhs = false;
  Combiner combiner = Combiner::kSum;
  bool causal = false;
  double dropout = 0;
  int64_t site = 0;
  // Collectives: every group written out (an instruction without groups gets the group of all).
  std::vector<std::vector<int64_t>> replica_groups;
};

struct HloModule {
  std::string name;
  std::vector<HloInst> insts;
  std::vector<int64_t> outputs;
  int64_t num_parameters = 0;
  int64_t num_partitions = 1;  // >= 1
};

PrimitiveType FromProto(proto::ElementType type);
proto::ElementType ToProto(PrimitiveType type);
ArrayShape FromProto(const proto::Shape& shape);
proto::Shape ToProto(const ArrayShape& shape);

// The working form of a module that VerifyModule accepted (the opcode numbers are known ones).
HloModule FromVerifiedProto(const proto::Module& module);
// The Module of a working form (for the verifier and for dumps; no mesh, no origins).
proto::Module ToProto(const HloModule& module);

}  // namespace lazyrt::pjrt
