// dropout, clamp, var/std, cumsum, topk/sort/argsort, split/chunk/stack: against reference loops written
// here on host data, known values, PyTorch's edge semantics and central finite differences.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace lazyrt {
namespace transformer_ops_test {

using ::testing::HasSubstr;
using Values = std::vector<double>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

int64_t Numel(const std::vector<int64_t>& dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

Values RandomValues(int64_t n, uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Values v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return v;
}

Tensor F64(const Values& v, const std::vector<int64_t>& dims) {
  return Tensor::FromData(std::span<const double>(v), dims);
}

// Both NaN, or equal within `tolerance` (exactly for 0).
void ExpectClose(const Values& got, const Values& want, double tolerance = 0) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i << " is " << got[i] << ", want NaN";
    } else if (tolerance == 0 || std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << "element " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tolerance * std::max(1.0, std::abs(want[i]))) << "element " << i;
    }
  }
}

template <typename Fn>
void ExpectErrorContaining(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

// d(sum(f(x) * w))/dx against (L(x + eps) - L(x - eps)) / 2 eps for every element, in f64.
void GradCheck(const std::function<Tensor(const Tensor&)>& f, const Values& x0, const std::vector<int64_t>& dims,
               double eps = 1e-6, double tolerance = 1e-6) {
  Tensor probe = f(F64(x0, dims));
  const std::vector<int64_t> out_dims(probe.dims().begin(), probe.dims().end());
  const Tensor weights = F64(RandomValues(Numel(out_dims), 99), out_dims);
  Tensor x = F64(x0, dims);
  x.requires_grad_();
  sum(f(x) * weights).backward();
  ASSERT_TRUE(x.grad().defined());
  const Values analytic = x.grad().to_vector<double>();
  for (size_t j = 0; j < x0.size(); ++j) {
    Values plus = x0, minus = x0;
    plus[j] += eps;
    minus[j] -= eps;
    const double numeric =
        (sum(f(F64(plus, dims)) * weights).item() - sum(f(F64(minus, dims)) * weights).item()) / (2 * eps);
    EXPECT_NEAR(analytic[j], numeric, tolerance * std::max(1.0, std::abs(numeric))) << "element " << j;
  }
}

// ---- dropout -----------------------------------------------------------------------------------------------

TEST(Dropout, KeepsAboutOneMinusPScaledByItsInverse) {
  manual_seed(1234);
  const double p = 0.3;
  const int64_t n = 200 * 100;
  const Values y = dropout(ones({200, 100}), p).to_vector<double>();
  int64_t kept = 0;
  for (double v : y) {
    if (v != 0) {
      ++kept;
      EXPECT_NEAR(v, 1 / (1 - p), 1e-6);
    }
  }
  // The kept count is Binomial(n, 1 - p): within 5 standard deviations of its mean.
  const double fraction = static_cast<double>(kept) / static_cast<double>(n);
  const double sigma = std::sqrt(p * (1 - p) / static_cast<double>(n));
  EXPECT_NEAR(fraction, 1 - p, 5 * sigma);
  // Unbiased: the mean of the output is the input's, 1, and its variance p / (1 - p).
  const double mean = std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(n);
  double variance = 0;
  for (double v : y) variance += (v - mean) * (v - mean);
  variance /= static_cast<double>(n);
  EXPECT_NEAR(mean, 1.0, 5 * sigma / (1 - p));
  EXPECT_NEAR(variance, p / (1 - p), 0.03);
}

TEST(Dropout, SameSeedSameMaskNextStepAnotherMask) {
  const Tensor x = F64(RandomValues(64, 1, 1, 2), {8, 8});
  manual_seed(42);
  const Values first = dropout(x, 0.5).to_vector<double>();
  const Values second = dropout(x, 0.5).to_vector<double>();  // the next step: the seed has advanced
  manual_seed(42);
  const Values again = dropout(x, 0.5).to_vector<double>();
  EXPECT_EQ(first, again);
  EXPECT_NE(first, second);
  // The same loss for the same seed.
  manual_seed(42);
  const double loss1 = sum(dropout(x, 0.5)).item();
  manual_seed(42);
  EXPECT_EQ(sum(dropout(x, 0.5)).item(), loss1);
}

TEST(Dropout, ProbabilityIsADeviceValueNotPartOfTheGraph) {
  // Each in a step of its own, which numbers its random streams from 0.
  const Tensor x = F64(RandomValues(16, 2), {4, 4});
  manual_seed(3);
  const Tensor first = dropout(x, 0.2);
  const uint64_t first_hash = graph_hash({first});
  sync();
  const Tensor second = dropout(x, 0.7);
  EXPECT_EQ(graph_hash({second}), first_hash);
}

TEST(Dropout, GradientIsTheForwardMaskTimesTheScale) {
  manual_seed(7);
  const double p = 0.4;
  const Values x0 = RandomValues(100, 3, 0.5, 1.5);  // no zeros: a dropped element is the only 0 output
  Tensor x = F64(x0, {10, 10});
  x.requires_grad_();
  Tensor y = dropout(x, p);
  const Values y_host = y.to_vector<double>();  // a sync between forward and backward: the mask must survive it
  sum(y).backward();
  const Values g = x.grad().to_vector<double>();
  int64_t dropped = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double want = y_host[i] == 0 ? 0 : 1 / (1 - p);
    dropped += y_host[i] == 0;
    EXPECT_NEAR(g[i], want, 1e-12) << "element " << i;
    EXPECT_NEAR(y_host[i], x0[i] * g[i], 1e-12) << "element " << i;
  }
  EXPECT_GT(dropped, 10);
  EXPECT_LT(dropped, 90);
}

