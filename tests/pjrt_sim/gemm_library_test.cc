// Every GEMM library a DOT kernel can be tuned to, in every variant (whole, column and row panels),
// computes the product of a reference loop, to the tolerance of f32/f64 sums: transposed operands,
// batches (an operand broadcast over the batch too), odd and degenerate shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "pjrt_sim/kernels/gemm.h"
#include "pjrt_sim/kernels/kernels.h"
#include "tests/pjrt_sim/dot_product_test_util.h"

namespace lazyrt::pjrt {
namespace gemm_library_test {

const Product kProducts[] = {
    {1, 128, 256, 784, false, true, false},  // the MLP's layer-1 forward
    {1, 256, 784, 128, true, false, false},  // its weight gradient
    {1, 128, 784, 256, false, false, false}, {1, 1, 1, 1, false, false, false}, {1, 7, 13, 5, true, true, false},
    {1, 33, 1, 17, false, true, false},      {1, 1, 45, 3, true, false, false}, {3, 9, 11, 6, false, false, false},
    {4, 10, 7, 12, true, true, true},        {2, 5, 6, 0, false, false, false}, {2, 0, 6, 4, false, false, false},
};

// The reference loop runs once per product (in f64, with the magnitude of its terms for the tolerance);
// every library and variant is then compared with it.
template <typename T>
void CheckLibraries(PrimitiveType type) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  for (const Product& p : kProducts) {
    const int64_t a_size = p.m * p.k, b_size = p.k * p.n;
    std::vector<T> a(static_cast<size_t>(p.batch * a_size)),
        b(static_cast<size_t>((p.broadcast_rhs ? 1 : p.batch) * b_size));
    for (T& x : a) x = static_cast<T>(u(rng));
    for (T& x : b) x = static_cast<T>(u(rng));
    std::vector<ExactDot> want;
    for (int64_t bt = 0; bt < p.batch; ++bt) {
      const T* ab = a.data() + bt * a_size;
      const T* bb = b.data() + (p.broadcast_rhs ? 0 : bt * b_size);
      for (int64_t i = 0; i < p.m; ++i) {
        for (int64_t j = 0; j < p.n; ++j) want.push_back(ExactDotAt(ab, bb, p, i, j, [](T x) { return double{x}; }));
      }
    }
    const double epsilon = sizeof(T) == 4 ? 1e-6 : 1e-14;
    const double k_factor = 4 * epsilon * std::sqrt(static_cast<double>(p.k) + 1);
    for (GemmLibrary library : kGemmLibraries) {
      for (int64_t variant : {kDotSerial, kDotColumnPanels, kDotRowPanels}) {
        const proto::Kernel kernel = DotKernel(p, variant, library);
        const std::vector<ArrayShape> inputs = {{type, {static_cast<int64_t>(a.size())}},
                                                {type, {static_cast<int64_t>(b.size())}}};
        const ArrayShape output{type, {p.batch, p.m, p.n}};
        absl::StatusOr<std::unique_ptr<Kernel>> built = BuildKernel(kernel, inputs, output);
        ASSERT_TRUE(built.ok()) << built.status();
        std::vector<T> c(want.size(), static_cast<T>(12345));  // must be overwritten
        const void* in[] = {a.data(), b.data()};
        void* out[] = {c.data()};
        ASSERT_TRUE((*built)->Run(in, out).ok());
        for (size_t e = 0; e < c.size(); ++e) {
          ASSERT_NEAR(c[e], want[e].value, k_factor * (want[e].magnitude + 1))
              << GemmLibraryName(library) << " variant " << variant << ": " << p.batch << " x [" << p.m << "x" << p.k
              << "]x[" << p.k << "x" << p.n << "]" << (p.transpose_lhs ? " A^T" : "") << (p.transpose_rhs ? " B^T" : "")
              << " at batch " << static_cast<int64_t>(e) / (p.m * p.n) << " (" << static_cast<int64_t>(e) / p.n % p.m
              << ", " << static_cast<int64_t>(e) % p.n << ")";
        }
      }
    }
  }
}

TEST(GemmLibraryTest, EveryLibraryComputesTheProductInF32) { CheckLibraries<float>(PrimitiveType::kF32); }

TEST(GemmLibraryTest, EveryLibraryComputesTheProductInF64) { CheckLibraries<double>(PrimitiveType::kF64); }

TEST(GemmLibraryTest, AnUnknownLibraryIsRefusedAtBuild) {
  proto::Kernel kernel;
  kernel.set_kind(proto::Kernel::DOT);
  kernel.set_batch(1);
  kernel.set_m(2);
  kernel.set_n(2);
  kernel.set_k(2);
  kernel.set_gemm_library(7);
  const std::vector<ArrayShape> inputs = {{PrimitiveType::kF32, {2, 2}}, {PrimitiveType::kF32, {2, 2}}};
  absl::StatusOr<std::unique_ptr<Kernel>> built = BuildKernel(kernel, inputs, {PrimitiveType::kF32, {1, 2, 2}});
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.status().message().find("unknown GEMM library 7"), std::string::npos) << built.status();
}

TEST(GemmLibraryTest, LibraryNumbersAreUniqueAndNamed) {
  for (GemmLibrary library : kGemmLibraries) {
    EXPECT_EQ(GemmLibraryFromNumber(static_cast<int64_t>(library)), library);
    EXPECT_NE(GemmLibraryName(library), "?");
  }
  EXPECT_FALSE(GemmLibraryFromNumber(-1).has_value());
}

}  // namespace gemm_library_test
}  // namespace lazyrt::pjrt
