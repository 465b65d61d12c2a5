// DOT of bf16 and f16 runs the f32 GEMM on widened operands: against a reference loop (exact products,
// sums in f64, rounded to the type once) for transposed, batched and broadcast operands, shapes large
// enough for the autotuner to split them over the pool, and every variant giving the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/kernels/kernels.h"
#include "tests/pjrt_sim/dot_product_test_util.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace dot_bf16_test {

using testing::Dims;
using testing::HostArray;
using testing::MakeArray;
using testing::ModuleBuilder;

struct Case {
  Dims lhs, rhs;
  bool transpose_lhs = false, transpose_rhs = false;
};

float ToFloat(PrimitiveType type, uint16_t h) { return type == PrimitiveType::kBF16 ? Bf16ToFloat(h) : HalfToFloat(h); }

// The distance between `v` and the next value of `type` away from zero.
double Ulp(PrimitiveType type, double v) {
  const int bits = type == PrimitiveType::kBF16 ? 8 : 11;
  const double magnitude = std::max(std::fabs(v), type == PrimitiveType::kBF16 ? 0x1p-126 : 0x1p-14);
  return std::ldexp(1.0, std::ilogb(magnitude) - (bits - 1));
}

void CheckDot(proto::ElementType proto_type, PrimitiveType type) {
  std::mt19937_64 rng(11);
  const std::vector<Case> cases = {
      {{3, 4}, {4, 5}},
      {{2, 3, 4}, {4, 5}},
      {{96, 64}, {96, 80}, true, false},
      {{3, 40, 33}, {3, 50, 33}, false, true},
      {{256, 128}, {128, 192}},  // large enough to be tuned: panels over the pool
      {{2, 128, 64}, {2, 128, 96}, true, false},
  };
  std::unique_ptr<Client> client = testing::MakeClient();
  for (const Case& c : cases) {
    std::vector<uint16_t> values[2];
    std::vector<HostArray> args;
    ModuleBuilder mb;
    int64_t params[2];
    for (int o = 0; o < 2; ++o) {
      const Dims& dims = o == 0 ? c.lhs : c.rhs;
      values[o].resize(static_cast<size_t>(testing::NumElements(dims)));
      for (uint16_t& v : values[o]) {
        const float x = std::uniform_real_distribution<float>(-2, 2)(rng);
        v = type == PrimitiveType::kBF16 ? FloatToBf16(x) : FloatToHalf(x);
      }
      args.push_back(MakeArray<uint16_t>(type, dims, values[o]));
      params[o] = mb.Parameter(o, proto_type, dims);
    }
    const int64_t d = mb.Dot(params[0], params[1], c.transpose_lhs, c.transpose_rhs);
    mb.Output(d);
    const Dims out_dims = mb.dims(d);
    const size_t ra = c.lhs.size(), rb = c.rhs.size();
    const int64_t m = out_dims[out_dims.size() - 2], n = out_dims.back();
    const int64_t k = c.lhs[c.transpose_lhs ? ra - 2 : ra - 1];
    const int64_t batch = testing::NumElements(out_dims) / (m * n);
    const int64_t lhs_batch = ra > 2 ? m * k : 0, rhs_batch = rb > 2 ? k * n : 0;

    std::vector<uint16_t> first;
    for (bool autotune : {false, true}) {
      absl::StatusOr<std::vector<HostArray>> out =
          testing::CompileAndRun(*client, mb.module(), {.fusion = true, .autotune = autotune}, args);
      ASSERT_TRUE(out.ok()) << out.status();
      const std::vector<uint16_t> got = (*out)[0].values<uint16_t>();
      if (first.empty()) {
        first = got;
      } else {
        EXPECT_EQ(got, first) << "tuning changed the bits";  // a tuned variant computes the same bits
      }
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double sum = 0, magnitude = 0;
            for (int64_t p = 0; p < k; ++p) {
              const int64_t ai = b * lhs_batch + (c.transpose_lhs ? p * m + i : i * k + p);
              const int64_t bi = b * rhs_batch + (c.transpose_rhs ? j * k + p : p * n + j);
              const double product = static_cast<double>(ToFloat(type, values[0][static_cast<size_t>(ai)])) *
                                     ToFloat(type, values[1][static_cast<size_t>(bi)]);
              sum += product;
              magnitude += std::fabs(product);
            }
            // Rounded once to the type, after sums in f32 (each off by at most k f32 ulps of the
            // magnitude): within one ulp of the type plus the f32 sums' error.
            const double got_value = ToFloat(type, got[static_cast<size_t>((b * m + i) * n + j)]);
            const double tolerance = Ulp(type, sum) + static_cast<double>(k) * 0x1p-23 * magnitude;
            ASSERT_NEAR(got_value, sum, tolerance) << "product " << b << "," << i << "," << j << " of "
                                                   << testing::NumElements(out_dims) << ", autotune " << autotune;
          }
        }
      }
    }
  }
}

