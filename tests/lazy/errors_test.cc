#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lazy/metrics.h"
#include "lazy/tensor.h"

namespace lazyrt {
namespace errors_test {

using ::testing::AllOf;
using ::testing::HasSubstr;

Tensor Input(std::vector<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n), 1.0f);
  return Tensor::FromData(v, dims);
}

// The error must be raised at the op, naming both shapes and the line of the caller.
TEST(Errors, BroadcastMismatchNamesShapesAndCallerLine) {
  Tensor a = Input({2, 3}), b = Input({4});
  const int line = __LINE__ + 2;
  try {
    Tensor c = a + b;
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("f32[2,3]"), HasSubstr("f32[4]"), HasSubstr("errors_test.cc:" + std::to_string(line))));
    EXPECT_THAT(e.location(), HasSubstr("errors_test.cc:" + std::to_string(line)));
  }
}

TEST(Errors, MatmulMismatchViaNamedFunction) {
  Tensor a = Input({2, 3}), b = Input({4, 5});
  const int line = __LINE__ + 2;  // the call, below `try {`
  try {
    matmul(a, b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("matmul"), HasSubstr("f32[2,3]"), HasSubstr("f32[4,5]"),
                                HasSubstr(":" + std::to_string(line))));
  }
}

TEST(Errors, ScalarOperatorCapturesCallerLine) {
  Tensor b = Input({2});
  Tensor undefined;
  const int line = __LINE__ + 2;  // the call, below `try {`
  try {
    Tensor c = undefined * 2.0;
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("undefined tensor"), HasSubstr(":" + std::to_string(line))));
  }
}

TEST(Errors, ArithmeticOnBoolIsRefused) {
  Tensor p = gt(Input({3}), Input({3})), q = lt(Input({3}), Input({3}));
  const int line = __LINE__ + 2;  // the call, below `try {`
  try {
    Tensor r = add(p, q);
    FAIL() << "bool + bool computed something";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("arithmetic on bool"), HasSubstr("logical_or"), HasSubstr(":" + std::to_string(line))));
  }
  EXPECT_THROW(mul(p, q), Error);
  EXPECT_THROW(sub(p, q), Error);
  EXPECT_THROW(p * 2, Error);
  EXPECT_THROW(neg(p), Error);
  // Logic and comparisons on bool, and arithmetic after a cast, are fine.
  EXPECT_NO_THROW(logical_or(p, q));
  EXPECT_NO_THROW(eq(p, q));
  EXPECT_EQ(sum(add(cast(p, DType::kI64), cast(q, DType::kI64))).item(), 0);
}

TEST(Errors, Others) {
  Tensor x = Input({2, 3});
  EXPECT_THROW(reshape(x, {4, 2}), Error);
  EXPECT_THROW(sum(x, {2}), Error);
  EXPECT_THROW(sum(x, {1, -1}), Error);
  EXPECT_THROW(transpose(x, 0, 5), Error);
  EXPECT_THROW(mean(arange(0, 3)), Error);
  EXPECT_THROW(where(x, x, x), Error);
  EXPECT_THROW(index_select(x, 0, x), Error);
  EXPECT_THROW(one_hot(x, 3), Error);
  EXPECT_THROW(slice(x, 0, 0, 1, 0), Error);
  EXPECT_THROW(zeros({-1}), Error);
  EXPECT_THROW(Tensor::FromData({1, 2, 3}, {2, 2}), Error);
  EXPECT_THROW(zeros({2}, DType::kF32, Device{7}), Error);
  EXPECT_THROW(x.assign(Input({3})), Error);
  try {
    reshape(x, {4, 2});
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("f32[2,3]"), HasSubstr("[4,2]")));
  }
}

TEST(Metrics, ReadingAnUnknownCounterIsAnErrorNamingTheKnownOnes) {
  EXPECT_GE(CounterValue(counters::kGraphsCompiled), 0);
  EXPECT_GE(CounterValue(PersistentCacheMissCounter("payload_checksum")), 0);
  try {
    CounterValue("graphs_compield");
    FAIL() << "a misspelt counter read as a number";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("no counter is named 'graphs_compield'"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("graphs_compiled"));
  }
}

}  // namespace errors_test
}  // namespace lazyrt
