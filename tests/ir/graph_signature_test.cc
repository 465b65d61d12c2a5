#include "ir/graph_signature.h"

#include <gtest/gtest.h>

namespace lazyrt::ir {
namespace {

// leaf(shape) -> mul(leaf, constant value) -> sum
GraphSignature Build(Shape leaf_shape, double value, const char* op = "Mul") {
  Value leaf{MakeNode(OpKind::kDeviceData, OperandList{}, ShapeList{leaf_shape})};
  Value c{MakeNode(OpKind::kConstant, OperandList{}, ShapeList{Shape(DType::kF32, {})},
                   Attributes{{AttrKey::kValue, value}}, nullptr, std::source_location::current())};
  Value m{MakeNode(*OpKindFromName(op), OperandList{leaf, c}, ShapeList{leaf_shape})};
  Value s{MakeNode(OpKind::kReduceSum, OperandList{m}, ShapeList{Shape(DType::kF32, {})},
                   Attributes{{AttrKey::kAxes, std::vector<int64_t>{0}}})};
  std::vector<Value> roots{s};
  return SignatureOf(PostOrder(roots));
}

TEST(RootCauses, EqualGraphsHaveNone) {
  EXPECT_TRUE(RootCauses(Build(Shape(DType::kF32, {4}), 0.5), Build(Shape(DType::kF32, {4}), 0.5)).empty());
}

TEST(RootCauses, AConstantValue) {
  auto causes = RootCauses(Build(Shape(DType::kF32, {4}), 0.5), Build(Shape(DType::kF32, {4}), 0.25));
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_EQ(causes[0].what, "constant value");
  EXPECT_EQ(causes[0].before, "value=0.5");
  EXPECT_EQ(causes[0].now, "value=0.25");
  EXPECT_NE(causes[0].created_at.find("graph_signature_test.cc"), std::string::npos);
}

TEST(RootCauses, ALeafShapeNotWhatFollowsFromIt) {
  // The leaf's shape changes; the Mul's shape follows and is not a cause itself.
  auto causes = RootCauses(Build(Shape(DType::kF32, {4}), 0.5), Build(Shape(DType::kF32, {8}), 0.5));
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_EQ(causes[0].what, "shape");
  EXPECT_EQ(causes[0].before, "f32[4]");
  EXPECT_EQ(causes[0].now, "f32[8]");
  EXPECT_EQ(causes[0].node, 0u);
}

TEST(RootCauses, ADifferentOpIsStructure) {
  auto causes = RootCauses(Build(Shape(DType::kF32, {4}), 0.5), Build(Shape(DType::kF32, {4}), 0.5, "Add"));
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_EQ(causes[0].what, "structure");
  EXPECT_NE(causes[0].before.find("Mul"), std::string::npos);
  EXPECT_NE(causes[0].now.find("Add"), std::string::npos);
}

}  // namespace
}  // namespace lazyrt::ir
