#include "lowering/lower.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lazyrt::lowering {
namespace {

using ir::AttrKey;
using ir::OpKind;
namespace proto = pjrt::proto;

// Appends instructions to a Module and returns their ids.
class ModuleBuilder {
 public:
  explicit ModuleBuilder(proto::Module& m) : m_(m) {}

  const proto::Shape& ShapeOf(int64_t id) const { return m_.instructions(static_cast<int>(id)).shape(); }
  std::vector<int64_t> DimsOf(int64_t id) const {
    const proto::Shape& s = ShapeOf(id);
    return {s.dims().begin(), s.dims().end()};
  }

  proto::Instruction* Add(proto::Opcode op, proto::ElementType type, const std::vector<int64_t>& dims,
                          std::initializer_list<int64_t> operands, int64_t* id) {
    proto::Instruction* inst = m_.add_instructions();
    inst->set_opcode(op);
    inst->mutable_shape()->set_type(type);
    for (int64_t d : dims) inst->mutable_shape()->add_dims(d);
    for (int64_t o : operands) inst->add_operands(o);
    *id = m_.instructions_size() - 1;
    return inst;
  }
  int64_t Simple(proto::Opcode op, proto::ElementType type, const std::vector<int64_t>& dims,
                 std::initializer_list<int64_t> operands) {
    int64_t id;
    Add(op, type, dims, operands, &id);
    return id;
  }
  int64_t Constant(double value, proto::ElementType type, const std::vector<int64_t>& dims) {
    int64_t id;
    Add(proto::CONSTANT, type, dims, {}, &id)->set_value(value);
    return id;
  }
  // NumPy broadcasting of `x` to `dims` (aligned at the right); `x` itself if it already has them.
  int64_t BroadcastTo(int64_t x, const std::vector<int64_t>& dims) {
    const std::vector<int64_t> from = DimsOf(x);
    if (from == dims) return x;
    int64_t id;
    proto::Instruction* inst = Add(proto::BROADCAST, ShapeOf(x).type(), dims, {x}, &id);
    for (size_t i = 0; i < from.size(); ++i) inst->add_dims(static_cast<int64_t>(dims.size() - from.size() + i));
    return id;
  }
  // Broadcast of a reduced value (dims removed) back over `dims`, the reduced `axes` re-inserted.
  int64_t BroadcastBack(int64_t x, const std::vector<int64_t>& dims, const std::vector<int64_t>& axes) {
    int64_t id;
    proto::Instruction* inst = Add(proto::BROADCAST, ShapeOf(x).type(), dims, {x}, &id);
    for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) inst->add_dims(d);
    }
    return id;
  }
  int64_t Reshape(int64_t x, const std::vector<int64_t>& dims) {
    return DimsOf(x) == dims ? x : Simple(proto::RESHAPE, ShapeOf(x).type(), dims, {x});
  }
  int64_t Binary(proto::Opcode op, int64_t a, int64_t b) {
    return Simple(op, ShapeOf(a).type(), DimsOf(a), {a, b});
  }
  int64_t Unary(proto::Opcode op, int64_t x) { return Simple(op, ShapeOf(x).type(), DimsOf(x), {x}); }
  int64_t Reduce(proto::Opcode op, int64_t x, const std::vector<int64_t>& axes) {
    std::vector<int64_t> kept;
    const std::vector<int64_t> dims = DimsOf(x);
    for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) kept.push_back(dims[static_cast<size_t>(d)]);
    }
    int64_t id;
    proto::Instruction* inst = Add(op, ShapeOf(x).type(), kept, {x}, &id);
    for (int64_t a : axes) inst->add_dims(a);
    return id;
  }
  int64_t Scalar(double value, int64_t like) { return Constant(value, ShapeOf(like).type(), DimsOf(like)); }

 private:
  proto::Module& m_;
};

