#include "ir/graph_signature.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace lazyrt::ir {
namespace graph_signature_test {

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
  EXPECT_EQ(causes[0].kind, DifferenceKind::kConstantValue);
  EXPECT_EQ(causes[0].before, "value=0.5");
  EXPECT_EQ(causes[0].now, "value=0.25");
  EXPECT_NE(causes[0].created_at.find("graph_signature_test.cc"), std::string::npos);
}

TEST(RootCauses, ALeafShapeNotWhatFollowsFromIt) {
  // The leaf's shape changes; the Mul's shape follows and is not a cause itself.
  auto causes = RootCauses(Build(Shape(DType::kF32, {4}), 0.5), Build(Shape(DType::kF32, {8}), 0.5));
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_EQ(causes[0].kind, DifferenceKind::kShape);
  EXPECT_EQ(causes[0].before, "f32[4]");
  EXPECT_EQ(causes[0].now, "f32[8]");
  EXPECT_EQ(causes[0].node, 0u);
}

TEST(RootCauses, ADifferentOpIsStructure) {
  auto causes = RootCauses(Build(Shape(DType::kF32, {4}), 0.5), Build(Shape(DType::kF32, {4}), 0.5, "Add"));
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_EQ(causes[0].kind, DifferenceKind::kStructure);
  EXPECT_NE(causes[0].before.find("Mul"), std::string::npos);
  EXPECT_NE(causes[0].now.find("Add"), std::string::npos);
}

// x (+ optional o) -> relu -> sum, every node at a line of its own.
GraphSignature WithOptional(bool present, std::source_location x_at = std::source_location::current()) {
  const Shape s(DType::kF32, {4});
  Value x{MakeNode(OpKind::kDeviceData, OperandList{}, ShapeList{s}, Attributes{}, nullptr, x_at)};
  Value h = x;
  if (present) {
    Value o{MakeNode(OpKind::kDeviceData, OperandList{}, ShapeList{s}, Attributes{}, nullptr,
                     std::source_location::current())};
    h = Value{MakeNode(OpKind::kAdd, OperandList{x, o}, ShapeList{s}, Attributes{}, nullptr,
                       std::source_location::current())};
  }
  Value r{
      MakeNode(OpKind::kRelu, OperandList{h}, ShapeList{s}, Attributes{}, nullptr, std::source_location::current())};
  Value sum{MakeNode(OpKind::kReduceSum, OperandList{r}, ShapeList{Shape(DType::kF32, {})},
                     Attributes{{AttrKey::kAxes, std::vector<int64_t>{0}}}, nullptr, std::source_location::current())};
  std::vector<Value> roots{sum};
  return SignatureOf(PostOrder(roots));
}

TEST(CompareGraphs, AnOptionalInputIsOneCauseNotACascade) {
  // The input and the Add reading it appear; the Relu and the sum after them are the same nodes
  // reading something new, so they inherit the change and are not causes.
  GraphComparison c = CompareGraphs(WithOptional(false), WithOptional(true));
  ASSERT_EQ(c.causes.size(), 1u);
  EXPECT_EQ(c.causes[0].kind, DifferenceKind::kPresence);
  EXPECT_TRUE(c.causes[0].leaf);
  EXPECT_EQ(c.causes[0].before, "absent");
  EXPECT_EQ(c.causes[0].now, "present");
  // The other way round: gone.
  c = CompareGraphs(WithOptional(true), WithOptional(false));
  ASSERT_EQ(c.causes.size(), 1u);
  EXPECT_EQ(c.causes[0].kind, DifferenceKind::kPresence);
  EXPECT_EQ(c.causes[0].now, "absent");
  EXPECT_GT(c.similarity, 0.5);
}

TEST(CompareGraphs, NodesPairByCreationSiteNotPosition) {
  // The same graph built from two places differs only in where its input was created.
  GraphComparison c = CompareGraphs(WithOptional(false), WithOptional(false));
  EXPECT_TRUE(c.causes.empty());
  EXPECT_EQ(c.similarity, 1.0);
  const GraphSignature elsewhere = WithOptional(false);
  c = CompareGraphs(elsewhere, WithOptional(false));
  ASSERT_EQ(c.causes.size(), 2u);  // one input gone, another come
  EXPECT_EQ(c.causes[0].kind, DifferenceKind::kPresence);
}

TEST(CompareGraphs, UnrelatedGraphsAreDissimilar) {
  GraphComparison c = CompareGraphs(Build(Shape(DType::kF32, {4}), 0.5), WithOptional(true));
  EXPECT_LT(c.similarity, 0.5);
}

// The sum of `n` inputs made by one line in a loop (as an update per parameter would be).
GraphSignature SumOfInputs(int n) {
  const Shape s(DType::kF32, {4});
  Value total;
  for (int i = 0; i < n; ++i) {
    Value x{MakeNode(OpKind::kDeviceData, OperandList{}, ShapeList{s}, Attributes{}, nullptr,
                     std::source_location::current())};
    total = i == 0 ? x
                   : Value{MakeNode(OpKind::kAdd, OperandList{total, x}, ShapeList{s}, Attributes{}, nullptr,
                                    std::source_location::current())};
  }
  std::vector<Value> roots{total};
  return SignatureOf(PostOrder(roots));
}

TEST(CompareGraphs, ALoopMakingMoreNodesIsOneCountNotOneCausePerNode) {
  // Which of a line's nodes is which cannot be told: the cause is how many there are, once.
  GraphComparison c = CompareGraphs(SumOfInputs(3), SumOfInputs(5));
  ASSERT_EQ(c.causes.size(), 1u);
  EXPECT_EQ(c.causes[0].kind, DifferenceKind::kPresence);
  EXPECT_TRUE(c.causes[0].repeated);
  EXPECT_EQ(c.causes[0].before, "3 nodes");
  EXPECT_EQ(c.causes[0].now, "5 nodes");
}

TEST(DisplayPath, RelativeToTheWorkingDirectory) {
  char buffer[4096];
  ASSERT_NE(getcwd(buffer, sizeof buffer), nullptr);
  EXPECT_EQ(DisplayPath(std::string(buffer) + "/src/train.cc"), "src/train.cc");
  EXPECT_EQ(DisplayPath("examples/train_mlp.cpp"), "examples/train_mlp.cpp");
  EXPECT_EQ(DisplayPath("/elsewhere/train.cc"), "/elsewhere/train.cc");
}

}  // namespace graph_signature_test
}  // namespace lazyrt::ir