TEST(Dropout, EvalZeroOneAndErrors) {
  const Values x0 = {1, -2, kInf, 4};
  const Tensor x = F64(x0, {4});
  ExpectClose(dropout(x, 0.5, /*training=*/false).to_vector<double>(), x0);
  ExpectClose(dropout(x, 0.0).to_vector<double>(), x0);
  ExpectClose(dropout(x, 1.0).to_vector<double>(), {0, -0.0, kNaN, 0});  // x * 0, as PyTorch
  ExpectErrorContaining([&] { dropout(x, 1.5); }, {"dropout", "1.5", "[0, 1]"});
  ExpectErrorContaining([&] { dropout(x, -0.1); }, {"dropout", "[0, 1]"});
  ExpectErrorContaining([&] { dropout(x, kNaN); }, {"dropout", "[0, 1]"});
  ExpectErrorContaining([&] { dropout(arange(4), 0.5); }, {"dropout", "floating"});
}

// ---- clamp ----------------------------------------------------------------------------------------------------

double ClampReference(double v, std::optional<double> lo, std::optional<double> hi) {
  if (std::isnan(v)) return v;
  if (lo) v = std::isnan(*lo) ? *lo : std::max(v, *lo);
  if (hi) v = std::isnan(*hi) ? *hi : std::min(v, *hi);
  return v;
}

TEST(Clamp, MatchesAReferenceLoop) {
  Values x0 = RandomValues(30, 5, -3, 3);
  x0[3] = kNaN;
  x0[4] = kInf;
  x0[5] = -kInf;
  const Tensor x = F64(x0, {5, 6});
  const std::vector<std::pair<std::optional<double>, std::optional<double>>> bounds = {
      {-1.0, 1.0}, {-0.5, std::nullopt}, {std::nullopt, 0.25}, {2.0, -2.0}};
  for (const auto& [lo, hi] : bounds) {
    const std::optional<Scalar> min = lo ? std::optional<Scalar>(*lo) : std::nullopt;
    const std::optional<Scalar> max = hi ? std::optional<Scalar>(*hi) : std::nullopt;
    Values want;
    for (double v : x0) want.push_back(ClampReference(v, lo, hi));
    ExpectClose(clamp(x, min, max).to_vector<double>(), want);
  }
  // min > max: every element is max, as PyTorch.
  for (double v : clamp(x, 2.0, -2.0).to_vector<double>()) EXPECT_TRUE(std::isnan(v) || v == -2.0);
  ExpectErrorContaining([&] { clamp(x, std::nullopt, std::nullopt); }, {"clamp", "at least one"});
}

TEST(Clamp, IntegerTensorsStayIntegerUnlessABoundIsFractional) {
  const std::vector<int64_t> v = {-5, -1, 0, 3, 9};
  const Tensor x = Tensor::FromData(std::span<const int64_t>(v), {5});
  const Tensor c = clamp(x, 0, 4);
  EXPECT_EQ(c.dtype(), DType::kI64);
  EXPECT_EQ(c.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 3, 4}));
  const Tensor f = clamp(x, 0.5);
  EXPECT_EQ(f.dtype(), DType::kF32);
  EXPECT_EQ(f.to_vector<double>(), (Values{0.5, 0.5, 0.5, 3, 9}));
}