TEST(DotBf16Test, Bf16MatchesTheReferenceLoop) { CheckDot(proto::BF16, PrimitiveType::kBF16); }
TEST(DotBf16Test, F16MatchesTheReferenceLoop) { CheckDot(proto::F16, PrimitiveType::kF16); }

// Tuning a 16-bit DOT never changes its bits, on any data. The autotuner's probe data leave about 1% of
// this DOT's left operand nonzero (the select), the data below all of it. A weight gradient's shape
// (k = 4096): oneDNN's panels of it sum in another order than its whole product, which the one rounding to
// bf16 hides in all but a few elements; the autotuner compares its candidates' f32 products on dense
// random operands of their own.
TEST(DotBf16Test, TuningNeverChangesTheBits) {
  constexpr int64_t kTokens = 4096, kIn = 128, kOut = 384;
  ModuleBuilder mb;
  const int64_t x = mb.Parameter(0, proto::BF16, {kTokens, kIn});
  const int64_t dy = mb.Parameter(1, proto::BF16, {kTokens, kOut});
  const int64_t kept =
      mb.Compare(CompareDirection::kGt, x, mb.Broadcast(mb.Constant(0.99, proto::BF16), {kTokens, kIn}, {}));
  const int64_t sparse = mb.Select(kept, x, mb.Broadcast(mb.Constant(0, proto::BF16), {kTokens, kIn}, {}));
  mb.Output(mb.Dot(sparse, dy, /*transpose_lhs=*/true));
  std::mt19937_64 rng(17);
  std::vector<uint16_t> xs(kTokens * kIn), dys(kTokens * kOut);
  for (uint16_t& v : xs) v = FloatToBf16(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng));
  for (uint16_t& v : dys) v = FloatToBf16(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng));
  const std::vector<HostArray> args = {MakeArray<uint16_t>(PrimitiveType::kBF16, {kTokens, kIn}, xs),
                                       MakeArray<uint16_t>(PrimitiveType::kBF16, {kTokens, kOut}, dys)};
  std::unique_ptr<Client> client = testing::MakeClient();
  absl::StatusOr<std::vector<HostArray>> untuned =
      testing::CompileAndRun(*client, mb.module(), {.fusion = true, .autotune = false}, args);
  ASSERT_TRUE(untuned.ok()) << untuned.status();
  for (int compile = 0; compile < 3; ++compile) {  // each compile times the variants again
    absl::StatusOr<std::vector<HostArray>> tuned =
        testing::CompileAndRun(*client, mb.module(), {.fusion = true, .autotune = true}, args);
    ASSERT_TRUE(tuned.ok()) << tuned.status();
    EXPECT_EQ((*tuned)[0].values<uint16_t>(), (*untuned)[0].values<uint16_t>()) << "compile " << compile;
  }
}

