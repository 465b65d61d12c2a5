// End to end through sync: tracing, lowering, compiling, caching and executing, against values computed
// by hand in the test.
#include <cmath>
#include <numeric>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lazy/metrics.h"
#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace lazyrt {
namespace execution_test {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

Tensor Range(std::vector<int64_t> dims, float scale = 1.0f) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<float>(i) - static_cast<float>(n) / 2) * scale;
  return Tensor::FromData(v, dims);
}

TEST(Execution, ElementwiseWithBroadcastAndScalars) {
  Tensor a = Range({2, 3});  // [-3 -2 -1; 0 1 2]
  Tensor b = Tensor::FromData({10, 20, 30}, {3});
  EXPECT_THAT((a * b + 1.0).to_vector<float>(), ElementsAre(-29, -39, -29, 1, 21, 61));
  EXPECT_THAT(relu(a).to_vector<float>(), ElementsAre(0, 0, 0, 0, 1, 2));
  EXPECT_THAT((2.0 - a).to_vector<float>(), ElementsAre(5, 4, 3, 2, 1, 0));
  EXPECT_THAT(where(gt(a, 0.0), a, b).to_vector<float>(), ElementsAre(10, 20, 30, 10, 1, 2));
  EXPECT_THAT(abs(a).to_vector<float>(), ElementsAre(3, 2, 1, 0, 1, 2));
  EXPECT_THAT(maximum(a, zeros({1})).to_vector<float>(), ElementsAre(0, 0, 0, 0, 1, 2));
  std::vector<float> e = exp(a).to_vector<float>();
  for (size_t i = 0; i < e.size(); ++i) EXPECT_FLOAT_EQ(e[i], std::exp(static_cast<float>(i) - 3.0f));
}

