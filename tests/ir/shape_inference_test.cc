#include "ir/shape_inference.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace lazyrt::ir {
namespace shape_inference_test {

using ::testing::HasSubstr;

TEST(Broadcast, NumpyRules) {
  EXPECT_EQ(*BroadcastDims(std::vector<int64_t>{2, 1, 3}, std::vector<int64_t>{4, 1}), (Dims{2, 4, 3}));
  EXPECT_EQ(*BroadcastDims(std::vector<int64_t>{}, std::vector<int64_t>{5}), (Dims{5}));
  EXPECT_EQ(*BroadcastDims(std::vector<int64_t>{0, 1}, std::vector<int64_t>{1, 7}), (Dims{0, 7}));
}

TEST(Broadcast, MismatchNamesBothShapes) {
  const Shape a(DType::kF32, {2, 3}), b(DType::kF32, {4});
  absl::StatusOr<Shape> r = InferElementwise(OpKind::kAdd, std::vector<const Shape*>{&a, &b});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("f32[2,3]"));
  EXPECT_THAT(r.status().message(), HasSubstr("f32[4]"));
}

// torch.result_type: a 0-dim operand promotes the other only when its category is higher.
TEST(ResultType, ZeroDimOperandsPromoteOnlyAcrossCategories) {
  const Shape f32_3(DType::kF32, {3}), i32_3(DType::kI32, {3}), bool_3(DType::kBool, {3});
  const Shape f64_0(DType::kF64, {}), i64_0(DType::kI64, {}), f32_0(DType::kF32, {}), i32_0(DType::kI32, {});
  EXPECT_EQ(ResultType(f32_3, f64_0), DType::kF32);
  EXPECT_EQ(ResultType(f64_0, f32_3), DType::kF32);
  EXPECT_EQ(ResultType(i32_3, i64_0), DType::kI32);
  EXPECT_EQ(ResultType(i32_3, f32_0), DType::kF32);
  EXPECT_EQ(ResultType(i32_3, f64_0), DType::kF64);
  EXPECT_EQ(ResultType(bool_3, i32_0), DType::kI32);
  EXPECT_EQ(ResultType(f32_0, f64_0), DType::kF64);  // both 0-dim: ordinary promotion
  EXPECT_EQ(ResultType(i32_0, i64_0), DType::kI64);
  EXPECT_EQ(ResultType(f32_3, Shape(DType::kF64, {1})), DType::kF64);  // [1] is not 0-dim
  EXPECT_EQ(ResultType(Shape(DType::kBF16, {2}), f32_0), DType::kBF16);
}

TEST(Elementwise, ComparisonsYieldBool) {
  const Shape a(DType::kF32, {2});
  EXPECT_EQ(InferElementwise(OpKind::kLt, std::vector<const Shape*>{&a, &a})->dtype(), DType::kBool);
}

TEST(MatMul, BatchedWithBroadcast) {
  EXPECT_EQ(*InferMatMul(Shape(DType::kF32, {5, 1, 2, 3}), Shape(DType::kF32, {4, 3, 7})),
            Shape(DType::kF32, {5, 4, 2, 7}));
  EXPECT_EQ(*InferMatMul(Shape(DType::kF32, {3, 2}), Shape(DType::kF32, {3, 7}), true, false),
            Shape(DType::kF32, {2, 7}));
}

TEST(MatMul, ContractionMismatch) {
  absl::StatusOr<Shape> r = InferMatMul(Shape(DType::kF32, {2, 3}), Shape(DType::kF32, {4, 5}));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("f32[2,3]"));
  EXPECT_THAT(r.status().message(), HasSubstr("f32[4,5]"));
}

TEST(Reshape, InfersOneDimension) {
  EXPECT_EQ(*InferReshape(Shape(DType::kF32, {4, 6}), std::vector<int64_t>{-1, 3}), Shape(DType::kF32, {8, 3}));
  EXPECT_FALSE(InferReshape(Shape(DType::kF32, {4, 6}), std::vector<int64_t>{5, -1}).ok());
  EXPECT_FALSE(InferReshape(Shape(DType::kF32, {4, 6}), std::vector<int64_t>{-1, -1}).ok());
}

TEST(Reduce, KeepDim) {
  const Shape in(DType::kF32, {2, 3, 4});
  EXPECT_EQ(InferReduce(in, std::vector<int64_t>{1}, true, DType::kF32), Shape(DType::kF32, {2, 1, 4}));
  EXPECT_EQ(InferReduce(in, std::vector<int64_t>{0, 2}, false, DType::kF32), Shape(DType::kF32, {3}));
}

TEST(Permute, RejectsNonPermutation) {
  EXPECT_FALSE(InferPermute(Shape(DType::kF32, {2, 3}), std::vector<int64_t>{0, 0}).ok());
  EXPECT_EQ(*InferPermute(Shape(DType::kF32, {2, 3, 4}), std::vector<int64_t>{2, 0, 1}), Shape(DType::kF32, {4, 2, 3}));
}

TEST(Expand, OnlySizeOneDimsGrow) {
  EXPECT_EQ(*InferExpand(Shape(DType::kF32, {3, 1}), std::vector<int64_t>{2, 3, 4}), Shape(DType::kF32, {2, 3, 4}));
  EXPECT_FALSE(InferExpand(Shape(DType::kF32, {3, 2}), std::vector<int64_t>{3, 4}).ok());
}

TEST(Slice, SizesAndBounds) {
  EXPECT_EQ(
      *InferSlice(Shape(DType::kF32, {10}), std::vector<int64_t>{1}, std::vector<int64_t>{8}, std::vector<int64_t>{3}),
      Shape(DType::kF32, {3}));
  EXPECT_FALSE(
      InferSlice(Shape(DType::kF32, {10}), std::vector<int64_t>{1}, std::vector<int64_t>{11}, std::vector<int64_t>{1})
          .ok());
}

TEST(Concat, SumsTheAxis) {
  std::vector<Shape> in = {Shape(DType::kF32, {2, 3}), Shape(DType::kF32, {2, 5})};
  EXPECT_EQ(*InferConcat(in, 1), Shape(DType::kF32, {2, 8}));
  EXPECT_FALSE(InferConcat(in, 0).ok());
}

TEST(Indexing, IndexSelectGatherOneHot) {
  EXPECT_EQ(*InferIndexSelect(Shape(DType::kF32, {100, 16}), 0, Shape(DType::kI64, {7})), Shape(DType::kF32, {7, 16}));
  EXPECT_FALSE(InferIndexSelect(Shape(DType::kF32, {100, 16}), 0, Shape(DType::kF32, {7})).ok());
  EXPECT_EQ(*InferGather(Shape(DType::kF32, {4, 10}), 1, Shape(DType::kI64, {4, 1})), Shape(DType::kF32, {4, 1}));
  EXPECT_EQ(*InferOneHot(Shape(DType::kI64, {8}), 10, DType::kF32), Shape(DType::kF32, {8, 10}));
}

TEST(NormalizeDim, NegativeAndOutOfRange) {
  EXPECT_EQ(*NormalizeDim(-1, 3), 2);
  absl::StatusOr<int64_t> bad = NormalizeDim(3, 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("-3 to 2"));
}

}  // namespace shape_inference_test
}  // namespace lazyrt::ir
