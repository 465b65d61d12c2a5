#include "pjrt_sim/hlo.h"

#include <algorithm>

#include "pjrt_sim/replica_groups.h"

namespace lazyrt::pjrt {

PrimitiveType FromProto(proto::ElementType type) {
  switch (type) {
    case proto::F32: return PrimitiveType::kF32;
    case proto::F64: return PrimitiveType::kF64;
    case proto::BF16: return PrimitiveType::kBF16;
    case proto::F16: return PrimitiveType::kF16;
    case proto::S32: return PrimitiveType::kS32;
    case proto::S64: return PrimitiveType::kS64;
    case proto::PRED: return PrimitiveType::kPred;
    case proto::ElementType_INT_MIN_SENTINEL_DO_NOT_USE_:
    case proto::ElementType_INT_MAX_SENTINEL_DO_NOT_USE_: break;
  }
  return PrimitiveType::kF32;  // unreachable for verified input (the verifier and loader check the type)
}

proto::ElementType ToProto(PrimitiveType type) {
  switch (type) {
    case PrimitiveType::kF32: return proto::F32;
    case PrimitiveType::kF64: return proto::F64;
    case PrimitiveType::kBF16: return proto::BF16;
    case PrimitiveType::kF16: return proto::F16;
    case PrimitiveType::kS32: return proto::S32;
    case PrimitiveType::kS64: return proto::S64;
    case PrimitiveType::kPred: return proto::PRED;
  }
  return proto::F32;
}

ArrayShape FromProto(const proto::Shape& shape) {
  return ArrayShape{FromProto(shape.type()), std::vector<int64_t>(shape.dims().begin(), shape.dims().end())};
}

proto::Shape ToProto(const ArrayShape& shape) {
  proto::Shape out;
  out.set_type(ToProto(shape.type));
  for (int64_t d : shape.dims) out.add_dims(d);
  return out;
}

HloModule FromVerifiedProto(const proto::Module& module) {
  HloModule out;
  out.name = module.name();
  out.num_partitions = std::max<int64_t>(module.num_partitions(), 1);
  out.insts.reserve(static_cast<size_t>(module.instructions_size()));
  for (const proto::Instruction& p : module.instructions()) {
    HloInst& h = out.insts.emplace_back();
    h.opcode = static_cast<Opcode>(p.opcode());
    h.operands.assign(p.operands().begin(), p.operands().end());
    h.shape = FromProto(p.shape());
    h.parameter_number = p.parameter_number();
    h.value = p.value();
    h.dims.assign(p.dims().begin(), p.dims().end());
    h.start.assign(p.start().begin(), p.start().end());
    h.limit.assign(p.limit().begin(), p.limit().end());
    h.stride.assign(p.stride().begin(), p.stride().end());
    h.axis = p.axis();
    h.direction = static_cast<CompareDirection>(p.direction());
    h.combiner = static_cast<Combiner>(p.combiner());
    h.stream = p.stream();
    h.site = p.site();
    h.transpose_lhs = p.transpose_lhs();
    h.transpose_rhs = p.transpose_rhs();
    h.causal = p.causal();
    h.dropout = p.dropout();
    if (ClassOf(h.opcode) == OpClass::kCollective) {
      // The verifier accepted the groups: this cannot fail.
      h.replica_groups = CheckReplicaGroups(p.replica_groups(), module.num_partitions()).value_or(ReplicaGroups{});
    }
    if (h.opcode == Opcode::kParameter) out.num_parameters = std::max(out.num_parameters, h.parameter_number + 1);
  }
  out.outputs.assign(module.outputs().begin(), module.outputs().end());
  return out;
}

proto::Module ToProto(const HloModule& module) {
  proto::Module out;
  out.set_name(module.name);
  out.set_num_partitions(module.num_partitions);
  for (const HloInst& h : module.insts) {
    proto::Instruction& p = *out.add_instructions();
    p.set_opcode(static_cast<int32_t>(h.opcode));
    p.mutable_operands()->Assign(h.operands.begin(), h.operands.end());
    *p.mutable_shape() = ToProto(h.shape);
    p.set_parameter_number(h.parameter_number);
    p.set_value(h.value);
    p.mutable_dims()->Assign(h.dims.begin(), h.dims.end());
    p.mutable_start()->Assign(h.start.begin(), h.start.end());
    p.mutable_limit()->Assign(h.limit.begin(), h.limit.end());
    p.mutable_stride()->Assign(h.stride.begin(), h.stride.end());
    p.set_axis(h.axis);
    p.set_direction(static_cast<int32_t>(h.direction));
    p.set_combiner(static_cast<int32_t>(h.combiner));
    p.set_stream(h.stream);
    p.set_site(h.site);
    p.set_transpose_lhs(h.transpose_lhs);
    p.set_transpose_rhs(h.transpose_rhs);
    p.set_causal(h.causal);
    p.set_dropout(h.dropout);
    for (const std::vector<int64_t>& group : h.replica_groups) {
      p.add_replica_groups()->mutable_partitions()->Assign(group.begin(), group.end());
    }
  }
  out.mutable_outputs()->Assign(module.outputs.begin(), module.outputs.end());
  return out;
}

}  // namespace lazyrt::pjrt
