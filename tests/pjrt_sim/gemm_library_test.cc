// Every GEMM library a DOT kernel can be tuned to, in every variant (whole, column and row panels),
// computes the product of a reference loop, to the tolerance of f32/f64 sums: transposed operands,
// batches (an operand broadcast over the batch too), odd and degenerate shapes; and adds an addend to it
// as a loop would.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
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

// `kernel` with one more addend, read through a view of dims [batch, m, n] from its next input.
proto::Kernel PlusAddend(proto::Kernel kernel, int64_t offset, const std::vector<int64_t>& strides) {
  if (kernel.operand_views_size() == 0) {
    kernel.add_operand_views();
    kernel.add_operand_views();
  }
  proto::OperandView* view = kernel.add_operand_views();
  for (int64_t d : {kernel.batch(), kernel.m(), kernel.n()}) view->add_dims(d);
  view->set_offset(offset);
  for (int64_t s : strides) view->add_strides(s);
  return kernel;
}
proto::Kernel WithAddend(const Product& p, int64_t variant, GemmLibrary library, int64_t offset,
                         const std::vector<int64_t>& strides) {
  return PlusAddend(DotKernel(p, variant, library), offset, strides);
}

// Every library in every variant adds the addends to its product exactly as loops adding them afterwards
// would (each sum rounded once, in turn): a bias broadcast along the rows (read from an offset into a
// longer array), an array of the product's shape, and the two.
template <typename T>
void CheckAddends(PrimitiveType type) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> u(-1, 1);
  const Product products[] = {{1, 128, 256, 784, false, true, false}, {1, 33, 1, 17, false, true, false},
                              {3, 9, 11, 6, true, false, false},      {4, 10, 7, 12, true, true, true},
                              {1, 256, 784, 128, true, false, false}, {2, 0, 6, 4, false, false, false}};
  for (const Product& p : products) {
    std::vector<T> a(static_cast<size_t>(p.batch * p.m * p.k)),
        b(static_cast<size_t>((p.broadcast_rhs ? 1 : p.batch) * p.k * p.n)),
        full(static_cast<size_t>(p.batch * p.m * p.n)), bias(static_cast<size_t>(p.n + 3));
    for (std::vector<T>* v : {&a, &b, &full, &bias}) {
      for (T& x : *v) x = static_cast<T>(u(rng));
    }
    const std::vector<ArrayShape> operands = {{type, {static_cast<int64_t>(a.size())}},
                                              {type, {static_cast<int64_t>(b.size())}}};
    const ArrayShape output{type, {p.batch, p.m, p.n}};
    for (GemmLibrary library : kGemmLibraries) {
      for (int64_t variant : {kDotSerial, kDotColumnPanels, kDotRowPanels}) {
        const std::string what = absl::StrCat(std::string(GemmLibraryName(library)), " variant ", variant, ": ",
                                              p.batch, " x [", p.m, "x", p.k, "]x[", p.k, "x", p.n, "]");
        absl::StatusOr<std::unique_ptr<Kernel>> plain = BuildKernel(DotKernel(p, variant, library), operands, output);
        ASSERT_TRUE(plain.ok()) << plain.status();
        std::vector<T> product(full.size());
        const void* in[] = {a.data(), b.data()};
        void* out[] = {product.data()};
        ASSERT_TRUE((*plain)->Run(in, out).ok());
        // A bias, an array, and both in turn.
        const std::vector<T> bias_sums = [&] {
          std::vector<T> sums(full.size());
          for (size_t e = 0; e < sums.size(); ++e) sums[e] = product[e] + bias[3 + e % static_cast<size_t>(p.n)];
          return sums;
        }();
        for (int which = 0; which < 3; ++which) {
          proto::Kernel kernel = DotKernel(p, variant, library);
          std::vector<ArrayShape> inputs = operands;
          std::vector<const void*> in = {a.data(), b.data()};
          if (which != 1) {
            kernel = PlusAddend(kernel, 3, {0, 0, 1});
            inputs.push_back({type, {static_cast<int64_t>(bias.size())}});
            in.push_back(bias.data());
          }
          if (which != 0) {
            kernel = PlusAddend(kernel, 0, {p.m * p.n, p.n, 1});
            inputs.push_back({type, {static_cast<int64_t>(full.size())}});
            in.push_back(full.data());
          }
          absl::StatusOr<std::unique_ptr<Kernel>> built = BuildKernel(kernel, inputs, output);
          ASSERT_TRUE(built.ok()) << built.status();
          std::vector<T> c(full.size(), static_cast<T>(12345));  // must be overwritten
          void* out3[] = {c.data()};
          ASSERT_TRUE((*built)->Run(in, out3).ok());
          for (size_t e = 0; e < c.size(); ++e) {
            const T want = which == 0 ? bias_sums[e] : (which == 1 ? product[e] : bias_sums[e]) + full[e];
            ASSERT_EQ(c[e], want) << what << " addends " << which << " at " << e;
          }
        }
      }
    }
  }
}

