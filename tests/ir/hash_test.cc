#include "ir/hash.h"

#include <gtest/gtest.h>

#include "ir/node.h"

namespace lazyrt::ir {
namespace hash_test {

Value Leaf(Shape shape) { return Value{MakeNode(OpKind::kDeviceData, OperandList{}, ShapeList{shape})}; }

Value Op(OpKind op, OperandList operands, Shape shape, Attributes attrs = {}) {
  return Value{MakeNode(op, std::move(operands), ShapeList{shape}, std::move(attrs))};
}

const Shape kF32_2x3(DType::kF32, {2, 3});

// Node hashes are the persistent cache's graph keys, so they must not move when the op lists grow: an op
// appended before the float math ops once shifted their enum numbers, which the hash then took, and
// exp(x) got the key log(x)'s executable was stored under. These are fixed values: if a change of the
// hashing makes this fail, bump lowering::kLoweringVersion (so that no old entry is found under a new
// key) and update them.
TEST(NodeHash, IsStableAcrossBuildsAndOpListChanges) {
  const Value x = Leaf(kF32_2x3);
  const Shape out(DType::kF32, {3});
  EXPECT_EQ(x.hash(), 1447631534918569465ULL);
  EXPECT_EQ(Op(OpKind::kExp, {x}, kF32_2x3).hash(), 4828739103163810859ULL);
  EXPECT_EQ(Op(OpKind::kReduceSum, {x}, out, {{AttrKey::kAxes, std::vector<int64_t>{0}}}).hash(),
            4246243296102042024ULL);
  EXPECT_EQ(Op(OpKind::kGelu, {x}, kF32_2x3, {{AttrKey::kApproximate, false}}).hash(), 17105812539560021179ULL);
  EXPECT_EQ(OpKindStableId(OpKind::kExp), Fnv1a("Exp"));
}

TEST(NodeHash, EqualForStructurallyEqualNodes) {
  Value a = Op(OpKind::kAdd, {Leaf(kF32_2x3), Leaf(kF32_2x3)}, kF32_2x3);
  Value b = Op(OpKind::kAdd, {Leaf(kF32_2x3), Leaf(kF32_2x3)}, kF32_2x3);
  EXPECT_EQ(a.hash(), b.hash());
}

TEST(NodeHash, DeviceDataHashesShapeAndDTypeOnly) {
  EXPECT_EQ(Leaf(kF32_2x3).hash(), Leaf(kF32_2x3).hash());
  EXPECT_NE(Leaf(kF32_2x3).hash(), Leaf(Shape(DType::kF32, {3, 2})).hash());
  EXPECT_NE(Leaf(kF32_2x3).hash(), Leaf(Shape(DType::kBF16, {2, 3})).hash());
}

TEST(NodeHash, ChangesWithOp) {
  Value x = Leaf(kF32_2x3);
  EXPECT_NE(Op(OpKind::kAdd, {x, x}, kF32_2x3).hash(), Op(OpKind::kMul, {x, x}, kF32_2x3).hash());
}

TEST(NodeHash, ChangesWithOperandOrder) {
  Value x = Leaf(kF32_2x3);
  Value y = Op(OpKind::kExp, {x}, kF32_2x3);
  EXPECT_NE(Op(OpKind::kSub, {x, y}, kF32_2x3).hash(), Op(OpKind::kSub, {y, x}, kF32_2x3).hash());
}

TEST(NodeHash, ChangesWithAttribute) {
  Value x = Leaf(kF32_2x3);
  Shape out(DType::kF32, {3});
  Value s0 = Op(OpKind::kReduceSum, {x}, out, {{AttrKey::kAxes, std::vector<int64_t>{0}}});
  Value s0k = Op(OpKind::kReduceSum, {x}, out, {{AttrKey::kAxes, std::vector<int64_t>{0}}, {AttrKey::kKeepDim, true}});
  Value s1 = Op(OpKind::kReduceSum, {x}, out, {{AttrKey::kAxes, std::vector<int64_t>{1}}});
  EXPECT_NE(s0.hash(), s1.hash());
  EXPECT_NE(s0.hash(), s0k.hash());
}

TEST(NodeHash, AttributeOrderDoesNotMatter) {
  Value x = Leaf(kF32_2x3);
  Shape out(DType::kF32, {1, 3});
  const Attributes dims_first = {{AttrKey::kAxes, std::vector<int64_t>{0}}, {AttrKey::kKeepDim, true}};
  const Attributes keepdim_first = {{AttrKey::kKeepDim, true}, {AttrKey::kAxes, std::vector<int64_t>{0}}};
  Attributes set_one_by_one;
  set_one_by_one.Set(AttrKey::kKeepDim, true).Set(AttrKey::kAxes, std::vector<int64_t>{0});
  EXPECT_EQ(Op(OpKind::kReduceSum, {x}, out, dims_first).hash(),
            Op(OpKind::kReduceSum, {x}, out, keepdim_first).hash());
  EXPECT_EQ(Op(OpKind::kReduceSum, {x}, out, dims_first).hash(),
            Op(OpKind::kReduceSum, {x}, out, set_one_by_one).hash());
  EXPECT_TRUE(dims_first == keepdim_first);
  EXPECT_EQ(dims_first.ToString(), keepdim_first.ToString());
}

TEST(NodeHash, ChangesWithConstantValue) {
  Shape scalar(DType::kF32, {});
  EXPECT_NE(Op(OpKind::kConstant, {}, scalar, {{AttrKey::kValue, 0.5}}).hash(),
            Op(OpKind::kConstant, {}, scalar, {{AttrKey::kValue, 0.25}}).hash());
}

TEST(NodeHash, ChangesWithOutputShape) {
  Value x = Leaf(Shape(DType::kF32, {6}));
  EXPECT_NE(Op(OpKind::kReshape, {x}, kF32_2x3).hash(), Op(OpKind::kReshape, {x}, Shape(DType::kF32, {3, 2})).hash());
}

TEST(NodeHash, ValueHashDistinguishesOutputs) {
  NodePtr n = MakeNode(OpKind::kAdd, OperandList{Leaf(kF32_2x3), Leaf(kF32_2x3)}, ShapeList{kF32_2x3, kF32_2x3});
  EXPECT_NE((Value{n, 0}.hash()), (Value{n, 1}.hash()));
}

TEST(HashBytes, IsXxh3AndStable) {
  // XXH3-64 of the empty input is a published constant: a change of hash function would show here.
  EXPECT_EQ(HashBytes("", 0), 0x2D06800538D394C2ull);
  EXPECT_EQ(HashToHex(0x2D06800538D394C2ull), "2d06800538d394c2");
}

}  // namespace hash_test
}  // namespace lazyrt::ir
