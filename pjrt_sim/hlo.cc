#include "pjrt_sim/hlo.h"

#include "absl/strings/ascii.h"
#include "pjrt_sim/module_verifier.h"

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
    default: return PrimitiveType::kF32;  // unreachable for verified input
  }
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

absl::StatusOr<HloModule> FromProto(const proto::Module& module) {
  if (absl::Status s = VerifyModule(module); !s.ok()) return s;
  HloModule out;
  out.name = module.name();
  out.insts.reserve(static_cast<size_t>(module.instructions_size()));
  for (const proto::Instruction& p : module.instructions()) {
    HloInst& h = out.insts.emplace_back();
    h.opcode = p.opcode();
    h.operands.assign(p.operands().begin(), p.operands().end());
    h.shape = FromProto(p.shape());
    h.parameter_number = p.parameter_number();
    h.value = p.value();
    h.dims.assign(p.dims().begin(), p.dims().end());
    h.start.assign(p.start().begin(), p.start().end());
    h.limit.assign(p.limit().begin(), p.limit().end());
    h.stride.assign(p.stride().begin(), p.stride().end());
    h.axis = p.axis();
    h.direction = p.direction();
    h.stream = p.stream();
    h.transpose_lhs = p.transpose_lhs();
    h.transpose_rhs = p.transpose_rhs();
    if (h.opcode == proto::PARAMETER) out.num_parameters = std::max(out.num_parameters, h.parameter_number + 1);
  }
  out.outputs.assign(module.outputs().begin(), module.outputs().end());
  return out;
}

bool IsUnary(Opcode op) {
  switch (op) {
    case proto::NEGATE:
    case proto::ABS:
    case proto::EXP:
    case proto::LOG:
    case proto::SQRT:
    case proto::RSQRT:
    case proto::TANH:
    case proto::LOGISTIC:
    case proto::SIGN:
    case proto::NOT:
    case proto::CONVERT: return true;
    default: return false;
  }
}

bool IsBinary(Opcode op) {
  switch (op) {
    case proto::ADD:
    case proto::SUBTRACT:
    case proto::MULTIPLY:
    case proto::DIVIDE:
    case proto::POWER:
    case proto::MAXIMUM:
    case proto::MINIMUM:
    case proto::COMPARE:
    case proto::AND:
    case proto::OR: return true;
    default: return false;
  }
}

bool IsElementwise(Opcode op) { return IsUnary(op) || IsBinary(op) || op == proto::SELECT; }

bool IsGenerator(Opcode op) {
  return op == proto::CONSTANT || op == proto::IOTA || op == proto::RNG_UNIFORM || op == proto::RNG_NORMAL;
}

std::string OpcodeName(Opcode op) { return absl::AsciiStrToLower(proto::Opcode_Name(op)); }

}  // namespace lazyrt::pjrt
