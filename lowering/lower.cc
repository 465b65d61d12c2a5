#include "lowering/lower.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lowering/dtype.h"
#include "pjrt_sim/hlo.h"
#include "pjrt_sim/status_macros.h"

namespace lazyrt::lowering {
namespace {

using ir::AttrKey;
using ir::OpKind;
using pjrt::CompareDirection;
using pjrt::Opcode;
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

  proto::Instruction* Add(Opcode op, proto::ElementType type, const std::vector<int64_t>& dims,
                          std::initializer_list<int64_t> operands, int64_t* id) {
    proto::Instruction* inst = m_.add_instructions();
    inst->set_opcode(static_cast<int32_t>(op));
    inst->mutable_shape()->set_type(type);
    for (int64_t d : dims) inst->mutable_shape()->add_dims(d);
    for (int64_t o : operands) inst->add_operands(o);
    *id = m_.instructions_size() - 1;
    return inst;
  }
  int64_t Simple(Opcode op, proto::ElementType type, const std::vector<int64_t>& dims,
                 std::initializer_list<int64_t> operands) {
    int64_t id;
    Add(op, type, dims, operands, &id);
    return id;
  }
  int64_t Constant(double value, proto::ElementType type, const std::vector<int64_t>& dims) {
    int64_t id;
    Add(Opcode::kConstant, type, dims, {}, &id)->set_value(value);
    return id;
  }
  // NumPy broadcasting of `x` to `dims` (aligned at the right); `x` itself if it already has them.
  int64_t BroadcastTo(int64_t x, const std::vector<int64_t>& dims) {
    const std::vector<int64_t> from = DimsOf(x);
    if (from == dims) return x;
    int64_t id;
    proto::Instruction* inst = Add(Opcode::kBroadcast, ShapeOf(x).type(), dims, {x}, &id);
    for (size_t i = 0; i < from.size(); ++i) inst->add_dims(static_cast<int64_t>(dims.size() - from.size() + i));
    return id;
  }
  // Broadcast of a reduced value (dims removed) back over `dims`, the reduced `axes` re-inserted.
  int64_t BroadcastBack(int64_t x, const std::vector<int64_t>& dims, const std::vector<int64_t>& axes) {
    int64_t id;
    proto::Instruction* inst = Add(Opcode::kBroadcast, ShapeOf(x).type(), dims, {x}, &id);
    for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) inst->add_dims(d);
    }
    return id;
  }
  int64_t Reshape(int64_t x, const std::vector<int64_t>& dims) {
    return DimsOf(x) == dims ? x : Simple(Opcode::kReshape, ShapeOf(x).type(), dims, {x});
  }
  int64_t Binary(Opcode op, int64_t a, int64_t b) { return Simple(op, ShapeOf(a).type(), DimsOf(a), {a, b}); }
  int64_t Unary(Opcode op, int64_t x) { return Simple(op, ShapeOf(x).type(), DimsOf(x), {x}); }
  int64_t Reduce(pjrt::Combiner combiner, int64_t x, const std::vector<int64_t>& axes) {
    std::vector<int64_t> kept;
    const std::vector<int64_t> dims = DimsOf(x);
    for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) kept.push_back(dims[static_cast<size_t>(d)]);
    }
    int64_t id;
    proto::Instruction* inst = Add(Opcode::kReduce, ShapeOf(x).type(), kept, {x}, &id);
    inst->set_combiner(static_cast<int32_t>(combiner));
    for (int64_t a : axes) inst->add_dims(a);
    return id;
  }
  int64_t Scalar(double value, int64_t like) { return Constant(value, ShapeOf(like).type(), DimsOf(like)); }
  // An elementwise op over `dims`, its operands broadcast to them (NumPy rules).
  int64_t Elementwise(Opcode op, proto::ElementType type, const std::vector<int64_t>& dims, int64_t a, int64_t b) {
    return Simple(op, type, dims, {BroadcastTo(a, dims), BroadcastTo(b, dims)});
  }
  // `x` converted to `type` (itself if of that type already).
  int64_t ConvertTo(int64_t x, proto::ElementType type) {
    return ShapeOf(x).type() == type ? x : Simple(Opcode::kConvert, type, DimsOf(x), {x});
  }
  // `x` op a scalar constant broadcast to `x`'s dims: how a traced tensor-scalar op lowers.
  int64_t WithConstant(Opcode op, int64_t x, double value) {
    return Elementwise(op, ShapeOf(x).type(), DimsOf(x), x, Constant(value, ShapeOf(x).type(), {}));
  }
  int64_t Compare(CompareDirection direction, const std::vector<int64_t>& dims, int64_t a, int64_t b) {
    int64_t id;
    Add(Opcode::kCompare, proto::PRED, dims, {BroadcastTo(a, dims), BroadcastTo(b, dims)}, &id)
        ->set_direction(static_cast<int32_t>(direction));
    return id;
  }

 private:
  proto::Module& m_;
};