TEST(Clamp, GradientPassesInsideTheBoundsIncludingThem) {
  Tensor x = F64({-2, -1, 0, 1, 2, kNaN}, {6});
  x.requires_grad_();
  sum(clamp(x, -1, 1)).backward();
  ExpectClose(x.grad().to_vector<double>(), {0, 1, 1, 1, 0, 0});
  GradCheck([](const Tensor& t) { return clamp(t, -0.3, 0.4); }, RandomValues(12, 8), {3, 4});
}

// ---- var and std ------------------------------------------------------------------------------------------------

// Two-pass variance of x[dims] over `reduced` (the others kept), in row-major order of the kept dims.
Values VarReference(const Values& x, const std::vector<int64_t>& dims, const std::vector<int64_t>& reduced,
                    double correction) {
  const size_t rank = dims.size();
  std::vector<int64_t> strides(rank, 1);
  for (size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * dims[d];
  auto is_reduced = [&](size_t d) { return std::find(reduced.begin(), reduced.end(), d) != reduced.end(); };
  std::vector<std::vector<double>> groups;
  std::vector<int64_t> keys;
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t key = 0;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t c = (static_cast<int64_t>(i) / strides[d]) % dims[d];
      if (!is_reduced(d)) key = key * dims[d] + c;
    }
    if (static_cast<size_t>(key) >= groups.size()) groups.resize(static_cast<size_t>(key) + 1);
    groups[static_cast<size_t>(key)].push_back(x[i]);
  }
  Values out;
  for (const auto& g : groups) {
    const double mean = std::accumulate(g.begin(), g.end(), 0.0) / static_cast<double>(g.size());
    double ss = 0;
    for (double v : g) ss += (v - mean) * (v - mean);
    out.push_back(ss / std::max(0.0, static_cast<double>(g.size()) - correction));
  }
  return out;
}

TEST(VarStd, MatchReferenceLoops) {
  const std::vector<int64_t> dims = {3, 4, 5};
  const Values x0 = RandomValues(60, 11, -2, 2);
  const Tensor x = F64(x0, dims);
  for (const std::vector<int64_t>& reduced : std::vector<std::vector<int64_t>>{{1}, {0, 2}, {0, 1, 2}}) {
    for (double correction : {0.0, 1.0, 2.5}) {
      const Values want = VarReference(x0, dims, reduced, correction);
      ExpectClose(var(x, reduced, correction).to_vector<double>(), want, 1e-12);
      Values root;
      for (double v : want) root.push_back(std::sqrt(v));
      ExpectClose(std(x, reduced, correction).to_vector<double>(), root, 1e-12);
    }
  }
  // Negative dims, all dims by default, keepdim.
  ExpectClose(var(x, {-1}).to_vector<double>(), VarReference(x0, dims, {2}, 1), 1e-12);
  ExpectClose(var(x).to_vector<double>(), VarReference(x0, dims, {0, 1, 2}, 1), 1e-12);
  const Tensor kept = std(x, {1}, 1, /*keepdim=*/true);
  EXPECT_EQ(kept.shape(), Shape(DType::kF64, {3, 1, 5}));
}

TEST(VarStd, TwoPassIsStableForALargeMean) {
  // 1e4 + u[0, 1) in f32: E[x^2] - E[x]^2 loses every digit of the true variance (about 1/12) in f32.
  Values x0 = RandomValues(4096, 12, 0, 1);
  for (double& v : x0) v = static_cast<float>(1e4 + v);
  const Values want = VarReference(x0, {4096}, {0}, 1);
  std::vector<float> f(x0.begin(), x0.end());
  const Tensor x = Tensor::FromData(std::span<const float>(f), {4096});
  EXPECT_NEAR(var(x).item(), want[0], 1e-4);
}

TEST(VarStd, EdgesAndErrors) {
  EXPECT_TRUE(std::isnan(var(F64({3}, {1})).item()));    // 0 / 0, as PyTorch
  EXPECT_EQ(var(F64({1, 3}, {2}), {}, 2).item(), kInf);  // 2 / 0
  ExpectErrorContaining([] { var(arange(4)); }, {"var", "floating"});
  ExpectErrorContaining([] { var(ones({2, 3}), {0, -2}); }, {"var", "repeated"});
  ExpectErrorContaining([] { var(ones({2, 3}), {2}); }, {"var"});
}

