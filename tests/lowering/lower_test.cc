// The lowering rules: each IR op becomes the device instructions its rule promises (a verified Module),
// implicit broadcasting made explicit, composites decomposed.
#include "lowering/lower.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "ir/node.h"
#include "ir/post_order.h"
#include "lowering/dtype.h"
#include "pjrt_sim/module_verifier.h"
#include "pjrt_sim/opcode.h"

namespace lazyrt::lowering {
namespace lower_test {

using ir::Attributes;
using ir::AttrKey;
using ir::DType;
using ir::OpKind;
using ir::Shape;
using ir::Value;
using pjrt::Opcode;

Value Leaf(Shape shape) { return Value{ir::MakeNode(OpKind::kDeviceData, ir::OperandList{}, ir::ShapeList{shape})}; }
Value Op(OpKind op, ir::OperandList operands, Shape shape, Attributes attrs = {}) {
  return Value{ir::MakeNode(op, std::move(operands), ir::ShapeList{shape}, std::move(attrs))};
}

// Lowers the graph below `root`, checks the module verifies, and counts its opcodes.
std::map<Opcode, int> Lowered(const Value& root, pjrt::proto::Module* out = nullptr) {
  const Value roots[] = {root};
  ir::PostOrder order(roots);
  absl::StatusOr<pjrt::proto::Module> module = LowerGraph(order, "test");
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return {};
  EXPECT_TRUE(pjrt::VerifyModule(*module).ok()) << pjrt::VerifyModule(*module);
  std::map<Opcode, int> counts;
  for (const pjrt::proto::Instruction& inst : module->instructions()) ++counts[static_cast<Opcode>(inst.opcode())];
  if (out != nullptr) *out = *module;
  return counts;
}

const Shape kF32_2x3(DType::kF32, {2, 3});

TEST(Lowering, EveryFloatUnaryOpIsItsDeviceOpcode){
#define LAZYRT_X(name, fn, device)                                                              \
  {                                                                                             \
    const std::map<Opcode, int> ops = Lowered(Op(OpKind::k##name, {Leaf(kF32_2x3)}, kF32_2x3)); \
    EXPECT_EQ(ops.count(Opcode::k##device), 1u) << #name;                                       \
    EXPECT_EQ(ops.size(), 2u) << #name << ": a parameter and the op";                           \
  }
    LAZYRT_IR_FLOAT_UNARY_OPS(LAZYRT_X)
#undef LAZYRT_X
}

TEST(Lowering, EveryReductionIsOneReduceWithItsCombiner){
#define LAZYRT_X(name, kind)                                                                         \
  {                                                                                                  \
    pjrt::proto::Module m;                                                                           \
    Lowered(Op(OpKind::k##name, {Leaf(kF32_2x3)}, Shape(DType::kF32, {2}),                           \
               Attributes{{AttrKey::kAxes, std::vector<int64_t>{1}}, {AttrKey::kKeepDim, false}}),   \
            &m);                                                                                     \
    ASSERT_EQ(m.instructions_size(), 2) << #name;                                                    \
    EXPECT_EQ(m.instructions(1).opcode(), static_cast<int32_t>(Opcode::kReduce)) << #name;           \
    EXPECT_EQ(m.instructions(1).combiner(), static_cast<int32_t>(pjrt::Combiner::k##kind)) << #name; \
  }
    LAZYRT_IR_REDUCE_OPS(LAZYRT_X)
#undef LAZYRT_X
}

TEST(Lowering, KeepDimReshapesTheReducedResult) {
  const std::map<Opcode, int> ops =
      Lowered(Op(OpKind::kReduceMax, {Leaf(kF32_2x3)}, Shape(DType::kF32, {2, 1}),
                 Attributes{{AttrKey::kAxes, std::vector<int64_t>{1}}, {AttrKey::kKeepDim, true}}));
  EXPECT_EQ(ops.at(Opcode::kReduce), 1);
  EXPECT_EQ(ops.at(Opcode::kReshape), 1);
}

TEST(Lowering, BroadcastingIsExplicit) {
  pjrt::proto::Module m;
  const std::map<Opcode, int> ops =
      Lowered(Op(OpKind::kAdd, {Leaf(kF32_2x3), Leaf(Shape(DType::kF32, {3}))}, kF32_2x3), &m);
  EXPECT_EQ(ops.at(Opcode::kBroadcast), 1);
  EXPECT_EQ(ops.at(Opcode::kAdd), 1);
}

TEST(Lowering, ComparisonsArePredCompares) {
  pjrt::proto::Module m;
  Lowered(Op(OpKind::kLt, {Leaf(kF32_2x3), Leaf(kF32_2x3)}, Shape(DType::kBool, {2, 3})), &m);
  const pjrt::proto::Instruction& cmp = m.instructions(m.instructions_size() - 1);
  EXPECT_EQ(cmp.opcode(), static_cast<int32_t>(Opcode::kCompare));
  EXPECT_EQ(cmp.direction(), static_cast<int32_t>(pjrt::CompareDirection::kLt));
  EXPECT_EQ(cmp.shape().type(), pjrt::proto::PRED);
}

TEST(Lowering, GeluIsItsOpcodeByDefaultAndTanhWhenAskedFor) {
  const auto gelu = [](bool approximate) {
    return Lowered(Op(OpKind::kGelu, {Leaf(kF32_2x3)}, kF32_2x3, Attributes{{AttrKey::kApproximate, approximate}}));
  };
  const std::map<Opcode, int> exact = gelu(false), tanh = gelu(true);
  EXPECT_EQ(exact.count(Opcode::kGelu), 1u);
  EXPECT_EQ(exact.count(Opcode::kTanh), 0u);
  EXPECT_EQ(tanh.count(Opcode::kTanh), 1u);
  EXPECT_EQ(tanh.count(Opcode::kGelu), 0u);
  // Its gradient: g times GELU_DERIVATIVE(x).
  const std::map<Opcode, int> grad = Lowered(Op(OpKind::kGeluGrad, {Leaf(kF32_2x3), Leaf(kF32_2x3)}, kF32_2x3));
  EXPECT_EQ(grad.count(Opcode::kGeluDerivative), 1u);
  EXPECT_EQ(grad.count(Opcode::kMultiply), 1u);
  EXPECT_EQ(grad.count(Opcode::kErf), 0u);
}

TEST(Lowering, MeanIsASumScaledOnce) {
  const std::map<Opcode, int> ops =
      Lowered(Op(OpKind::kReduceMean, {Leaf(kF32_2x3)}, Shape(DType::kF32, {3}),
                 Attributes{{AttrKey::kAxes, std::vector<int64_t>{0}}, {AttrKey::kKeepDim, false}}));
  EXPECT_EQ(ops.at(Opcode::kReduce), 1);
  EXPECT_EQ(ops.at(Opcode::kMultiply), 1);
}

TEST(Lowering, DTypesMapOneToOne) {
  std::map<pjrt::PrimitiveType, DType> seen;
  for (DType d : ir::kAllDTypes) {
    const auto [it, inserted] = seen.emplace(DeviceType(d), d);
    EXPECT_TRUE(inserted) << ir::DTypeName(d) << " and " << ir::DTypeName(it->second) << " share a device type";
    EXPECT_EQ(ir::DTypeSize(d), pjrt::ByteWidth(DeviceType(d))) << ir::DTypeName(d);
  }
}

}  // namespace lower_test
}  // namespace lazyrt::lowering