TEST(GemmLibraryTest, EveryLibraryAddsTheAddendsAsLoopsWouldInF32) { CheckAddends<float>(PrimitiveType::kF32); }

TEST(GemmLibraryTest, EveryLibraryAddsTheAddendsAsLoopsWouldInF64) { CheckAddends<double>(PrimitiveType::kF64); }

// The device calls a library from its pool's threads at once (a product's panels, attention's blocks):
// every library must give each call the product it gives alone. Debian's serial OpenBLAS is built without
// locking and did not: 32 of 24,000 such calls from two threads (small K, either operand transposed)
// came out wrong, and f64 attention gradients with them.
template <typename T>
void CheckTwoThreadsAtOnce() {
  struct Shape {
    int64_t m, n, k;
    bool ta, tb;
  };
  std::mt19937_64 rng(5);
  std::vector<Shape> shapes;
  for (int i = 0; i < 60; ++i) {
    shapes.push_back({static_cast<int64_t>(rng() % 130) + 1, static_cast<int64_t>(rng() % 130) + 1,
                      static_cast<int64_t>(rng() % 20) + 1, rng() % 2 == 1, rng() % 2 == 1});
  }
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> a(130 * 20), b(20 * 130);
  for (T& x : a) x = static_cast<T>(u(rng));
  for (T& x : b) x = static_cast<T>(u(rng));
  for (GemmLibrary library : kGemmLibraries) {
    auto product = [&](const Shape& s) {
      std::vector<T> c(static_cast<size_t>(s.m * s.n));
      const MatrixView<const T> av =
          s.ta ? MatrixView<const T>{a.data(), 1, s.m} : MatrixView<const T>{a.data(), s.k, 1};
      const MatrixView<const T> bv =
          s.tb ? MatrixView<const T>{b.data(), 1, s.k} : MatrixView<const T>{b.data(), s.n, 1};
      Gemm(library, s.m, s.n, s.k, av, bv, MatrixView<T>{c.data(), s.n, 1});
      return c;
    };
    std::vector<std::vector<T>> alone;
    for (const Shape& s : shapes) alone.push_back(product(s));
    std::atomic<int> wrong{0};
    auto calls = [&](size_t first) {
      for (int round = 0; round < 100; ++round) {
        for (size_t i = 0; i < shapes.size(); ++i) {
          const size_t j = (i + first + static_cast<size_t>(round)) % shapes.size();
          if (product(shapes[j]) != alone[j]) wrong.fetch_add(1);
        }
      }
    };
    std::thread other(calls, 7);
    calls(0);
    other.join();
    EXPECT_EQ(wrong.load(), 0) << GemmLibraryName(library) << ": products that differ from the same call alone";
  }
}

TEST(GemmLibraryTest, TwoThreadsAtOnceGetWhatEachCallGetsAloneInF32) { CheckTwoThreadsAtOnce<float>(); }