TEST(VarStd, Gradients) {
  GradCheck([](const Tensor& t) { return var(t, {1}); }, RandomValues(12, 13), {3, 4});
  GradCheck([](const Tensor& t) { return std(t, {0}, 0, true); }, RandomValues(12, 14), {3, 4});
  GradCheck([](const Tensor& t) { return std(t); }, RandomValues(6, 15), {6});
}

// ---- cumsum -------------------------------------------------------------------------------------------------------

Values CumsumReference(const Values& x, const std::vector<int64_t>& dims, size_t axis) {
  int64_t inner = 1;
  for (size_t d = axis + 1; d < dims.size(); ++d) inner *= dims[d];
  const int64_t size = dims[axis];
  Values out = x;
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t position = (static_cast<int64_t>(i) / inner) % size;
    if (position > 0) out[i] = out[i - static_cast<size_t>(inner)] + x[i];
  }
  return out;
}

TEST(Cumsum, MatchesAReferenceLoopAlongEveryDim) {
  const std::vector<int64_t> dims = {3, 4, 5};
  const Values x0 = RandomValues(60, 21);
  const Tensor x = F64(x0, dims);
  for (int64_t d = 0; d < 3; ++d) {
    ExpectClose(cumsum(x, d).to_vector<double>(), CumsumReference(x0, dims, static_cast<size_t>(d)), 1e-14);
  }
  ExpectClose(cumsum(x, -1).to_vector<double>(), CumsumReference(x0, dims, 2), 1e-14);
  ExpectClose(cumsum(F64({1, kNaN, 2}, {3}), 0).to_vector<double>(), {1, kNaN, kNaN});
  EXPECT_EQ(cumsum(F64({2.5}, {}), -1).item(), 2.5);
  EXPECT_EQ(cumsum(ones({0, 3}), 0).shape(), Shape(DType::kF32, {0, 3}));
  ExpectErrorContaining([&] { cumsum(x, 3); }, {"cumsum"});
}

TEST(Cumsum, F32AccumulatesInF64) {
  // 2^20 times 0.1f: an f32 running sum ends far off (the increments fall below its precision).
  const int64_t n = int64_t{1} << 20;
  const std::vector<float> f(static_cast<size_t>(n), 0.1F);
  const Values out = cumsum(Tensor::FromData(std::span<const float>(f), {n}), 0).to_vector<double>();
  const double want = static_cast<double>(n) * static_cast<double>(0.1F);
  EXPECT_NEAR(out.back(), want, want * 1e-7);
  EXPECT_NEAR(out[1000], 1001 * static_cast<double>(0.1F), 1e-4);
}

TEST(Cumsum, IntegersAndBoolsSumInI64) {
  const std::vector<int32_t> v = {2000000000, 2000000000, -7};
  const Tensor r = cumsum(Tensor::FromData(std::span<const int32_t>(v), {3}), 0);
  EXPECT_EQ(r.dtype(), DType::kI64);
  EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{2000000000, 4000000000, 3999999993}));
  const Tensor b = cumsum(gt(F64({1, -1, 2, 3}, {4}), Scalar(0)), 0);
  EXPECT_EQ(b.dtype(), DType::kI64);
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 2, 3}));
}

TEST(Cumsum, GradientIsTheReversedCumsum) {
  Tensor x = F64(RandomValues(5, 22), {5});
  x.requires_grad_();
  const Values w = {1, 2, 3, 4, 5};
  sum(cumsum(x, 0) * F64(w, {5})).backward();
  ExpectClose(x.grad().to_vector<double>(), {15, 14, 12, 9, 5});
  GradCheck([](const Tensor& t) { return cumsum(t, 1); }, RandomValues(12, 23), {3, 4});
  GradCheck([](const Tensor& t) { return cumsum(t, 0); }, RandomValues(12, 24), {3, 4});
}

// ---- sort, argsort, topk -----------------------------------------------------------------------------------------

