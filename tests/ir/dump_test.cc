#include "ir/dump.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace lazyrt::ir {
namespace dump_test {

using ::testing::HasSubstr;

std::vector<Value> SmallGraph() {
  const Shape s(DType::kF32, {2, 3});
  Value a{MakeNode(OpKind::kDeviceData, OperandList{}, ShapeList{s})};
  Value c{MakeNode(OpKind::kConstant, OperandList{}, ShapeList{Shape(DType::kF32, {})},
                   Attributes{{AttrKey::kValue, 0.5}})};
  Value m{MakeNode(OpKind::kMul, OperandList{a, c}, ShapeList{s})};
  return {m};
}

TEST(GraphText, ListsNodesInPostOrderWithParametersAndHash) {
  const std::string text = GraphText(SmallGraph());
  EXPECT_THAT(text, HasSubstr("%0 = DeviceData() : f32[2,3]  # parameter 0\n"));
  EXPECT_THAT(text, HasSubstr("%1 = Constant() {value=0.5} : f32[]\n"));
  EXPECT_THAT(text, HasSubstr("%2 = Mul(%0, %1) : f32[2,3]\n"));
  EXPECT_THAT(text, HasSubstr("roots: %2\n"));
  EXPECT_THAT(text, HasSubstr("hash: "));
}

TEST(GraphDot, IsADigraphWithEdges) {
  const std::string dot = GraphDot(SmallGraph());
  EXPECT_THAT(dot, HasSubstr("digraph lazyrt {"));
  EXPECT_THAT(dot, HasSubstr("n0 -> n2;"));
  EXPECT_THAT(dot, HasSubstr("n1 -> n2;"));
  EXPECT_THAT(dot, HasSubstr("label=\"Mul\\nf32[2,3]\""));
}

}  // namespace dump_test
}  // namespace lazyrt::ir
