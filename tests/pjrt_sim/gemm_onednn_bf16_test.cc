// oneDNN's native bf16 GEMM (f32 accumulation) where the CPU has AVX512-BF16 or AMX: the panel entry
// against a reference loop of exact products summed in f64 (tolerance: f32 sums), and the DOT kernel of
// bf16 on oneDNN in every variant, transposed, batched and broadcast, against the same loop rounded to
// bf16 once (tolerance: that one rounding plus f32 sums); over a long K, its variants bit for bit.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/kernels/gemm.h"
#include "pjrt_sim/kernels/kernels.h"
#include "tests/pjrt_sim/dot_product_test_util.h"

namespace lazyrt::pjrt {
namespace gemm_onednn_bf16_test {

const Product kProducts[] = {
    {1, 128, 384, 128, false, true, false},  // the GPT's qkv projection, at a tenth of its tokens
    {1, 384, 128, 512, true, false, false},  // a weight gradient
    {1, 1, 1, 1, false, false, false},      {1, 7, 13, 5, true, true, false}, {1, 33, 1, 17, false, true, false},
    {3, 9, 11, 6, false, false, false},     {4, 10, 7, 12, true, true, true}, {2, 65, 31, 129, false, false, false},
};

std::vector<uint16_t> RandomBf16(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = FloatToBf16(u(rng));
  return v;
}

ExactDot Dot(const uint16_t* a, const uint16_t* b, const Product& p, int64_t i, int64_t j) {
  return ExactDotAt(a, b, p, i, j, [](uint16_t x) { return double{Bf16ToFloat(x)}; });
}

// f32 sums of k terms: at most about k rounding errors of the magnitude each.
double F32SumTolerance(const ExactDot& r, int64_t k) { return 0x1p-23 * r.magnitude * static_cast<double>(k + 1); }

TEST(GemmOneDnnBf16Test, PanelsAccumulateInF32) {
  if (!OneDnnHasBf16()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AMX";
  std::mt19937_64 rng(5);
  for (const Product& p : kProducts) {
    const std::vector<uint16_t> a = RandomBf16(static_cast<size_t>(p.m * p.k), rng),
                                b = RandomBf16(static_cast<size_t>(p.k * p.n), rng);
    std::vector<float> c(static_cast<size_t>(p.m * p.n), 12345.0f);  // must be overwritten
    const MatrixView<const uint16_t> av{a.data(), p.transpose_lhs ? 1 : p.k, p.transpose_lhs ? p.m : 1};
    const MatrixView<const uint16_t> bv{b.data(), p.transpose_rhs ? 1 : p.n, p.transpose_rhs ? p.k : 1};
    ASSERT_TRUE(OneDnnGemmBf16(p.m, p.n, p.k, av, bv, MatrixView<float>{c.data(), p.n, 1}))
        << "oneDNN refused [" << p.m << "x" << p.k << "]x[" << p.k << "x" << p.n << "]";
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        const ExactDot want = Dot(a.data(), b.data(), p, i, j);
        ASSERT_NEAR(c[static_cast<size_t>(i * p.n + j)], want.value, F32SumTolerance(want, p.k))
            << "[" << p.m << "x" << p.k << "]x[" << p.k << "x" << p.n << "] at (" << i << ", " << j << ")";
      }
    }
  }
}

TEST(GemmOneDnnBf16Test, DotKernelRoundsTheF32ProductOnce) {
  std::mt19937_64 rng(7);
  for (const Product& p : kProducts) {
    const int64_t a_size = p.m * p.k, b_size = p.k * p.n;
    const std::vector<uint16_t> a = RandomBf16(static_cast<size_t>(p.batch * a_size), rng),
                                b = RandomBf16(static_cast<size_t>((p.broadcast_rhs ? 1 : p.batch) * b_size), rng);
    std::vector<ExactDot> wants;  // once per product, for every variant
    for (int64_t bt = 0; bt < p.batch; ++bt) {
      for (int64_t i = 0; i < p.m; ++i) {
        for (int64_t j = 0; j < p.n; ++j) {
          wants.push_back(Dot(a.data() + bt * a_size, b.data() + (p.broadcast_rhs ? 0 : bt * b_size), p, i, j));
        }
      }
    }
    for (int64_t variant : {kDotSerial, kDotColumnPanels, kDotRowPanels}) {
      const proto::Kernel kernel = DotKernel(p, variant, GemmLibrary::kOneDnn);
      const std::vector<ArrayShape> inputs = {{PrimitiveType::kBF16, {static_cast<int64_t>(a.size())}},
                                              {PrimitiveType::kBF16, {static_cast<int64_t>(b.size())}}};
      absl::StatusOr<std::unique_ptr<Kernel>> built =
          BuildKernel(kernel, inputs, ArrayShape{PrimitiveType::kBF16, {p.batch, p.m, p.n}});
      ASSERT_TRUE(built.ok()) << built.status();
      std::vector<uint16_t> c(static_cast<size_t>(p.batch * p.m * p.n), FloatToBf16(12345.0f));
      const void* in[] = {a.data(), b.data()};
      void* out[] = {c.data()};
      ASSERT_TRUE((*built)->Run(in, out).ok());
      const std::string what = absl::StrCat("variant ", variant, ": ", p.batch, " x [", p.m, "x", p.k, "]x[", p.k, "x",
                                            p.n, "]", p.transpose_lhs ? " A^T" : "", p.transpose_rhs ? " B^T" : "");
      for (int64_t bt = 0; bt < p.batch; ++bt) {
        for (int64_t i = 0; i < p.m; ++i) {
          for (int64_t j = 0; j < p.n; ++j) {
            const size_t at = static_cast<size_t>((bt * p.m + i) * p.n + j);
            const ExactDot& want = wants[at];
            const double got = Bf16ToFloat(c[at]);
            // One rounding to bf16 (half its 8-bit ulp, relative), after f32 sums.
            const double sums = F32SumTolerance(want, p.k);
            const double rounding = 0x1p-8 * (std::abs(want.value) + sums);
            ASSERT_NEAR(got, want.value, sums + rounding)
                << what << " at batch " << bt << " (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

// A shape's primitive keeps its memory objects between calls, pointed at each call's arrays: calls of one
// shape on other arrays (operands and result), alternating, each give their own product, as a call of
// their own would.
TEST(GemmOneDnnBf16Test, CallsOfOneShapeReadAndWriteTheirOwnArrays) {
  if (!OneDnnHasBf16()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AMX";
  std::mt19937_64 rng(17);
  const int64_t m = 64, n = 128, k = 32;
  std::vector<std::vector<uint16_t>> a, b;
  std::vector<std::vector<float>> first, again;
  for (int call = 0; call < 3; ++call) {
    a.push_back(RandomBf16(static_cast<size_t>(m * k), rng));
    b.push_back(RandomBf16(static_cast<size_t>(n * k), rng));
  }
  for (std::vector<std::vector<float>>* products : {&first, &again}) {
    for (size_t call = 0; call < a.size(); ++call) {
      std::vector<float>& c = products->emplace_back(static_cast<size_t>(m * n), 0.0f);
      ASSERT_TRUE(OneDnnGemmBf16(m, n, k, {a[call].data(), k, 1}, {b[call].data(), 1, k}, {c.data(), n, 1}));
    }
  }
  const Product p{1, m, n, k, false, true, false};
  for (size_t call = 0; call < a.size(); ++call) {
    EXPECT_EQ(again[call], first[call]) << "call " << call;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const ExactDot want = Dot(a[call].data(), b[call].data(), p, i, j);
        ASSERT_NEAR(first[call][static_cast<size_t>(i * n + j)], want.value, F32SumTolerance(want, k))
            << "call " << call << " at (" << i << ", " << j << ")";
      }
    }
  }
}

// A long K, as a weight gradient sums over batch x tokens: oneDNN's bf16 GEMM orders such sums by the
// call's M and N, so the DOT kernel calls it on the same tiles in every variant. Serial, column and row
// variants give the same f32 product (what autotuning compares), bit for bit, so that a split can be
// chosen at all; the products are longer in M, in N, and neither.
TEST(GemmOneDnnBf16Test, DotVariantsAgreeBitForBitOnALongK) {
  if (!OneDnnHasBf16()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AMX";
  std::mt19937_64 rng(13);
  for (const Product& p :
       {Product{1, 512, 128, 4096, true, false, false}, Product{1, 128, 512, 4096, true, false, false},
        Product{1, 100, 70, 3000, false, true, false}, Product{1, 96, 96, 2048, false, false, false}}) {
    const std::vector<uint16_t> a = RandomBf16(static_cast<size_t>(p.m * p.k), rng),
                                b = RandomBf16(static_cast<size_t>(p.k * p.n), rng);
    const std::vector<ArrayShape> inputs = {{PrimitiveType::kBF16, {static_cast<int64_t>(a.size())}},
                                            {PrimitiveType::kBF16, {static_cast<int64_t>(b.size())}}};
    std::vector<std::vector<float>> products;
    for (int64_t variant : {kDotSerial, kDotColumnPanels, kDotRowPanels}) {
      absl::StatusOr<std::unique_ptr<Kernel>> built = BuildKernel(DotKernel(p, variant, GemmLibrary::kOneDnn), inputs,
                                                                  ArrayShape{PrimitiveType::kF32, {1, p.m, p.n}});
      ASSERT_TRUE(built.ok()) << built.status();
      std::vector<float> c(static_cast<size_t>(p.m * p.n));
      const void* in[] = {a.data(), b.data()};
      void* out[] = {c.data()};
      ASSERT_TRUE((*built)->Run(in, out).ok());
      products.push_back(std::move(c));
    }
    const std::string what = absl::StrCat("[", p.m, "x", p.k, "]x[", p.k, "x", p.n, "]");
    EXPECT_EQ(products[1], products[0]) << what << ": column panels against serial";
    EXPECT_EQ(products[2], products[0]) << what << ": row panels against serial";
  }
}

// A bf16 result is rounded by oneDNN as it stores each tile: exactly as FloatToBf16 rounds the unrounded
// f32 product (the bits autotuning compares), in every variant, a weight gradient's long K included.
TEST(GemmOneDnnBf16Test, ABf16ResultIsTheF32ProductRoundedOnce) {
  if (!OneDnnHasBf16()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AMX";
  std::mt19937_64 rng(17);
  for (const Product& p : {Product{1, 256, 192, 128, false, true, false}, Product{1, 96, 320, 1024, true, false, false},
                           Product{1, 128, 512, 4096, true, false, false}, Product{1, 33, 7, 5, false, false, false}}) {
    const std::vector<uint16_t> a = RandomBf16(static_cast<size_t>(p.m * p.k), rng),
                                b = RandomBf16(static_cast<size_t>(p.k * p.n), rng);
    const std::string what = absl::StrCat("[", p.m, "x", p.k, "]x[", p.k, "x", p.n, "]");
    // oneDNN itself stores bf16 for this shape (else the kernel would widen, and round as FloatToBf16 does).
    std::vector<uint16_t> whole(static_cast<size_t>(p.m * p.n));
    ASSERT_TRUE(OneDnnGemmBf16(p.m, p.n, p.k, {a.data(), p.transpose_lhs ? 1 : p.k, p.transpose_lhs ? p.m : 1},
                               {b.data(), p.transpose_rhs ? 1 : p.n, p.transpose_rhs ? p.k : 1},
                               MatrixView<uint16_t>{whole.data(), p.n, 1}))
        << "oneDNN refused a bf16 result for " << what;
    const std::vector<ArrayShape> inputs = {{PrimitiveType::kBF16, {static_cast<int64_t>(a.size())}},
                                            {PrimitiveType::kBF16, {static_cast<int64_t>(b.size())}}};
    const void* in[] = {a.data(), b.data()};
    for (int64_t variant : {kDotSerial, kDotColumnPanels, kDotRowPanels}) {
      const proto::Kernel kernel = DotKernel(p, variant, GemmLibrary::kOneDnn);
      absl::StatusOr<std::unique_ptr<Kernel>> f32 =
          BuildKernel(kernel, inputs, ArrayShape{PrimitiveType::kF32, {1, p.m, p.n}});
      absl::StatusOr<std::unique_ptr<Kernel>> bf16 =
          BuildKernel(kernel, inputs, ArrayShape{PrimitiveType::kBF16, {1, p.m, p.n}});
      ASSERT_TRUE(f32.ok() && bf16.ok()) << f32.status() << " " << bf16.status();
      std::vector<float> product(static_cast<size_t>(p.m * p.n));
      std::vector<uint16_t> rounded(product.size(), 0xffff);
      void* f32_out[] = {product.data()};
      void* bf16_out[] = {rounded.data()};
      ASSERT_TRUE((*f32)->Run(in, f32_out).ok());
      ASSERT_TRUE((*bf16)->Run(in, bf16_out).ok());
      for (size_t i = 0; i < product.size(); ++i) {
        ASSERT_EQ(rounded[i], FloatToBf16(product[i]))
            << "variant " << variant << " " << what << " element " << i << ": f32 product " << product[i];
      }
    }
  }
}

// Sums exactly halfway between two bf16 values, exact in f32 in any order: 1 + 2^-8 lies between 1 and
// 1 + 2^-7 and must round to 1 (the even one), 1 + 2^-7 + 2^-8 to 1 + 2^-6. Truncation would give
// 1 + 2^-7 for the second, rounding halves away from zero 1 + 2^-7 for the first.
TEST(GemmOneDnnBf16Test, ABf16ResultRoundsHalfwaySumsToEven) {
  if (!OneDnnHasBf16()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AMX";
  constexpr int64_t kM = 2, kN = 16, kK = 32;
  std::vector<uint16_t> a(kM * kK, 0), b(kK * kN, FloatToBf16(1.0f));
  a[0] = FloatToBf16(1.0f), a[1] = FloatToBf16(0x1p-8f);
  a[kK] = FloatToBf16(1.0f), a[kK + 1] = FloatToBf16(0x1p-7f), a[kK + 2] = FloatToBf16(0x1p-8f);
  const uint16_t want[kM] = {FloatToBf16(1.0f), FloatToBf16(1.0f + 0x1p-6f)};
  const Product p{1, kM, kN, kK, false, false, false};
  const std::vector<ArrayShape> inputs = {{PrimitiveType::kBF16, {kM * kK}}, {PrimitiveType::kBF16, {kK * kN}}};
  const void* in[] = {a.data(), b.data()};
  for (int64_t variant : {kDotSerial, kDotRowPanels}) {
    absl::StatusOr<std::unique_ptr<Kernel>> built =
        BuildKernel(DotKernel(p, variant, GemmLibrary::kOneDnn), inputs, ArrayShape{PrimitiveType::kBF16, {1, kM, kN}});
    ASSERT_TRUE(built.ok()) << built.status();
    std::vector<uint16_t> c(kM * kN, 0xffff);
    void* out[] = {c.data()};
    ASSERT_TRUE((*built)->Run(in, out).ok());
    for (int64_t i = 0; i < kM; ++i) {
      for (int64_t j = 0; j < kN; ++j) {
        EXPECT_EQ(c[static_cast<size_t>(i * kN + j)], want[i]) << "variant " << variant << " row " << i << " col " << j;
      }
    }
  }
}

// Threads meeting a shape for the first time at the same moment, as a device's panel threads do: every
// thread gets the same bits, and the creation of oneDNN's objects is no race (ThreadSanitizer stage).
TEST(GemmOneDnnBf16Test, ThreadsMeetingNewShapesAtOnceAgree) {
  constexpr int kThreads = 4;
  std::mt19937_64 rng(11);
  for (int64_t m = 41; m < 53; ++m) {  // shapes no other test here makes
    const int64_t n = 2 * m + 1, k = m + 3;
    const std::vector<uint16_t> a = RandomBf16(static_cast<size_t>(m * k), rng),
                                b = RandomBf16(static_cast<size_t>(k * n), rng);
    std::vector<float> af(a.size()), bf(b.size());
    for (size_t i = 0; i < a.size(); ++i) af[i] = Bf16ToFloat(a[i]);
    for (size_t i = 0; i < b.size(); ++i) bf[i] = Bf16ToFloat(b[i]);
    std::vector<std::vector<float>> bf16_results(kThreads, std::vector<float>(static_cast<size_t>(m * n)));
    std::vector<std::vector<float>> f32_results = bf16_results;
    std::barrier start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        if (OneDnnHasBf16()) {
          EXPECT_TRUE(OneDnnGemmBf16(m, n, k, {a.data(), k, 1}, {b.data(), n, 1}, {bf16_results[t].data(), n, 1}));
        }
        EXPECT_TRUE(OneDnnGemm(m, n, k, {af.data(), k, 1}, {bf.data(), n, 1}, {f32_results[t].data(), n, 1}));
      });
    }
    for (std::thread& th : threads) th.join();
    for (int t = 1; t < kThreads; ++t) {
      EXPECT_EQ(bf16_results[t], bf16_results[0]) << m << "x" << k << "x" << n << " bf16, thread " << t;
      EXPECT_EQ(f32_results[t], f32_results[0]) << m << "x" << k << "x" << n << " f32, thread " << t;
    }
  }
}

}  // namespace gemm_onednn_bf16_test
}  // namespace lazyrt::pjrt