TEST(GemmLibraryTest, TwoThreadsAtOnceGetWhatEachCallGetsAloneInF64) { CheckTwoThreadsAtOnce<double>(); }

TEST(GemmLibraryTest, AnAddendItCannotReadIsRefusedAtBuild) {
  const Product p{2, 3, 4, 5, false, false, false};
  const ArrayShape f32{PrimitiveType::kF32, {40}}, output{PrimitiveType::kF32, {2, 3, 4}};
  const std::vector<ArrayShape> inputs = {{PrimitiveType::kF32, {30}}, {PrimitiveType::kF32, {40}}, f32};
  const auto refused = [&](const proto::Kernel& kernel, std::vector<ArrayShape> in, const ArrayShape& out,
                           const std::string& part) {
    absl::StatusOr<std::unique_ptr<Kernel>> built = BuildKernel(kernel, in, out);
    ASSERT_FALSE(built.ok()) << part;
    EXPECT_NE(built.status().message().find(part), std::string::npos) << built.status();
  };
  const proto::Kernel good = WithAddend(p, kDotSerial, GemmLibrary::kBlis, 36, {0, 0, 1});
  ASSERT_TRUE(BuildKernel(good, inputs, output).ok());
  proto::Kernel no_view = DotKernel(p, kDotSerial, GemmLibrary::kBlis);
  refused(no_view, inputs, output, "an addend needs a view");
  proto::Kernel two_views = good;
  two_views.mutable_operand_views()->RemoveLast();
  refused(two_views, inputs, output, "an addend needs a view");
  proto::Kernel viewed_operand = good;
  viewed_operand.mutable_operand_views(0)->add_dims(30);
  viewed_operand.mutable_operand_views(0)->add_strides(1);
  refused(viewed_operand, inputs, output, "an addend needs a view");
  refused(good, {inputs[0], inputs[1]}, output, "operand views without an addend");
  refused(WithAddend(p, kDotSerial, GemmLibrary::kBlis, 37, {0, 0, 1}), inputs, output, "reaches outside its input");
  refused(WithAddend(p, kDotSerial, GemmLibrary::kBlis, 0, {0, 1, 0}), inputs, output, "rows that are not contiguous");
  refused(WithAddend(p, kDotSerial, GemmLibrary::kBlis, 0, {0, 1}), inputs, output, "a stride per dim");
  proto::Kernel fewer = good;
  fewer.mutable_operand_views(2)->set_dims(0, 1);
  refused(fewer, inputs, output, "not of the product's elements");
  std::vector<ArrayShape> f64_addend = inputs;
  f64_addend[2].type = PrimitiveType::kF64;
  refused(good, f64_addend, output, "an f32 or f64 product of its own type");
  const std::vector<ArrayShape> bf16 = {{PrimitiveType::kBF16, {30}}, {PrimitiveType::kBF16, {40}}, f32};
  refused(good, bf16, output, "an f32 or f64 product of its own type");
  // A dim of one element may say any stride: it is never stepped along (read as 0, not overflowing).
  const Product one{1, 3, 4, 5, false, false, false};
  const proto::Kernel huge = WithAddend(one, kDotSerial, GemmLibrary::kBlis, 0, {INT64_MAX, 0, 1});
  const std::vector<ArrayShape> one_inputs = {{PrimitiveType::kF32, {15}}, {PrimitiveType::kF32, {20}}, f32};
  absl::StatusOr<std::unique_ptr<Kernel>> built = BuildKernel(huge, one_inputs, {PrimitiveType::kF32, {1, 3, 4}});
  ASSERT_TRUE(built.ok()) << built.status();
  std::vector<float> a(15, 1.0f), b(20, 1.0f), bias(40), c(12);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(i);
  const void* in[] = {a.data(), b.data(), bias.data()};
  void* out[] = {c.data()};
  ASSERT_TRUE((*built)->Run(in, out).ok());
  for (size_t e = 0; e < c.size(); ++e) EXPECT_EQ(c[e], 5.0f + static_cast<float>(e % 4)) << e;
}

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