std::vector<int64_t> DimsOf(const ir::Shape& s) { return {s.dims().begin(), s.dims().end()}; }

// Gives `module` the mesh of a sharding annotation; every annotation of one graph must name the same mesh.
absl::Status SetMesh(const std::vector<int64_t>& shape, const std::vector<int64_t>& devices, proto::Module& module) {
  proto::Mesh* mesh = module.mutable_mesh();
  if (mesh->shape().empty()) {
    for (int64_t size : shape) mesh->add_shape(size);
    for (int64_t device : devices) mesh->add_device_ids(device);
    return absl::OkStatus();
  }
  if (!std::equal(shape.begin(), shape.end(), mesh->shape().begin(), mesh->shape().end()) ||
      !std::equal(devices.begin(), devices.end(), mesh->device_ids().begin(), mesh->device_ids().end())) {
    return absl::InvalidArgumentError(
        absl::StrCat("one graph shards values over two meshes: shape [", absl::StrJoin(mesh->shape(), ","),
                     "] on devices [", absl::StrJoin(mesh->device_ids(), ","), "] and shape [",
                     absl::StrJoin(shape, ","), "] on devices [", absl::StrJoin(devices, ","), "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<proto::Module> LowerGraph(const ir::PostOrder& order, std::string name) {
  proto::Module module;
  module.set_name(std::move(name));
  ModuleBuilder b(module);
  std::vector<int64_t> id_of(order.size(), -1);  // node position -> instruction id
  int64_t next_parameter = 0;
  int64_t next_site = 1;  // index-checking ops, numbered in post order (ir::ChecksIndices)
  for (size_t pos = 0; pos < order.size(); ++pos) {
    const ir::Node& node = *order.nodes()[pos];
    const ir::Shape& shape = node.shape();
    const proto::ElementType type = pjrt::ToProto(DeviceType(shape.dtype()));
    const std::vector<int64_t> dims = DimsOf(shape);
    auto in = [&](size_t i) { return id_of[order.operand_positions(pos)[i]]; };
    const ir::Attributes& attrs = node.attrs();
    int64_t id = -1;
    const OpKind op = node.op();
    const int first_instruction = module.instructions_size();
    switch (op) {
      case OpKind::kDeviceData: {
        b.Add(Opcode::kParameter, type, dims, {}, &id)->set_parameter_number(next_parameter++);
        break;
      }
      case OpKind::kConstant: id = b.Constant(attrs.Get<double>(AttrKey::kValue), type, dims); break;
      case OpKind::kIota: {
        proto::Instruction* inst = b.Add(Opcode::kIota, type, dims, {}, &id);
        inst->set_axis(0);
        inst->add_start(attrs.Get<std::vector<int64_t>>(AttrKey::kStart)[0]);
        inst->add_stride(attrs.Get<std::vector<int64_t>>(AttrKey::kStride)[0]);
        break;
      }
      case OpKind::kRngUniform:
      case OpKind::kRngNormal:
        b.Add(op == OpKind::kRngUniform ? Opcode::kRngUniform : Opcode::kRngNormal, type, dims, {in(0)}, &id)
            ->set_stream(attrs.Get<int64_t>(AttrKey::kStream));
        break;
#define LAZYRT_X(name, fn, device) \
  case OpKind::k##name: id = b.Unary(Opcode::k##device, in(0)); break;
        LAZYRT_IR_FLOAT_UNARY_OPS(LAZYRT_X)
#undef LAZYRT_X
      case OpKind::kNeg: id = b.Unary(Opcode::kNegate, in(0)); break;
      case OpKind::kAbs: id = b.Unary(Opcode::kAbs, in(0)); break;
      case OpKind::kSign: id = b.Unary(Opcode::kSign, in(0)); break;
      case OpKind::kNot: id = b.Unary(Opcode::kNot, in(0)); break;
      case OpKind::kAdd: id = b.Elementwise(Opcode::kAdd, type, dims, in(0), in(1)); break;
      case OpKind::kSub: id = b.Elementwise(Opcode::kSubtract, type, dims, in(0), in(1)); break;
      case OpKind::kMul: id = b.Elementwise(Opcode::kMultiply, type, dims, in(0), in(1)); break;
      case OpKind::kDiv: id = b.Elementwise(Opcode::kDivide, type, dims, in(0), in(1)); break;
      case OpKind::kPow: id = b.Elementwise(Opcode::kPower, type, dims, in(0), in(1)); break;
      case OpKind::kMaximum: id = b.Elementwise(Opcode::kMaximum, type, dims, in(0), in(1)); break;
      case OpKind::kMinimum: id = b.Elementwise(Opcode::kMinimum, type, dims, in(0), in(1)); break;
      case OpKind::kAnd: id = b.Elementwise(Opcode::kAnd, type, dims, in(0), in(1)); break;
      case OpKind::kOr: id = b.Elementwise(Opcode::kOr, type, dims, in(0), in(1)); break;
      case OpKind::kEq: id = b.Compare(CompareDirection::kEq, dims, in(0), in(1)); break;
      case OpKind::kNe: id = b.Compare(CompareDirection::kNe, dims, in(0), in(1)); break;
      case OpKind::kLt: id = b.Compare(CompareDirection::kLt, dims, in(0), in(1)); break;
      case OpKind::kLe: id = b.Compare(CompareDirection::kLe, dims, in(0), in(1)); break;
      case OpKind::kGt: id = b.Compare(CompareDirection::kGt, dims, in(0), in(1)); break;
      case OpKind::kGe: id = b.Compare(CompareDirection::kGe, dims, in(0), in(1)); break;
      case OpKind::kRelu: id = b.Binary(Opcode::kMaximum, in(0), b.Scalar(0, in(0))); break;
      case OpKind::kGelu: {
        const int64_t x = in(0);
        if (!attrs.Get<bool>(AttrKey::kApproximate)) {
          // x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), PyTorch's default (approximate="none").
          id = b.Unary(Opcode::kGelu, x);
          break;
        }
        // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's approximate="tanh".
        const int64_t x3 = b.Binary(Opcode::kMultiply, b.Binary(Opcode::kMultiply, x, x), x);
        const int64_t inner = b.Binary(Opcode::kAdd, x, b.Binary(Opcode::kMultiply, b.Scalar(0.044715, x), x3));
        const int64_t t =
            b.Unary(Opcode::kTanh, b.Binary(Opcode::kMultiply, b.Scalar(std::sqrt(2.0 / M_PI), x), inner));
        id = b.Binary(Opcode::kMultiply, b.Binary(Opcode::kMultiply, b.Scalar(0.5, x), x),
                      b.Binary(Opcode::kAdd, b.Scalar(1, x), t));
        break;
      }
      case OpKind::kGeluGrad:
        id = b.Elementwise(Opcode::kMultiply, type, dims, in(0), b.Unary(Opcode::kGeluDerivative, in(1)));
        break;
      case OpKind::kConvert: id = b.Simple(Opcode::kConvert, type, dims, {in(0)}); break;
      case OpKind::kSelect:
        id = b.Simple(Opcode::kSelect, type, dims,
                      {b.BroadcastTo(in(0), dims), b.BroadcastTo(in(1), dims), b.BroadcastTo(in(2), dims)});
        break;
      case OpKind::kReshape: id = b.Reshape(in(0), dims); break;
      case OpKind::kPermute: {
        proto::Instruction* inst = b.Add(Opcode::kTranspose, type, dims, {in(0)}, &id);
        for (int64_t p : attrs.Get<std::vector<int64_t>>(AttrKey::kPermutation)) inst->add_dims(p);
        break;
      }
      case OpKind::kExpand: id = b.BroadcastTo(in(0), dims); break;
      case OpKind::kSlice: {
        proto::Instruction* inst = b.Add(Opcode::kSlice, type, dims, {in(0)}, &id);
        for (int64_t v : attrs.Get<std::vector<int64_t>>(AttrKey::kStart)) inst->add_start(v);
        for (int64_t v : attrs.Get<std::vector<int64_t>>(AttrKey::kLimit)) inst->add_limit(v);
        for (int64_t v : attrs.Get<std::vector<int64_t>>(AttrKey::kStride)) inst->add_stride(v);
        break;
      }
      case OpKind::kConcat: {
        proto::Instruction* inst = b.Add(Opcode::kConcatenate, type, dims, {}, &id);
        for (size_t i = 0; i < node.operands().size(); ++i) inst->add_operands(in(i));
        inst->set_axis(attrs.Get<int64_t>(AttrKey::kAxis));
        break;
      }
      case OpKind::kIndexSelect:
      case OpKind::kGather: {
        proto::Instruction* inst =
            b.Add(op == OpKind::kGather ? Opcode::kGather : Opcode::kIndexSelect, type, dims, {in(0), in(1)}, &id);
        inst->set_axis(attrs.Get<int64_t>(AttrKey::kAxis));
        inst->set_site(next_site++);
        break;
      }
      case OpKind::kScatterAdd:
      case OpKind::kIndexAdd: {
        proto::Instruction* inst = b.Add(op == OpKind::kScatterAdd ? Opcode::kScatterAdd : Opcode::kIndexAdd, type,
                                         dims, {in(0), in(1), in(2)}, &id);
        inst->set_axis(attrs.Get<int64_t>(AttrKey::kAxis));
        inst->set_site(next_site++);
        break;
      }
      case OpKind::kOneHot: {
        // iota over the class axis == index broadcast along it.
        const int64_t index = in(0);
        const proto::ElementType index_type = b.ShapeOf(index).type();
        int64_t iota;
        proto::Instruction* inst = b.Add(Opcode::kIota, index_type, dims, {}, &iota);
        inst->set_axis(static_cast<int64_t>(dims.size()) - 1);
        inst->add_start(0);
        inst->add_stride(1);
        int64_t expanded;
        proto::Instruction* bc = b.Add(Opcode::kBroadcast, index_type, dims, {index}, &expanded);
        for (size_t d = 0; d + 1 < dims.size(); ++d) bc->add_dims(static_cast<int64_t>(d));
        id = b.Simple(Opcode::kConvert, type, dims, {b.Compare(CompareDirection::kEq, dims, iota, expanded)});
        break;
      }
#define LAZYRT_X(name, combiner)                                                                                  \
  case OpKind::k##name:                                                                                           \
    id = b.Reshape(b.Reduce(pjrt::Combiner::k##combiner, in(0), attrs.Get<std::vector<int64_t>>(AttrKey::kAxes)), \
                   dims); /* keepdim re-inserts size-1 dims */                                                    \
    break;
        LAZYRT_IR_REDUCE_OPS(LAZYRT_X)
#undef LAZYRT_X
      case OpKind::kReduceMean: {
        const std::vector<int64_t>& axes = attrs.Get<std::vector<int64_t>>(AttrKey::kAxes);
        int64_t count = 1;
        const std::vector<int64_t> in_dims = b.DimsOf(in(0));
        for (int64_t a : axes) count *= in_dims[static_cast<size_t>(a)];
        const int64_t sum = b.Reduce(pjrt::Combiner::kSum, in(0), axes);
        const int64_t r =
            b.Binary(Opcode::kMultiply, sum, b.Scalar(count == 0 ? NAN : 1.0 / static_cast<double>(count), sum));
        id = b.Reshape(r, dims);  // keepdim re-inserts size-1 dims
        break;
      }
      case OpKind::kArgmax: {
        const int64_t axis = attrs.Get<int64_t>(AttrKey::kAxis);
        std::vector<int64_t> kept = b.DimsOf(in(0));
        kept.erase(kept.begin() + axis);
        int64_t r;
        b.Add(Opcode::kArgmax, proto::S64, kept, {in(0)}, &r)->set_axis(axis);
        id = b.Reshape(r, dims);
        break;
      }
      case OpKind::kCumsum:
        b.Add(Opcode::kCumsum, type, dims, {in(0)}, &id)->set_axis(attrs.Get<int64_t>(AttrKey::kAxis));
        break;
      case OpKind::kArgsort: {
        proto::Instruction* inst = b.Add(Opcode::kArgsort, proto::S64, dims, {in(0)}, &id);
        inst->set_axis(attrs.Get<int64_t>(AttrKey::kAxis));
        inst->set_direction(static_cast<int32_t>(attrs.Get<bool>(AttrKey::kDescending) ? CompareDirection::kGt
                                                                                       : CompareDirection::kLt));
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
        b.Add(Opcode::kDot, type, dims, {operands[0], operands[1]}, &id);
        break;
      }
      case OpKind::kSoftmax:
      case OpKind::kLogSoftmax: {
        const int64_t axis = attrs.Get<int64_t>(AttrKey::kAxis);
        const int64_t x = in(0);
        const int64_t max = b.BroadcastBack(b.Reduce(pjrt::Combiner::kMax, x, {axis}), dims, {axis});
        const int64_t shifted = b.Binary(Opcode::kSubtract, x, max);
        const int64_t e = b.Unary(Opcode::kExp, shifted);
        const int64_t total = b.BroadcastBack(b.Reduce(pjrt::Combiner::kSum, e, {axis}), dims, {axis});
        id = op == OpKind::kSoftmax ? b.Binary(Opcode::kDivide, e, total)
                                    : b.Binary(Opcode::kSubtract, shifted, b.Unary(Opcode::kLog, total));
        break;
      }
      case OpKind::kAttention:
      case OpKind::kAttentionGrad: {
        // q, k and v broadcast to the batch dims; the mask keeps its broadcast dims (the kernel reads them
        // with stride 0), given the scores' rank.
        const bool grad = op == OpKind::kAttentionGrad;
        const size_t tensors = grad ? 5 : 3;
        const std::vector<int64_t> batch(dims.begin(), dims.end() - (grad ? 1 : 2));
        std::vector<int64_t> operands;
        for (size_t i = 0; i < tensors; ++i) {
          std::vector<int64_t> full = batch;
          const std::vector<int64_t> od = b.DimsOf(in(i));
          full.insert(full.end(), od.end() - 2, od.end());
          operands.push_back(b.BroadcastTo(in(i), full));
        }
        const double* dropout = attrs.Find<double>(AttrKey::kDropout);
        const size_t seeds = dropout != nullptr ? 1 : 0;  // the seed comes last
        if (node.operands().size() > tensors + seeds) {
          std::vector<int64_t> mask = b.DimsOf(in(tensors));
          mask.insert(mask.begin(), batch.size() + 2 - mask.size(), 1);
          operands.push_back(b.Reshape(in(tensors), mask));
        }
        if (seeds > 0) operands.push_back(in(node.operands().size() - 1));
        proto::Instruction* inst = b.Add(grad ? Opcode::kAttentionGrad : Opcode::kAttention, type, dims, {}, &id);
        for (int64_t o : operands) inst->add_operands(o);
        inst->set_value(attrs.Get<double>(AttrKey::kScale));
        inst->set_causal(attrs.Get<bool>(AttrKey::kCausal));
        if (dropout != nullptr) {
          inst->set_dropout(*dropout);
          inst->set_stream(attrs.Get<int64_t>(AttrKey::kStream));
        }
        break;
      }
      case OpKind::kLayerNorm:
      case OpKind::kRmsNorm:
      case OpKind::kLayerNormGrad:
      case OpKind::kRmsNormGrad: {
        // One device op each: a fused kernel per row, not a chain of reductions and elementwise ops.
        const Opcode device_op = op == OpKind::kLayerNorm       ? Opcode::kLayerNorm
                                 : op == OpKind::kRmsNorm       ? Opcode::kRmsNorm
                                 : op == OpKind::kLayerNormGrad ? Opcode::kLayerNormGrad
                                                                : Opcode::kRmsNormGrad;
        proto::Instruction* inst = b.Add(device_op, type, dims, {}, &id);
        for (size_t i = 0; i < node.operands().size(); ++i) inst->add_operands(in(i));
        inst->set_axis(attrs.Get<int64_t>(AttrKey::kAxis));
        inst->set_value(attrs.Get<double>(AttrKey::kEpsilon));
        break;
      }
      case OpKind::kAdamWMoment: {
        // beta m + (1 - beta) g, of g g for the second moment: the ops (and their order) of the traced
        // update this node stands for, so that fusing it on the host never changes a bit.
        const double beta = attrs.Get<double>(AttrKey::kBeta);
        const int64_t g = attrs.Get<bool>(AttrKey::kSquare) ? b.Binary(Opcode::kMultiply, in(1), in(1)) : in(1);
        const int64_t kept = b.WithConstant(Opcode::kMultiply, in(0), beta);
        const int64_t added = b.WithConstant(Opcode::kMultiply, g, 1 - beta);
        id = b.Binary(Opcode::kAdd, kept, added);
        break;
      }
      case OpKind::kAdamWParam: {
        // p decay - (m step_size) / (sqrt(v) / sqrt_correction2 + eps): operands p, m, v, the step size
        // and sqrt(1 - beta2^t) (f64 scalars, rounded to p's type here), and the decay factor if any.
        const int64_t decayed =
            node.operands().size() > 5 ? b.Elementwise(Opcode::kMultiply, type, dims, in(0), in(5)) : in(0);
        const int64_t step_size = b.ConvertTo(in(3), type);
        const int64_t correction = b.ConvertTo(in(4), type);
        const int64_t root = b.Unary(Opcode::kSqrt, in(2));
        const int64_t scaled = b.Elementwise(Opcode::kDivide, type, dims, root, correction);
        const int64_t denom = b.WithConstant(Opcode::kAdd, scaled, attrs.Get<double>(AttrKey::kEpsilon));
        const int64_t step = b.Elementwise(Opcode::kMultiply, type, dims, in(1), step_size);
        id = b.Elementwise(Opcode::kSubtract, type, dims, decayed, b.Binary(Opcode::kDivide, step, denom));
        break;
      }
      case OpKind::kShard: {
        // No computation: the sharding annotates the operand's instruction, and the module gets the mesh.
        id = in(0);
        RETURN_IF_ERROR(SetMesh(attrs.Get<std::vector<int64_t>>(AttrKey::kMeshShape),
                                attrs.Get<std::vector<int64_t>>(AttrKey::kMeshDevices), module));
        proto::Sharding* sharding = module.mutable_instructions(static_cast<int>(id))->mutable_sharding();
        sharding->clear_dim_axes();
        for (int64_t axis : attrs.Get<std::vector<int64_t>>(AttrKey::kShardAxes)) sharding->add_dim_axes(axis);
        break;
      }
    }
    id_of[pos] = id;
    // Every instruction of the node's lowering names it, so that diagnostics can name its user's line.
    for (int i = first_instruction; i < module.instructions_size(); ++i) {
      module.mutable_instructions(i)->set_origin(static_cast<int64_t>(pos) + 1);
    }
  }
  for (uint32_t root : order.root_positions()) module.add_outputs(id_of[root]);
  return module;
}

}  // namespace lazyrt::lowering