// Stable order of one row with NaN as the largest value.
std::vector<int64_t> OrderReference(const Values& row, bool descending) {
  std::vector<int64_t> order(row.size());
  std::iota(order.begin(), order.end(), 0);
  auto rank = [&](int64_t i) { return std::isnan(row[static_cast<size_t>(i)]) ? kInf : row[static_cast<size_t>(i)]; };
  auto is_nan = [&](int64_t i) { return std::isnan(row[static_cast<size_t>(i)]); };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    // NaN above +inf: compare (is_nan, value) pairs.
    if (is_nan(a) != is_nan(b)) return descending ? is_nan(a) : is_nan(b);
    return descending ? rank(a) > rank(b) : rank(a) < rank(b);
  });
  return order;
}

TEST(Sort, KnownValuesWithTiesAndNaN) {
  const Tensor x = F64({3, kNaN, 1, 3, -kInf, kInf}, {6});
  auto [up, up_index] = sort(x);
  ExpectClose(up.to_vector<double>(), {-kInf, 1, 3, 3, kInf, kNaN});
  EXPECT_EQ(up_index.to_vector<int64_t>(), (std::vector<int64_t>{4, 2, 0, 3, 5, 1}));
  auto [down, down_index] = sort(x, 0, /*descending=*/true);
  ExpectClose(down.to_vector<double>(), {kNaN, kInf, 3, 3, 1, -kInf});
  EXPECT_EQ(down_index.to_vector<int64_t>(), (std::vector<int64_t>{1, 5, 0, 3, 2, 4}));
  EXPECT_EQ(argsort(x, -1, true, true).to_vector<int64_t>(), down_index.to_vector<int64_t>());
}

TEST(Sort, MatchesAReferenceAlongEachDim) {
  // Values from a small set, so rows have many ties; a few NaN.
  std::mt19937_64 rng(31);
  Values x0(4 * 7 * 3);
  for (double& v : x0) v = static_cast<double>(rng() % 5) - 2;
  x0[5] = kNaN;
  x0[40] = kNaN;
  const std::vector<int64_t> dims = {4, 7, 3};
  const Tensor x = F64(x0, dims);
  for (int64_t d = 0; d < 3; ++d) {
    for (bool descending : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "dim " << d << " descending " << descending);
      auto [values, index] = sort(x, d, descending);
      const Values got = values.to_vector<double>();
      const std::vector<int64_t> got_index = index.to_vector<int64_t>();
      int64_t inner = 1;
      for (int64_t k = d + 1; k < 3; ++k) inner *= dims[static_cast<size_t>(k)];
      const int64_t size = dims[static_cast<size_t>(d)];
      const int64_t outer = Numel(dims) / (inner * size);
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          auto at = [&](int64_t a) { return static_cast<size_t>((o * size + a) * inner + i); };
          Values row;
          for (int64_t a = 0; a < size; ++a) row.push_back(x0[at(a)]);
          const std::vector<int64_t> order = OrderReference(row, descending);
          for (int64_t a = 0; a < size; ++a) {
            EXPECT_EQ(got_index[at(a)], order[static_cast<size_t>(a)]);
            const double want = row[static_cast<size_t>(order[static_cast<size_t>(a)])];
            EXPECT_TRUE(got[at(a)] == want || (std::isnan(want) && std::isnan(got[at(a)])));
          }
        }
      }
    }
  }
}

TEST(Sort, I64KeysCompareExactly) {
  const int64_t big = int64_t{1} << 53;
  const std::vector<int64_t> v = {big + 1, big, -3, big + 1};
  const Tensor x = Tensor::FromData(std::span<const int64_t>(v), {4});
  auto [values, index] = sort(x);
  EXPECT_EQ(values.to_vector<int64_t>(), (std::vector<int64_t>{-3, big, big + 1, big + 1}));
  EXPECT_EQ(index.to_vector<int64_t>(), (std::vector<int64_t>{2, 1, 0, 3}));
}

