// The NORMALIZE kernel over many rows (several tasks, a task's last rows fewer than the rows it normalizes
// together, widths with and without a multiple of 8 columns) in f32, f64 and bf16: bit for bit against a
// reference loop that computes each row alone in double, in the kernel's order (each sum as eight partial
// sums, term i into partial i % 8, then the partials pairwise), and rounds each result once to the array's type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/kernels/normalize.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace normalize_rows_test {

constexpr double kEpsilon = 1e-5;

// The sum of term(i) for i < n in the kernel's order: partial p sums the terms p, p + 8, p + 16, ... from
// +0, and the partials are added pairwise.
template <typename Term>
double KernelOrderSum(size_t n, Term term) {
  double p[8] = {};
  for (size_t i = 0; i < n; ++i) p[i % 8] += term(i);
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

// One row's result: the normalization of x, or given g the gradient of sum(g * norm(x)).
std::vector<double> ReferenceRow(Opcode op, const std::vector<double>& x, const std::vector<double>& g) {
  const double n = static_cast<double>(x.size());
  const bool centred = op == Opcode::kLayerNorm || op == Opcode::kLayerNormGrad;
  const double mean = centred ? KernelOrderSum(x.size(), [&](size_t i) { return x[i]; }) / n : 0;
  const double second_moment = KernelOrderSum(x.size(), [&](size_t i) { return (x[i] - mean) * (x[i] - mean); });
  const double rstd = 1.0 / std::sqrt(second_moment / n + kEpsilon);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) * rstd;
  if (g.empty()) return y;
  const double mean_g = centred ? KernelOrderSum(x.size(), [&](size_t i) { return g[i]; }) / n : 0;
  const double mean_g_xhat = KernelOrderSum(x.size(), [&](size_t i) { return g[i] * y[i]; }) / n;
  for (size_t i = 0; i < x.size(); ++i) y[i] = rstd * (g[i] - mean_g - y[i] * mean_g_xhat);
  return y;
}

void Check(Opcode op, PrimitiveType type, int64_t rows, int64_t width, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << OpcodeName(op) << " " << PrimitiveTypeName(type) << " " << rows << "x" << width);
  const bool backward = op == Opcode::kLayerNormGrad || op == Opcode::kRmsNormGrad;
  const int64_t bytes = ByteWidth(type);
  const size_t size = static_cast<size_t>(rows * width);
  // Inputs drawn as f32 values, stored in the type (so that bf16 inputs are exact bf16 values).
  auto random_array = [&] {
    std::vector<char> a(size * static_cast<size_t>(bytes));
    std::uniform_real_distribution<float> dist(-3, 5);
    for (size_t i = 0; i < size; ++i) StoreElement(dist(rng), type, a.data() + static_cast<int64_t>(i) * bytes);
    return a;
  };
  const std::vector<char> x = random_array();
  const std::vector<char> g = backward ? random_array() : std::vector<char>{};

  proto::Kernel k;
  k.set_kind(proto::Kernel::NORMALIZE);
  k.set_opcode(static_cast<int32_t>(op));
  k.set_axis(1);
  k.set_epsilon(kEpsilon);
  const ArrayShape shape{type, {rows, width}};
  std::vector<ArrayShape> inputs(backward ? 2 : 1, shape);
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildNormalizeKernel(k, inputs, shape);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  std::vector<char> got(x.size(), 0x55);
  std::vector<const void*> in = {x.data()};
  if (backward) in.push_back(g.data());
  void* out[] = {got.data()};
  ASSERT_TRUE((*kernel)->Run(in, out).ok());

  std::vector<char> want(x.size());
  std::vector<double> xr(static_cast<size_t>(width)), gr(backward ? static_cast<size_t>(width) : 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < width; ++i) {
      xr[static_cast<size_t>(i)] = LoadElement(x.data(), type, r * width + i);
      if (backward) gr[static_cast<size_t>(i)] = LoadElement(g.data(), type, r * width + i);
    }
    const std::vector<double> y = ReferenceRow(op, xr, gr);
    for (int64_t i = 0; i < width; ++i)
      StoreElement(y[static_cast<size_t>(i)], type, want.data() + (r * width + i) * bytes);
  }
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size()));
}

TEST(NormalizeRowsTest, EveryTypeAndOpMatchesTheReferenceBitForBit) {
  std::mt19937_64 rng(21);
  for (Opcode op : {Opcode::kLayerNorm, Opcode::kLayerNormGrad, Opcode::kRmsNorm, Opcode::kRmsNormGrad}) {
    for (PrimitiveType type : {PrimitiveType::kF32, PrimitiveType::kF64, PrimitiveType::kBF16}) {
      Check(op, type, 301, 128, rng);  // a GPT's rows: 3 tasks of 128 rows, the last of 45 (1 past 4s)
      Check(op, type, 3, 77, rng);     // one task, fewer rows than it normalizes together
      Check(op, type, 40, 77, rng);    // rows 4 at a time, a width not a multiple of 8 (5 tail terms)
      Check(op, type, 16, 5, rng);     // rows narrower than 8: the tail terms only
      Check(op, type, 9, 12, rng);     // a width of 8 and 4 tail terms (tail lanes in the low half only)
    }
  }
}

}  // namespace normalize_rows_test
}  // namespace lazyrt::pjrt