// A DOT of 16-bit operands with an f32 output gives its f32 product unrounded (what autotuning compares
// variants on): rounded once, it is the 16-bit DOT's result, bit for bit, in every variant and library.
TEST(DotBf16Test, AnF32OutputIsTheProductBeforeItsRounding) {
  const Product p{2, 33, 47, 200, true, false, false};
  std::mt19937_64 rng(23);
  for (PrimitiveType type : {PrimitiveType::kBF16, PrimitiveType::kF16}) {
    std::vector<uint16_t> a(static_cast<size_t>(p.batch * p.m * p.k)), b(static_cast<size_t>(p.batch * p.k * p.n));
    for (std::vector<uint16_t>* v : {&a, &b}) {
      for (uint16_t& x : *v) {
        const float f = std::uniform_real_distribution<float>(-2, 2)(rng);
        x = type == PrimitiveType::kBF16 ? FloatToBf16(f) : FloatToHalf(f);
      }
    }
    const std::vector<ArrayShape> inputs = {{type, {static_cast<int64_t>(a.size())}},
                                            {type, {static_cast<int64_t>(b.size())}}};
    const void* in[] = {a.data(), b.data()};
    for (GemmLibrary library : kGemmLibraries) {
      for (int64_t variant : {kDotSerial, kDotColumnPanels, kDotRowPanels}) {
        const proto::Kernel kernel = DotKernel(p, variant, library);
        absl::StatusOr<std::unique_ptr<Kernel>> rounded = BuildKernel(kernel, inputs, {type, {p.batch, p.m, p.n}});
        absl::StatusOr<std::unique_ptr<Kernel>> product =
            BuildKernel(kernel, inputs, {PrimitiveType::kF32, {p.batch, p.m, p.n}});
        ASSERT_TRUE(rounded.ok()) << rounded.status();
        ASSERT_TRUE(product.ok()) << product.status();
        std::vector<uint16_t> got(static_cast<size_t>(p.batch * p.m * p.n));
        std::vector<float> f32(got.size());
        void* out16[] = {got.data()};
        void* out32[] = {f32.data()};
        ASSERT_TRUE((*rounded)->Run(in, out16).ok());
        ASSERT_TRUE((*product)->Run(in, out32).ok());
        for (size_t i = 0; i < got.size(); ++i) {
          const uint16_t want = type == PrimitiveType::kBF16 ? FloatToBf16(f32[i]) : FloatToHalf(f32[i]);
          ASSERT_EQ(got[i], want) << PrimitiveTypeName(type) << " " << GemmLibraryName(library) << " variant "
                                  << variant << " at " << i;
        }
      }
    }
  }
}

// An f32 result is the only wider type a DOT of 16-bit operands may have.
TEST(DotBf16Test, OtherMixedTypesAreRefused) {
  const Product p{1, 4, 5, 6, false, false, false};
  const proto::Kernel kernel = DotKernel(p, kDotSerial, GemmLibrary::kBlis);
  const std::vector<ArrayShape> bf16 = {{PrimitiveType::kBF16, {24}}, {PrimitiveType::kBF16, {30}}};
  const std::vector<ArrayShape> f32 = {{PrimitiveType::kF32, {24}}, {PrimitiveType::kF32, {30}}};
  const std::vector<ArrayShape> mixed = {{PrimitiveType::kBF16, {24}}, {PrimitiveType::kF32, {30}}};
  EXPECT_FALSE(BuildKernel(kernel, bf16, {PrimitiveType::kF64, {1, 4, 5}}).ok());
  EXPECT_FALSE(BuildKernel(kernel, bf16, {PrimitiveType::kF16, {1, 4, 5}}).ok());
  EXPECT_FALSE(BuildKernel(kernel, f32, {PrimitiveType::kBF16, {1, 4, 5}}).ok());
  EXPECT_FALSE(BuildKernel(kernel, mixed, {PrimitiveType::kF32, {1, 4, 5}}).ok());
  EXPECT_TRUE(BuildKernel(kernel, bf16, {PrimitiveType::kF32, {1, 4, 5}}).ok());
}

}  // namespace dot_bf16_test
}  // namespace lazyrt::pjrt
