// The resharding diagnostic (issue 19): a value all-gathered every step that another layout would not need
// gathered is a finding with the line that created it and the sharding that avoids it; the collectives a
// data-parallel step needs (its gradients' all-reduce) are not. Runs with LAZYRT_DEVICES=4 (ctest -R
// lazy_resharding) and skips with fewer devices.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "lazy/devices.h"
#include "lazy/diagnostics.h"
#include "lazy/sharding.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"
#include "tests/lazy/data_parallel_mlp.h"
#include "tests/lazy/device_test_util.h"

namespace lazyrt {
namespace resharding_diagnostic_test {

using ::testing::HasSubstr;
using testing::RandomValues;
using testing::TrainMlp;

constexpr const char* kThisFile = "resharding_diagnostic_test.cc:";

std::vector<Finding> ReshardingFindings() {
  std::vector<Finding> out;
  for (Finding& f : findings()) {
    if (f.kind == FindingKind::kResharding) out.push_back(std::move(f));
  }
  return out;
}

// The resharding finding created at line `line` of this file, or nullptr.
const Finding* FindingAt(const std::vector<Finding>& found, int line) {
  for (const Finding& f : found) {
    if (f.location.ends_with(absl::StrCat(kThisFile, line))) return &f;
  }
  return nullptr;
}

// [m, k] x [k, n] on the host, the reference of the mesh's products.
std::vector<float> MatmulReference(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t k,
                                   int64_t n) {
  std::vector<float> c(static_cast<size_t>(m * n), 0.0F);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += double{a[static_cast<size_t>(i * k + p)]} * b[static_cast<size_t>(p * n + j)];
      c[static_cast<size_t>(i * n + j)] = static_cast<float>(acc);
    }
  }
  return c;
}

TEST(ReshardingDiagnostic, AWeightShardedOnTheWrongDimIsAFindingAtItsLine) {
  LAZYRT_NEEDS_DEVICES(2);
  const Mesh mesh({2}, {"data"}, {0, 1});
  const std::vector<float> xs = RandomValues(8 * 6, 1), ws = RandomValues(6 * 4, 2);
  Tensor x = Tensor::FromData(std::span<const float>(xs), {8, 6});
  mark_sharding(x, mesh, {"data", {}});  // the batch split: data parallel
  const int weight_line = __LINE__ + 1;
  Tensor w = Tensor::FromData(std::span<const float>(ws), {6, 4});
  mark_sharding(w, mesh, {"data", {}});  // wrong: the product needs w's rows whole on every device
  constexpr int kSteps = 3;
  const std::vector<float> want = MatmulReference(xs, ws, 8, 6, 4);
  for (int step = 0; step < kSteps; ++step) {
    Tensor y = matmul(x, w);
    sync();
    const std::vector<float> got = y.to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  }

  const std::vector<Finding> found = ReshardingFindings();
  const Finding* f = FindingAt(found, weight_line);
  ASSERT_NE(f, nullptr) << "no resharding finding at line " << weight_line << "; " << found.size() << " others";
  EXPECT_EQ(f->sharding, "{\"data\", {}}");
  EXPECT_EQ(f->needed, "{}");
  EXPECT_EQ(f->suggestion, "mark_sharding(tensor, mesh, {})");
  // Each device receives the other's half of w, [3, 4] f32, every step.
  EXPECT_EQ(f->bytes_per_step, 3 * 4 * 4);
  EXPECT_GE(f->count, kSteps);
  EXPECT_EQ(f->severity, Severity::kWarning);
  EXPECT_THAT(f->message, HasSubstr("all-gathered every step"));
  EXPECT_THAT(f->message, HasSubstr("f32[6,4]"));
  EXPECT_THAT(f->message, HasSubstr("dot created at"));
  // The debug summary and the run report carry it too, the report with each device's collective time.
  EXPECT_THAT(diagnostics_summary(), HasSubstr("[resharding warning"));
  const std::string path = absl::StrCat(::testing::TempDir(), "/resharding_report_", getpid(), ".json");
  write_report(path);
  std::ifstream in(path);
  const nlohmann::json report = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::remove(path.c_str());
  ASSERT_TRUE(report.is_object());
  bool reported = false;
  for (const nlohmann::json& finding : report["findings"]) {
    reported |= finding["kind"] == "resharding" && finding["suggestion"] == "mark_sharding(tensor, mesh, {})" &&
                finding["bytes_per_step"] == 48 && finding["needed"] == "{}";
  }
  EXPECT_TRUE(reported) << report["findings"].dump();
  EXPECT_GT(report["devices"][0]["collective_calls"].get<int64_t>(), 0);
  EXPECT_GT(report["devices"][1]["collective_ms"].get<double>(), 0);
  EXPECT_LE(report["devices"][1]["collective_wait_ms"].get<double>(),
            report["devices"][1]["collective_ms"].get<double>());
  EXPECT_GT(report["collective_ms_per_step"].get<double>(), 0);
}

