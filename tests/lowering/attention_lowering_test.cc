// The lowering of Attention and AttentionGrad: one device instruction each, q, k and v broadcast to the
// batch dims, the mask given the scores' rank but left broadcast (the kernel reads it with stride 0).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ir/node.h"
#include "ir/post_order.h"
#include "ir/shape_inference.h"
#include "lowering/lower.h"
#include "pjrt_sim/module_verifier.h"
#include "pjrt_sim/opcode.h"

namespace lazyrt::lowering {
namespace attention_lowering_test {

using ir::AttrKey;
using ir::DType;
using ir::OpKind;
using ir::Shape;
using ir::Value;
using pjrt::Opcode;

Value Leaf(Shape shape) { return Value{ir::MakeNode(OpKind::kDeviceData, ir::OperandList{}, ir::ShapeList{shape})}; }

pjrt::proto::Module Lower(const Value& root) {
  const Value roots[] = {root};
  ir::PostOrder order(roots);
  absl::StatusOr<pjrt::proto::Module> module = LowerGraph(order, "attention");
  EXPECT_TRUE(module.ok()) << module.status();
  EXPECT_TRUE(pjrt::VerifyModule(*module).ok()) << pjrt::VerifyModule(*module);
  return *module;
}

std::vector<int64_t> DimsOf(const pjrt::proto::Module& m, int64_t id) {
  const auto& d = m.instructions(static_cast<int>(id)).shape().dims();
  return {d.begin(), d.end()};
}

TEST(AttentionLowering, BroadcastsBatchDimsAndKeepsTheMaskBroadcast) {
  const Shape q(DType::kF32, {2, 3, 5, 4}), k(DType::kF32, {3, 7, 4}), v(DType::kF32, {1, 3, 7, 6});
  const Shape mask(DType::kBool, {5, 7});
  const ir::Attributes attrs{{AttrKey::kScale, 0.25}, {AttrKey::kCausal, false}};
  const Value lq = Leaf(q), lk = Leaf(k), lv = Leaf(v), lmask = Leaf(mask);
  absl::StatusOr<Shape> packed = ir::InferAttention(q, k, v, &mask);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(*packed, Shape(DType::kF32, {2, 3, 5, 7}));
  const Value fwd = {
      ir::MakeNode(OpKind::kAttention, ir::OperandList{lq, lk, lv, lmask}, ir::ShapeList{*packed}, attrs)};
  const pjrt::proto::Module m = Lower(fwd);
  const pjrt::proto::Instruction& root = m.instructions(m.instructions_size() - 1);
  ASSERT_EQ(root.opcode(), static_cast<int32_t>(Opcode::kAttention));
  EXPECT_EQ(root.value(), 0.25);
  EXPECT_FALSE(root.causal());
  ASSERT_EQ(root.operands_size(), 4);
  EXPECT_EQ(DimsOf(m, root.operands(1)), (std::vector<int64_t>{2, 3, 7, 4}));  // k broadcast
  EXPECT_EQ(DimsOf(m, root.operands(2)), (std::vector<int64_t>{2, 3, 7, 6}));  // v broadcast
  EXPECT_EQ(DimsOf(m, root.operands(3)), (std::vector<int64_t>{1, 1, 5, 7}));  // the mask, not [2, 3, 5, 7]

  absl::StatusOr<Shape> grads = ir::InferAttentionGrad(q, k, v, nullptr);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ(*grads, Shape(DType::kF32, {2, 3, 5 * 4 + 7 * 4 + 7 * 6}));
  const ir::Attributes causal{{AttrKey::kScale, 0.5}, {AttrKey::kCausal, true}};
  const Value fwd2 = {ir::MakeNode(OpKind::kAttention, ir::OperandList{lq, lk, lv},
                                   ir::ShapeList{*ir::InferAttention(q, k, v, nullptr)}, causal)};
  const Value dout = Leaf(Shape(DType::kF32, {2, 3, 5, 6}));
  const Value grad = {
      ir::MakeNode(OpKind::kAttentionGrad, ir::OperandList{lq, lk, lv, fwd2, dout}, ir::ShapeList{*grads}, causal)};
  const pjrt::proto::Module mg = Lower(grad);
  const pjrt::proto::Instruction& g = mg.instructions(mg.instructions_size() - 1);
  ASSERT_EQ(g.opcode(), static_cast<int32_t>(Opcode::kAttentionGrad));
  EXPECT_TRUE(g.causal());
  EXPECT_EQ(g.operands_size(), 5);
}

TEST(AttentionLowering, ShapeInferenceRefusesWhatTheKernelCannotDo) {
  const Shape q(DType::kF32, {2, 5, 4}), k(DType::kF32, {2, 7, 4}), v(DType::kF32, {2, 7, 6});
  const Shape f16(DType::kF16, {2, 5, 4});
  EXPECT_THAT(std::string(ir::InferAttention(f16, f16, f16, nullptr).status().message()),
              ::testing::HasSubstr("f32, f64 or bf16 (convert f16 first)"));
  // bf16 computes in f32: the packed output and logsumexp are f32, the gradients bf16.
  const Shape bq(DType::kBF16, {2, 5, 4}), bk(DType::kBF16, {2, 7, 4}), bv(DType::kBF16, {2, 7, 6});
  EXPECT_EQ(*ir::InferAttention(bq, bk, bv, nullptr), Shape(DType::kF32, {2, 5, 7}));
  EXPECT_EQ(*ir::InferAttentionGrad(bq, bk, bv, nullptr), Shape(DType::kBF16, {2, 5 * 4 + 7 * 4 + 7 * 6}));
  const Shape big_mask(DType::kBool, {3, 2, 5, 7});  // would grow the result
  EXPECT_THAT(std::string(ir::InferAttention(q, k, v, &big_mask).status().message()),
              ::testing::HasSubstr("broadcast to the scores [2,5,7]"));
}

}  // namespace attention_lowering_test
}  // namespace lazyrt::lowering