TEST(Sort, BoolIntegerAndZeroDimTensors) {
  const Tensor flags = gt(F64({1, -1, 2, -3, 0}, {5}), Scalar(0));
  auto [sorted_flags, flag_index] = sort(flags, 0, /*descending=*/true);
  EXPECT_EQ(sorted_flags.dtype(), DType::kBool);
  EXPECT_EQ(sorted_flags.to_vector<uint8_t>(), (std::vector<uint8_t>{1, 1, 0, 0, 0}));
  EXPECT_EQ(flag_index.to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 1, 3, 4}));
  const std::vector<int32_t> v = {5, -2, 9, -2};
  auto [top, top_index] = topk(Tensor::FromData(std::span<const int32_t>(v), {4}), 3, 0, /*largest=*/false);
  EXPECT_EQ(top.dtype(), DType::kI32);
  EXPECT_EQ(top.to_vector<int32_t>(), (std::vector<int32_t>{-2, -2, 5}));
  EXPECT_EQ(top_index.to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 0}));
  const Tensor scalar = F64({4.5}, {});
  EXPECT_EQ(sort(scalar).first.item(), 4.5);
  EXPECT_EQ(argsort(scalar).shape(), Shape(DType::kI64, {}));
  EXPECT_EQ(argsort(scalar).item(), 0);
  EXPECT_EQ(topk(scalar, 1).first.item(), 4.5);
  ExpectErrorContaining([&] { topk(scalar, 2); }, {"topk", "0 <= k <= 1"});
  ExpectErrorContaining([&] { topk(flags, 1); }, {"topk", "bool"});
  ExpectErrorContaining([&] { argsort(scalar, 1); }, {"argsort"});
}

TEST(TopK, LargestAndSmallestWithTheirPositions) {
  const Tensor x = F64({0.5, 2, -1, 2, 7, kNaN, 3, -4}, {2, 4});
  auto [top, top_index] = topk(x, 2);
  ExpectClose(top.to_vector<double>(), {2, 2, kNaN, 7});
  EXPECT_EQ(top_index.to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 1, 0}));
  auto [low, low_index] = topk(x, 3, 1, /*largest=*/false);
  ExpectClose(low.to_vector<double>(), {-1, 0.5, 2, -4, 3, 7});
  EXPECT_EQ(low_index.to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 1, 3, 2, 0}));
  auto [col, col_index] = topk(x, 1, 0);
  ExpectClose(col.to_vector<double>(), {7, kNaN, 3, 2});
  EXPECT_EQ(col_index.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 0}));
  EXPECT_EQ(topk(x, 0).first.shape(), Shape(DType::kF64, {2, 0}));
  EXPECT_EQ(topk(x, 4).second.shape(), Shape(DType::kI64, {2, 4}));
  ExpectErrorContaining([&] { topk(x, 5); }, {"topk", "k = 5", "0 <= k <= 4"});
  ExpectErrorContaining([&] { topk(x, -1, 0); }, {"topk", "k = -1", "0 <= k <= 2"});
  ExpectErrorContaining([&] { topk(x, 1, 2); }, {"topk"});
}

TEST(TopK, GradientScattersBackToThePickedPositions) {
  Tensor x = F64({0.1, 0.9, 0.4, 0.7, 0.3, 0.8}, {2, 3});
  x.requires_grad_();
  sum(topk(x, 2).first * F64({1, 2, 3, 4}, {2, 2})).backward();
  ExpectClose(x.grad().to_vector<double>(), {0, 1, 2, 4, 0, 3});
  GradCheck([](const Tensor& t) { return topk(t, 2, 0).first; }, RandomValues(12, 41), {4, 3});
  GradCheck([](const Tensor& t) { return sort(t, 1, true).first; }, RandomValues(12, 42), {3, 4});
}

TEST(TopK, RoutesTokensToExperts) {
  // Mixture-of-experts routing: each token's two best experts by softmax weight, renormalized.
  const Values logits = RandomValues(6 * 4, 43, -2, 2);
  auto [weights, experts] = topk(softmax(F64(logits, {6, 4}), -1), 2);
  const Values w = (weights / TensorArg(sum(weights, {-1}, true))).to_vector<double>();
  const std::vector<int64_t> e = experts.to_vector<int64_t>();
  for (size_t t = 0; t < 6; ++t) {
    const Values row(logits.begin() + static_cast<std::ptrdiff_t>(t * 4),
                     logits.begin() + static_cast<std::ptrdiff_t>(t * 4 + 4));
    const std::vector<int64_t> order = OrderReference(row, true);
    EXPECT_EQ(e[2 * t], order[0]);
    EXPECT_EQ(e[2 * t + 1], order[1]);
    EXPECT_NEAR(w[2 * t] + w[2 * t + 1], 1, 1e-12);
  }
}

// ---- split, chunk, stack
// ---------------------------------------------------------------------------------------------

std::vector<std::vector<int64_t>> ShapesOf(const std::vector<Tensor>& ts) {
  std::vector<std::vector<int64_t>> out;
  for (const Tensor& t : ts) out.emplace_back(t.dims().begin(), t.dims().end());
  return out;
}