TEST(ReshardingDiagnostic, AnActivationSplitOnAnotherDimThanItsConsumerIsGatheredAndSlicedAgain) {
  LAZYRT_NEEDS_DEVICES(2);
  const Mesh mesh({2}, {"data"}, {0, 1});
  const std::vector<float> xs = RandomValues(4 * 6, 3), ws = RandomValues(6 * 8, 4), as = RandomValues(4 * 6, 5),
                           vs = RandomValues(6 * 8, 6);
  Tensor x = Tensor::FromData(std::span<const float>(xs), {4, 6});
  mark_sharding(x, mesh, {"data", {}});
  Tensor w = Tensor::FromData(std::span<const float>(ws), {6, 8});
  mark_sharding(w, mesh, {});
  Tensor a = Tensor::FromData(std::span<const float>(as), {4, 6});
  mark_sharding(a, mesh, {});
  Tensor v = Tensor::FromData(std::span<const float>(vs), {6, 8});
  mark_sharding(v, mesh, {{}, "data"});
  Tensor h = matmul(x, w);  // computed split by rows, as x is
  const int columns_line = __LINE__ + 1;
  Tensor g = matmul(a, v);  // computed split by columns, as v is
  Tensor z = h + g;         // split by rows, as its first operand: g's pieces are exchanged all-to-all
  sync();
  const std::vector<float> got = z.to_vector<float>();
  std::vector<float> want = MatmulReference(xs, ws, 4, 6, 8);
  const std::vector<float> second = MatmulReference(as, vs, 4, 6, 8);
  for (size_t i = 0; i < want.size(); ++i) want[i] += second[i];
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;

  const std::vector<Finding> found = ReshardingFindings();
  const Finding* f = FindingAt(found, columns_line);
  ASSERT_NE(f, nullptr) << "no resharding finding at line " << columns_line;
  EXPECT_EQ(f->sharding, "{{}, \"data\"}");
  EXPECT_EQ(f->needed, "{\"data\", {}}");
  EXPECT_EQ(f->suggestion, "mark_sharding(tensor, mesh, {\"data\", {}})");
  EXPECT_EQ(f->bytes_per_step, 2 * 4 * 4);  // from the other device, the [2, 4] rows of its columns it lacks
  EXPECT_EQ(f->count, 1);
  EXPECT_EQ(f->severity, Severity::kInfo);  // one run: not yet repeated
  EXPECT_THAT(f->message, HasSubstr("exchanged all-to-all"));
  EXPECT_THAT(f->message, HasSubstr("add created at"));
}

TEST(ReshardingDiagnostic, ADataParallelMlpHasNone) {
  LAZYRT_NEEDS_DEVICES(4);
  const size_t before = ReshardingFindings().size();
  const std::vector<double> one_device = TrainMlp(nullptr, 4);
  const Mesh mesh({4}, {"data"}, {0, 1, 2, 3});
  const int64_t collectives_before = collective_info(Device{0}).calls;
  const std::vector<double> data_parallel = TrainMlp(&mesh, 4);
  // The gradients are all-reduced (needed, not a finding) and the losses match one device's up to the
  // order of the f32 sums.
  EXPECT_GT(collective_info(Device{0}).calls, collectives_before);
  ASSERT_EQ(data_parallel.size(), one_device.size());
  for (size_t s = 0; s < one_device.size(); ++s) EXPECT_NEAR(data_parallel[s], one_device[s], 1e-5 * one_device[0]);
  EXPECT_LT(data_parallel.back(), data_parallel.front());  // it trains
  const std::vector<Finding> found = ReshardingFindings();
  EXPECT_EQ(found.size(), before) << found.back().message;
}

}  // namespace resharding_diagnostic_test
}  // namespace lazyrt
