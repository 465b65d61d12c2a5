// DOT of bf16 and f16 runs the f32 GEMM on widened operands: against a reference loop (exact products,
// sums in f64, rounded to the type once) for transposed, batched and broadcast operands, shapes large
// enough for the autotuner to split them over the pool, and every variant giving the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "pjrt_sim/element_ops.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace {

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

}  // namespace
}  // namespace lazyrt::pjrt