proto::Opcode UnaryOpcode(OpKind op) {
  switch (op) {
    case OpKind::kNeg: return proto::NEGATE;
    case OpKind::kAbs: return proto::ABS;
    case OpKind::kExp: return proto::EXP;
    case OpKind::kLog: return proto::LOG;
    case OpKind::kSqrt: return proto::SQRT;
    case OpKind::kRsqrt: return proto::RSQRT;
    case OpKind::kTanh: return proto::TANH;
    case OpKind::kSigmoid: return proto::LOGISTIC;
    case OpKind::kSign: return proto::SIGN;
    case OpKind::kNot: return proto::NOT;
    default: return proto::OPCODE_INVALID;
  }
}

proto::Opcode BinaryOpcode(OpKind op, proto::CompareDirection* dir) {
  switch (op) {
    case OpKind::kAdd: return proto::ADD;
    case OpKind::kSub: return proto::SUBTRACT;
    case OpKind::kMul: return proto::MULTIPLY;
    case OpKind::kDiv: return proto::DIVIDE;
    case OpKind::kPow: return proto::POWER;
    case OpKind::kMaximum: return proto::MAXIMUM;
    case OpKind::kMinimum: return proto::MINIMUM;
    case OpKind::kAnd: return proto::AND;
    case OpKind::kOr: return proto::OR;
    case OpKind::kEq: *dir = proto::EQ; return proto::COMPARE;
    case OpKind::kNe: *dir = proto::NE; return proto::COMPARE;
    case OpKind::kLt: *dir = proto::LT; return proto::COMPARE;
    case OpKind::kLe: *dir = proto::LE; return proto::COMPARE;
    case OpKind::kGt: *dir = proto::GT; return proto::COMPARE;
    case OpKind::kGe: *dir = proto::GE; return proto::COMPARE;
    default: return proto::OPCODE_INVALID;
  }
}

std::vector<int64_t> DimsOf(const ir::Shape& s) { return {s.dims().begin(), s.dims().end()}; }

}  // namespace

proto::ElementType ElementTypeOf(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32: return proto::F32;
    case ir::DType::kF64: return proto::F64;
    case ir::DType::kBF16: return proto::BF16;
    case ir::DType::kF16: return proto::F16;
    case ir::DType::kI32: return proto::S32;
    case ir::DType::kI64: return proto::S64;
    case ir::DType::kBool: return proto::PRED;
  }
  return proto::F32;
}

