// masked_fill, tril and triu against reference loops and finite differences.
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lazy/tensor.h"
#include "tests/lazy/op_test_util.h"

namespace lazyrt {
namespace masking_test {

using testing::ErrorOf;
using testing::F64;
using testing::GradCheck;
using ::testing::HasSubstr;
using testing::RandomValues;

Tensor Bool(const std::vector<int64_t>& v, const std::vector<int64_t>& dims) {
  return ne(testing::I64(v, dims), Scalar::Static(0));
}

TEST(Masking, MaskedFillBroadcastsTheMask) {
  std::mt19937_64 rng(7);
  const std::vector<double> x = RandomValues(2 * 3 * 4, rng);
  const std::vector<int64_t> mask = {1, 0, 0, 1};  // [4]: broadcast over the first two dims
  const std::vector<double> got = masked_fill(F64(x, {2, 3, 4}), Bool(mask, {4}), Scalar(-7.5)).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], mask[i % 4] ? -7.5 : x[i]) << i;
  // The value is a device parameter: another value, the same graph.
  EXPECT_EQ(graph_hash({masked_fill(F64(x, {2, 3, 4}), Bool(mask, {4}), Scalar(1.0))}),
            graph_hash({masked_fill(F64(x, {2, 3, 4}), Bool(mask, {4}), Scalar(2.0))}));
  GradCheck("masked_fill",
            [&](auto& in) {
              return masked_fill(in[0], Bool({0, 1, 1, 0, 0, 1}, {2, 3}), Scalar(3.0));
            },
            {{2, 3}});
  EXPECT_THAT(ErrorOf([&] {
                masked_fill(F64(x, {2, 3, 4}), testing::I64(mask, {4}), Scalar(0));
              }),
              HasSubstr("masked_fill: the mask must be bool, got i64[4]"));
  EXPECT_THAT(ErrorOf([&] {
                masked_fill(F64({1, 2}, {2}), Bool({1, 0, 1, 0}, {2, 2}), Scalar(0));
              }),
              HasSubstr("must broadcast to x f64[2]"));
}

TEST(Masking, TrilAndTriuMatchReferenceLoops) {
  std::mt19937_64 rng(8);
  for (int64_t rows : {3, 5}) {
    for (int64_t diagonal : {-2, -1, 0, 1, 3}) {
      SCOPED_TRACE(::testing::Message() << rows << "x4, diagonal " << diagonal);
      const std::vector<double> x = RandomValues(2 * rows * 4, rng);
      const std::vector<double> lower = tril(F64(x, {2, rows, 4}), diagonal).to_vector<double>();
      const std::vector<double> upper = triu(F64(x, {2, rows, 4}), diagonal).to_vector<double>();
      for (size_t i = 0; i < x.size(); ++i) {
        const int64_t r = static_cast<int64_t>(i / 4) % rows, c = static_cast<int64_t>(i % 4);
        EXPECT_EQ(lower[i], c - r <= diagonal ? x[i] : 0.0) << i;
        EXPECT_EQ(upper[i], c - r >= diagonal ? x[i] : 0.0) << i;
      }
    }
  }
  // Integer and bool tensors too; the graph has no host-made mask (only iota, compare and select).
  EXPECT_EQ(tril(testing::I64({1, 2, 3, 4}, {2, 2})).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 3, 4}));
  const Tensor causal = tril(ones({3, 3}, DType::kBool));
  EXPECT_EQ(causal.to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
  const std::string text = graph_text({tril(F64({1, 2, 3, 4}, {2, 2}), 1)});
  EXPECT_THAT(text, ::testing::AllOf(HasSubstr("Iota"), ::testing::Not(HasSubstr("# parameter 1"))));
  GradCheck("tril", [](auto& in) { return tril(in[0], -1); }, {{2, 3, 3}});
  GradCheck("triu", [](auto& in) { return triu(in[0], 1); }, {{3, 4}});
  EXPECT_THAT(ErrorOf([] { tril(F64({1, 2}, {2})); }), HasSubstr("tril: needs a tensor of at least 2 dimensions"));
}

}  // namespace masking_test
}  // namespace lazyrt
