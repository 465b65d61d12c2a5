#include "ir/post_order.h"

#include <gtest/gtest.h>

namespace lazyrt::ir {
namespace post_order_test {

const Shape kS(DType::kF32, {4});

Value Leaf() { return Value{MakeNode(OpKind::kDeviceData, OperandList{}, ShapeList{kS})}; }
Value Op(OpKind op, OperandList operands) { return Value{MakeNode(op, std::move(operands), ShapeList{kS})}; }

TEST(PostOrder, OperandsComeFirstAndEachNodeOnce) {
  Value a = Leaf(), b = Leaf();
  Value s = Op(OpKind::kAdd, {a, b});
  Value m = Op(OpKind::kMul, {s, s});
  PostOrder order(std::vector<Value>{m});
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order.nodes()[0], a.node.get());
  EXPECT_EQ(order.operand_positions(3)[0], 2u);
  EXPECT_EQ(order.root_positions()[0], 3u);
  EXPECT_EQ(order.nodes()[1], b.node.get());
  EXPECT_EQ(order.nodes()[2], s.node.get());
  EXPECT_EQ(order.nodes()[3], m.node.get());
  EXPECT_EQ(order.parameter_positions().size(), 2u);
}

TEST(PostOrder, SharedNodesAcrossRootsVisitedOnce) {
  Value a = Leaf();
  Value e = Op(OpKind::kExp, {a});
  Value r1 = Op(OpKind::kNeg, {e}), r2 = Op(OpKind::kAbs, {e});
  PostOrder order(std::vector<Value>{r1, r2});
  EXPECT_EQ(order.size(), 4u);
}

TEST(PostOrder, MillionNodeChainNeitherOverflowsTraversalNorDestruction) {
  Value v = Leaf();
  for (int i = 0; i < 1'000'000; ++i) v = Op(OpKind::kNeg, {v});
  {
    PostOrder order(std::vector<Value>{v});
    EXPECT_EQ(order.size(), 1'000'001u);
    EXPECT_EQ(order.parameter_positions().size(), 1u);
  }
  v = {};  // releases the whole chain: must not recurse a million frames deep
  SUCCEED();
}

TEST(DagHash, TellsWhichParameterFeedsWhichUse) {
  // (a+b)*a and (a+b)*b have equal root hashes (leaves hash their shapes only) but compute different
  // things: the DAG hash must differ.
  Value a = Leaf(), b = Leaf();
  Value s = Op(OpKind::kAdd, {a, b});
  Value x = Op(OpKind::kMul, {s, a});
  Value y = Op(OpKind::kMul, {s, b});
  EXPECT_EQ(x.hash(), y.hash());
  std::vector<Value> rx{x}, ry{y};
  const HashValue hx = PostOrder(rx).dag_hash();
  const HashValue hy = PostOrder(ry).dag_hash();
  EXPECT_NE(hx, hy);
}

TEST(DagHash, EqualForEqualGraphsBuiltTwice) {
  auto build = [] {
    Value a = Leaf(), b = Leaf();
    return Op(OpKind::kMul, {Op(OpKind::kAdd, {a, b}), a});
  };
  std::vector<Value> r1{build()}, r2{build()};
  EXPECT_EQ(PostOrder(r1).dag_hash(), PostOrder(r2).dag_hash());
}

TEST(DagHash, DependsOnRootOrder) {
  Value a = Leaf();
  Value n = Op(OpKind::kNeg, {a}), e = Op(OpKind::kExp, {a});
  std::vector<Value> r1{n, e}, r2{e, n};
  EXPECT_NE(PostOrder(r1).dag_hash(), PostOrder(r2).dag_hash());
}

}  // namespace post_order_test
}  // namespace lazyrt::ir