TEST(Split, BySizeAndBySizes) {
  const Values x0 = RandomValues(14, 51);
  const Tensor x = F64(x0, {7, 2});
  const std::vector<Tensor> pieces = split(x, 3);
  EXPECT_EQ(ShapesOf(pieces), (std::vector<std::vector<int64_t>>{{3, 2}, {3, 2}, {1, 2}}));
  Values joined;
  for (const Tensor& p : pieces) {
    const Values v = p.to_vector<double>();
    joined.insert(joined.end(), v.begin(), v.end());
  }
  EXPECT_EQ(joined, x0);
  const std::vector<Tensor> columns = split(x, std::vector<int64_t>{1, 1}, -1);
  EXPECT_EQ(ShapesOf(columns), (std::vector<std::vector<int64_t>>{{7, 1}, {7, 1}}));
  EXPECT_EQ(columns[1].to_vector<double>(), (Values{x0[1], x0[3], x0[5], x0[7], x0[9], x0[11], x0[13]}));
  EXPECT_EQ(split(x, 10).size(), 1U);
  EXPECT_EQ(ShapesOf(split(zeros({0, 2}), 3)), (std::vector<std::vector<int64_t>>{{0, 2}}));
  ExpectErrorContaining([&] { split(x, std::vector<int64_t>{3, 3}); }, {"split", "[3,3]", "7"});
  ExpectErrorContaining([&] { split(x, std::vector<int64_t>{8, -1}); }, {"split", "non-negative"});
  ExpectErrorContaining([&] { split(x, 0); }, {"split", "positive"});
  ExpectErrorContaining([&] { split(x, 2, 2); }, {"split"});
}

TEST(Split, GradientFlowsBackToEachPiece) {
  GradCheck(
      [](const Tensor& t) {
        std::vector<Tensor> p = split(t, std::vector<int64_t>{1, 3}, 1);
        return cat({p[1] * TensorArg(p[1]), p[0]}, 1);
      },
      RandomValues(12, 52), {3, 4});
}

TEST(Chunk, CeilSizesAsPyTorch) {
  const Tensor x = arange(7);
  EXPECT_EQ(ShapesOf(chunk(x, 3)), (std::vector<std::vector<int64_t>>{{3}, {3}, {1}}));
  EXPECT_EQ(ShapesOf(chunk(arange(6), 4)), (std::vector<std::vector<int64_t>>{{2}, {2}, {2}}));  // fewer than 4
  EXPECT_EQ(ShapesOf(chunk(arange(2), 5)), (std::vector<std::vector<int64_t>>{{1}, {1}}));
  EXPECT_EQ(ShapesOf(chunk(zeros({0}), 3)), (std::vector<std::vector<int64_t>>{{0}, {0}, {0}}));
  EXPECT_EQ(chunk(x, 3)[2].to_vector<int64_t>(), (std::vector<int64_t>{6}));
  ExpectErrorContaining([&] { chunk(x, 0); }, {"chunk", "positive"});
}

TEST(Stack, NewDimAtAnyPosition) {
  const Values a0 = {1, 2, 3, 4, 5, 6}, b0 = {7, 8, 9, 10, 11, 12};
  const Tensor a = F64(a0, {2, 3}), b = F64(b0, {2, 3});
  EXPECT_EQ(stack({a, b}).shape(), Shape(DType::kF64, {2, 2, 3}));
  EXPECT_EQ(stack({a, b}).to_vector<double>(), (Values{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(stack({a, b}, 1).to_vector<double>(), (Values{1, 2, 3, 7, 8, 9, 4, 5, 6, 10, 11, 12}));
  EXPECT_EQ(stack({a, b}, -1).to_vector<double>(), (Values{1, 7, 2, 8, 3, 9, 4, 10, 5, 11, 6, 12}));
  EXPECT_EQ(stack({a}, 2).shape(), Shape(DType::kF64, {2, 3, 1}));
  ExpectErrorContaining([&] { stack({a, ones({3, 2})}); }, {"stack", "f64[2,3]", "[3,2]"});
  ExpectErrorContaining([&] { stack({}); }, {"stack", "at least one"});
  ExpectErrorContaining([&] { stack({a, b}, 3); }, {"stack"});
  GradCheck([](const Tensor& t) { return stack({t, t * TensorArg(t)}, 1); }, RandomValues(6, 53), {2, 3});
}

}  // namespace transformer_ops_test
}  // namespace lazyrt