absl::StatusOr<proto::Module> LowerGraph(const ir::PostOrder& order, std::string name) {
  proto::Module module;
  module.set_name(std::move(name));
  ModuleBuilder b(module);
  std::vector<int64_t> id_of(order.size(), -1);  // node position -> instruction id
  int64_t next_parameter = 0;
  for (size_t pos = 0; pos < order.size(); ++pos) {
    const ir::Node& node = *order.nodes()[pos];
    const ir::Shape& shape = node.shape();
    const proto::ElementType type = ElementTypeOf(shape.dtype());
    const std::vector<int64_t> dims = DimsOf(shape);
    auto in = [&](size_t i) { return id_of[order.operand_positions(pos)[i]]; };
    const ir::Attributes& attrs = node.attrs();
    int64_t id = -1;
    const OpKind op = node.op();
    switch (op) {
      case OpKind::kDeviceData: {
        b.Add(proto::PARAMETER, type, dims, {}, &id)->set_parameter_number(next_parameter++);
        break;
      }
      case OpKind::kConstant: id = b.Constant(attrs.Get<double>(AttrKey::kValue), type, dims); break;
      case OpKind::kIota: {
        proto::Instruction* inst = b.Add(proto::IOTA, type, dims, {}, &id);
        inst->set_axis(0);
        inst->add_start(attrs.Get<std::vector<int64_t>>(AttrKey::kStart)[0]);
        inst->add_stride(attrs.Get<std::vector<int64_t>>(AttrKey::kStride)[0]);
        break;
      }
      case OpKind::kRngUniform:
      case OpKind::kRngNormal:
        b.Add(op == OpKind::kRngUniform ? proto::RNG_UNIFORM : proto::RNG_NORMAL, type, dims, {in(0)}, &id)
            ->set_stream(attrs.Get<int64_t>(AttrKey::kStream));
        break;
      case OpKind::kRelu: id = b.Binary(proto::MAXIMUM, in(0), b.Scalar(0, in(0))); break;
      case OpKind::kGelu: {
        // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's approximate="tanh".
        const int64_t x = in(0);
        const int64_t x3 = b.Binary(proto::MULTIPLY, b.Binary(proto::MULTIPLY, x, x), x);
        const int64_t inner = b.Binary(proto::ADD, x, b.Binary(proto::MULTIPLY, b.Scalar(0.044715, x), x3));
        const int64_t t = b.Unary(proto::TANH, b.Binary(proto::MULTIPLY, b.Scalar(std::sqrt(2.0 / M_PI), x), inner));
        id = b.Binary(proto::MULTIPLY, b.Binary(proto::MULTIPLY, b.Scalar(0.5, x), x),
                      b.Binary(proto::ADD, b.Scalar(1, x), t));
        break;
      }
      case OpKind::kConvert: id = b.Simple(proto::CONVERT, type, dims, {in(0)}); break;
      case OpKind::kSelect:
        id = b.Simple(proto::SELECT, type, dims, {b.BroadcastTo(in(0), dims), b.BroadcastTo(in(1), dims), b.BroadcastTo(in(2), dims)});
        break;
      case OpKind::kReshape: id = b.Reshape(in(0), dims); break;
      case OpKind::kPermute: {
        proto::Instruction* inst = b.Add(proto::TRANSPOSE, type, dims, {in(0)}, &id);
        for (int64_t p : attrs.Get<std::vector<int64_t>>(AttrKey::kDims)) inst->add_dims(p);
        break;
      }
      case OpKind::kExpand: id = b.BroadcastTo(in(0), dims); break;
      case OpKind::kSlice: {
        proto::Instruction* inst = b.Add(proto::SLICE, type, dims, {in(0)}, &id);
        for (int64_t v : attrs.Get<std::vector<int64_t>>(AttrKey::kStart)) inst->add_start(v);
        for (int64_t v : attrs.Get<std::vector<int64_t>>(AttrKey::kLimit)) inst->add_limit(v);
        for (int64_t v : attrs.Get<std::vector<int64_t>>(AttrKey::kStride)) inst->add_stride(v);
        break;
      }
      case OpKind::kConcat: {
        proto::Instruction* inst = b.Add(proto::CONCATENATE, type, dims, {}, &id);
        for (size_t i = 0; i < node.operands().size(); ++i) inst->add_operands(in(i));
        inst->set_axis(attrs.Get<int64_t>(AttrKey::kAxis));
        break;
      }
      case OpKind::kIndexSelect:
      case OpKind::kGather:
        b.Add(op == OpKind::kGather ? proto::GATHER : proto::INDEX_SELECT, type, dims, {in(0), in(1)}, &id)
            ->set_axis(attrs.Get<int64_t>(AttrKey::kAxis));
        break;
      case OpKind::kOneHot: {
        // iota over the class axis == index broadcast along it.
        const int64_t index = in(0);
        const proto::ElementType index_type = b.ShapeOf(index).type();
        int64_t iota;
        proto::Instruction* inst = b.Add(proto::IOTA, index_type, dims, {}, &iota);
        inst->set_axis(static_cast<int64_t>(dims.size()) - 1);
        inst->add_start(0);
        inst->add_stride(1);
        int64_t expanded;
        proto::Instruction* bc = b.Add(proto::BROADCAST, index_type, dims, {index}, &expanded);
        for (size_t d = 0; d + 1 < dims.size(); ++d) bc->add_dims(static_cast<int64_t>(d));
        int64_t eq;
        b.Add(proto::COMPARE, proto::PRED, dims, {iota, expanded}, &eq)->set_direction(proto::EQ);
        id = b.Simple(proto::CONVERT, type, dims, {eq});
        break;
      }
      case OpKind::kReduceSum:
      case OpKind::kReduceMax:
      case OpKind::kReduceMean: {
        const std::vector<int64_t>& axes = attrs.Get<std::vector<int64_t>>(AttrKey::kDims);
        int64_t r = b.Reduce(op == OpKind::kReduceMax ? proto::REDUCE_MAX : proto::REDUCE_SUM, in(0), axes);
        if (op == OpKind::kReduceMean) {
          int64_t count = 1;
          const std::vector<int64_t> in_dims = b.DimsOf(in(0));
          for (int64_t a : axes) count *= in_dims[static_cast<size_t>(a)];
          r = b.Binary(proto::MULTIPLY, r, b.Scalar(count == 0 ? NAN : 1.0 / static_cast<double>(count), r));
        }
        id = b.Reshape(r, dims);  // keepdim re-inserts size-1 dims
        break;
      }
      case OpKind::kArgmax: {
        const int64_t axis = attrs.Get<int64_t>(AttrKey::kAxis);
        std::vector<int64_t> kept = b.DimsOf(in(0));
        kept.erase(kept.begin() + axis);
        int64_t r;
        b.Add(proto::ARGMAX, proto::S64, kept, {in(0)}, &r)->set_axis(axis);
        id = b.Reshape(r, dims);
        break;
      }
      case OpKind::kMatMul: {
        // Operands with batch dims are broadcast to the result's; a rank-2 operand is shared.
        std::vector<int64_t> operands;
        for (size_t i = 0; i < 2; ++i) {
          std::vector<int64_t> od = b.DimsOf(in(i));
          if (od.size() > 2) {
            std::vector<int64_t> full(dims.begin(), dims.end() - 2);
            full.insert(full.end(), od.end() - 2, od.end());
            operands.push_back(b.BroadcastTo(in(i), full));
          } else {
            operands.push_back(in(i));
          }
        }
        proto::Instruction* inst = b.Add(proto::DOT, type, dims, {operands[0], operands[1]}, &id);
        if (const bool* t = attrs.Find<bool>(AttrKey::kTransposeA)) inst->set_transpose_lhs(*t);
        if (const bool* t = attrs.Find<bool>(AttrKey::kTransposeB)) inst->set_transpose_rhs(*t);
        break;
      }
      case OpKind::kSoftmax:
      case OpKind::kLogSoftmax: {
        const int64_t axis = attrs.Get<int64_t>(AttrKey::kAxis);
        const int64_t x = in(0);
        const int64_t max = b.BroadcastBack(b.Reduce(proto::REDUCE_MAX, x, {axis}), dims, {axis});
        const int64_t shifted = b.Binary(proto::SUBTRACT, x, max);
        const int64_t e = b.Unary(proto::EXP, shifted);
        const int64_t total = b.BroadcastBack(b.Reduce(proto::REDUCE_SUM, e, {axis}), dims, {axis});
        id = op == OpKind::kSoftmax ? b.Binary(proto::DIVIDE, e, total)
                                    : b.Binary(proto::SUBTRACT, shifted, b.Unary(proto::LOG, total));
        break;
      }
      default: {
        proto::CompareDirection dir = proto::EQ;
        if (const proto::Opcode u = UnaryOpcode(op); u != proto::OPCODE_INVALID) {
          id = b.Simple(u, type, dims, {in(0)});
        } else if (const proto::Opcode bin = BinaryOpcode(op, &dir); bin != proto::OPCODE_INVALID) {
          int64_t inst_id;
          b.Add(bin, type, dims, {b.BroadcastTo(in(0), dims), b.BroadcastTo(in(1), dims)}, &inst_id)
              ->set_direction(dir);
          id = inst_id;
        } else {
          return absl::UnimplementedError(absl::StrCat("no lowering rule for ", ir::OpKindName(op)));
        }
      }
    }
    id_of[pos] = id;
  }
  for (uint32_t root : order.root_positions()) module.add_outputs(id_of[root]);
  return module;
}

}  // namespace lazyrt::lowering
