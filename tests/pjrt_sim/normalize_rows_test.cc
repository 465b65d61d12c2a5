// The NORMALIZE kernel over many rows (several tasks, a last block of fewer than 8 rows, widths with and
// without a multiple of 8 columns) in f32, f64 and bf16: bit for bit against a reference loop that computes each row
// alone in double, in the kernel's order (sums from element 0), and rounds each result once to the array's type.
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

// One row's result: the normalization of x, or given g the gradient of sum(g * norm(x)).
std::vector<double> ReferenceRow(Opcode op, const std::vector<double>& x, const std::vector<double>& g) {
  const double n = static_cast<double>(x.size());
  const bool centred = op == Opcode::kLayerNorm || op == Opcode::kLayerNormGrad;
  double mean = 0, second_moment = 0;
  if (centred) {
    for (double v : x) mean += v;
    mean /= n;
  }
  for (double v : x) second_moment += (v - mean) * (v - mean);
  const double rstd = 1.0 / std::sqrt(second_moment / n + kEpsilon);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) * rstd;
  if (g.empty()) return y;
  double mean_g = 0, mean_g_xhat = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    mean_g += g[i];
    mean_g_xhat += g[i] * y[i];
  }
  mean_g = centred ? mean_g / n : 0;
  mean_g_xhat /= n;
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
      Check(op, type, 301, 128, rng);  // a GPT's rows: 3 tasks, a last block of 5 rows
      Check(op, type, 3, 77, rng);     // one task, one partial block
      Check(op, type, 40, 77, rng);    // whole blocks whose width is not a multiple of 8 (f32's tail columns)
      Check(op, type, 16, 5, rng);     // whole blocks narrower than 8 (f32: the tail loop only)
    }
  }
}

}  // namespace normalize_rows_test
}  // namespace lazyrt::pjrt