TEST(Execution, MatmulReductionsAndSoftmax) {
  Tensor x = Tensor::FromData({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = Tensor::FromData({1, 0, 0, 1, 1, 1}, {3, 2});
  EXPECT_THAT(matmul(x, w).to_vector<float>(), ElementsAre(4, 5, 10, 11));
  EXPECT_THAT(matmul(transpose(x, 0, 1), x).to_vector<float>(), ElementsAre(17, 22, 27, 22, 29, 36, 27, 36, 45));
  EXPECT_THAT(sum(x, {0}).to_vector<float>(), ElementsAre(5, 7, 9));
  EXPECT_THAT(sum(x, {1}, true).to_vector<float>(), ElementsAre(6, 15));
  EXPECT_THAT(max(x, {1}).to_vector<float>(), ElementsAre(3, 6));
  EXPECT_THAT(mean(x).to_vector<float>(), ElementsAre(3.5));
  EXPECT_THAT(argmax(x, 0).to_vector<int64_t>(), ElementsAre(1, 1, 1));
  std::vector<float> s = softmax(x, 1).to_vector<float>();
  const float z = std::exp(1.0f) + std::exp(2.0f) + std::exp(3.0f);
  EXPECT_NEAR(s[0], std::exp(1.0f) / z, 1e-6);
  EXPECT_NEAR(s[5], std::exp(3.0f) / z, 1e-6);
  std::vector<float> ls = log_softmax(x, 1).to_vector<float>();
  EXPECT_NEAR(ls[2], 3.0f - std::log(z), 1e-5);
}

TEST(Execution, DataMovement) {
  Tensor x = Tensor::FromData({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_THAT(transpose(x, 0, 1).to_vector<float>(), ElementsAre(1, 4, 2, 5, 3, 6));
  EXPECT_THAT(slice(x, 1, 0, 3, 2).to_vector<float>(), ElementsAre(1, 3, 4, 6));
  EXPECT_THAT(cat({x, x * 10.0}, 0).to_vector<float>(), ElementsAre(1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60));
  EXPECT_THAT(expand(reshape(x, {2, 1, 3}), {2, 2, 3}).to_vector<float>(),
              ElementsAre(1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6));
  std::vector<int64_t> idx = {1, 0, 1};
  const std::vector<int64_t> idx_dims = {3};
  Tensor index = Tensor::FromData(std::span<const int64_t>(idx), idx_dims);
  EXPECT_THAT(index_select(x, 0, index).to_vector<float>(), ElementsAre(4, 5, 6, 1, 2, 3, 4, 5, 6));
  EXPECT_THAT(one_hot(index, 3).to_vector<float>(), ElementsAre(0, 1, 0, 1, 0, 0, 0, 1, 0));
  std::vector<int64_t> g = {2, 0};
  const std::vector<int64_t> g_dims = {2, 1};
  EXPECT_THAT(gather(x, 1, Tensor::FromData(std::span<const int64_t>(g), g_dims)).to_vector<float>(),
              ElementsAre(3, 4));
  EXPECT_THAT(arange(2, 10, 3).to_vector<int64_t>(), ElementsAre(2, 5, 8));
  EXPECT_THAT(full({2}, 7.5).to_vector<float>(), ElementsAre(7.5, 7.5));
}

TEST(Execution, SameStepTwiceCompilesOnceEvenWhenScalarsChange) {
  Tensor w = Range({4, 4}, 0.1f);
  auto step = [&](double lr) {
    w.assign(w - matmul(w, w) * lr);
    sync();
  };
  step(0.1);  // first time: compiles
  const int64_t compiled = CounterValue(counters::kGraphsCompiled);
  const int64_t hits = CounterValue(counters::kExecutableCacheHit);
  for (int i = 0; i < 5; ++i) step(0.01 * i);
  EXPECT_EQ(CounterValue(counters::kGraphsCompiled), compiled);
  EXPECT_EQ(CounterValue(counters::kExecutableCacheHit), hits + 5);
  EXPECT_FALSE(w.is_pending());
  EXPECT_TRUE(std::isfinite(w.to_vector<float>()[0]));
}

TEST(Execution, ItemIsAnImplicitSyncOfThePendingGraph) {
  Tensor x = Range({3});
  Tensor other = x * 3.0;  // pending too: the implicit sync computes it as well
  const int64_t before = CounterValue(counters::kSyncItem);
  EXPECT_EQ(sum(x).item(), -1.5);
  EXPECT_EQ(CounterValue(counters::kSyncItem), before + 1);
  EXPECT_FALSE(other.is_pending());
  EXPECT_THROW(x.item(), Error);  // three elements
}

TEST(Execution, RandomNumbersChangeEveryStepWithoutRecompiling) {
  std::vector<float> first = rand({256}).to_vector<float>();
  const int64_t compiled = CounterValue(counters::kGraphsCompiled);
  std::vector<float> second = rand({256}).to_vector<float>();
  EXPECT_EQ(CounterValue(counters::kGraphsCompiled), compiled);
  EXPECT_NE(first, second);
  for (float v : first) EXPECT_TRUE(v >= 0.0f && v < 1.0f);
  std::vector<float> n = randn({4096}, 2.0, 3.0).to_vector<float>();
  const double m = std::accumulate(n.begin(), n.end(), 0.0) / static_cast<double>(n.size());
  EXPECT_NEAR(m, 2.0, 0.2);
}

TEST(Execution, BuffersAreFreedWhenTensorsDie) {
  pjrt::Device* device = detail::Runtime::Get().device_state({0}, SourceLocation::current()).device;
  wait_device();
  const int64_t start = device->memory_stats().bytes_in_use;
  {
    Tensor a = Range({256, 256});
    Tensor b = relu(a) + a;
    sync();
    wait_device();
    EXPECT_GT(device->memory_stats().bytes_in_use, start);
  }
  wait_device();
  EXPECT_EQ(device->memory_stats().bytes_in_use, start);
}

TEST(Execution, OutOfMemoryIsAClearErrorAndTheRuntimeGoesOn) {
  pjrt::Device* device = detail::Runtime::Get().device_state({0}, SourceLocation::current()).device;
  wait_device();
  const int64_t start = device->memory_stats().bytes_in_use;
  {
    Tensor huge = zeros({5, int64_t{1} << 30});  // 20 GiB on a 16 GiB device
    const int line = __LINE__ + 2;               // the call, below `try {`
    try {
      sync();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("out of memory"), HasSubstr("limit"),
                                  HasSubstr("execution_test.cc:" + std::to_string(line))));
    }
  }  // the tensor (and its pending graph) dies here, so the next sync has nothing to compute
  EXPECT_EQ(device->memory_stats().bytes_in_use, start);
  EXPECT_THAT((Range({2}) + 1.0).to_vector<float>(), ElementsAre(0, 1));
}

TEST(Execution, OutOfRangeIndexIsReportedWhenRead) {
  std::vector<int64_t> idx = {0, 7};
  const std::vector<int64_t> dims = {2};
  // Computed on the device (known indices are refused at the call: indexing_test.cc).
  Tensor bad = index_select(Range({3, 2}), 0, Tensor::FromData(std::span<const int64_t>(idx), dims) * int64_t{1});
  try {
    bad.to_vector<float>();
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("index 7"), HasSubstr("size 3")));
  }
}

TEST(Execution, MetricsReportListsCountersAndTimers) {
  (Range({2}) * 2.0).to_vector<float>();
  EXPECT_THAT(metrics_report(), AllOf(HasSubstr("graphs_compiled"), HasSubstr("sync_to_host"), HasSubstr("compile")));
}

}  // namespace execution_test
}  // namespace lazyrt
