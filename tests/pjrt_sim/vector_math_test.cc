// vector_math.h's f32 exp, log, tanh, logistic and erf against the correctly rounded result (the f64
// C library function rounded to f32) over every 4093rd bit pattern of a float, a dense sweep of
// [-12, 12] and the edge cases (0, -0, denormals, inf, NaN, the overflow and underflow thresholds);
// and the device's kernels, fused or not, vectorized, giving exactly the bits of the scalar function.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "pjrt_sim/vector_math.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace vector_math_test {

using testing::Dims;
using testing::HostArray;
using testing::MakeArray;
using testing::ModuleBuilder;

// Floats in the order of their values as integers: the distance of two is their distance in ulps.
int64_t Ordinal(float f) {
  const int32_t bits = std::bit_cast<int32_t>(f);
  return bits < 0 ? -static_cast<int64_t>(bits & 0x7fffffff) : bits;
}

struct Function {
  const char* name;
  float (*vector)(float);
  double (*exact)(double);
  int64_t max_ulp;
};

const Function kFunctions[] = {
    {"exp", &VectorExp, [](double x) { return std::exp(x); }, 1},
    {"log", &VectorLog, [](double x) { return std::log(x); }, 1},
    {"tanh", &VectorTanh, [](double x) { return std::tanh(x); }, 2},
    {"logistic", &VectorLogistic, [](double x) { return 1 / (1 + std::exp(-x)); }, 2},
    {"erf", &VectorErf, [](double x) { return std::erf(x); }, 2},
};

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> SweepInputs() {
  std::vector<float> xs;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4093) xs.push_back(std::bit_cast<float>(uint32_t(bits)));
  for (int i = -120000; i <= 120000; ++i) xs.push_back(static_cast<float>(i) * 1e-4f);
  for (float x : {0.0f,
                  -0.0f,
                  kInf,
                  -kInf,
                  kNaN,
                  -kNaN,
                  std::numeric_limits<float>::denorm_min(),
                  -std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::max(),
                  -std::numeric_limits<float>::max(),
                  88.72283f,
                  88.72284f,
                  88.8f,
                  89.0f,
                  -87.33654f,
                  -87.33655f,
                  -103.9720f,
                  -103.9721f,
                  -104.0f,
                  -105.0f,
                  0.625f,
                  -0.625f,
                  1.0f,
                  -1.0f,
                  3.92f,
                  4.0f,
                  -4.0f,
                  0x1p-30f,
                  -0x1p-30f,
                  1.0f - 0x1p-24f,
                  1.0f + 0x1p-23f}) {
    xs.push_back(x);
  }
  return xs;
}

TEST(VectorMathTest, WithinAFewUlpOfTheCorrectlyRoundedResult) {
  const std::vector<float> xs = SweepInputs();
  for (const Function& f : kFunctions) {
    int64_t worst = 0;
    float worst_x = 0;
    for (float x : xs) {
      const float got = f.vector(x);
      const float want = static_cast<float>(f.exact(static_cast<double>(x)));
      if (std::isnan(want) || std::isnan(got)) {
        ASSERT_EQ(std::isnan(got), std::isnan(want)) << f.name << "(" << x << ") = " << got << ", not " << want;
        continue;
      }
      const int64_t ulps = std::abs(Ordinal(got) - Ordinal(want));
      if (ulps > worst) {
        worst = ulps;
        worst_x = x;
      }
    }
    EXPECT_LE(worst, f.max_ulp) << f.name << " is " << worst << " ulp off at " << std::hexfloat << worst_x;
  }
}

TEST(VectorMathTest, EdgeCasesAreExact) {
  EXPECT_EQ(VectorExp(0.0f), 1.0f);
  EXPECT_EQ(VectorExp(-0.0f), 1.0f);
  EXPECT_EQ(VectorExp(kInf), kInf);
  EXPECT_EQ(VectorExp(-kInf), 0.0f);
  EXPECT_EQ(VectorExp(89.0f), kInf);                                    // overflow
  EXPECT_EQ(VectorExp(-103.0f), static_cast<float>(std::exp(-103.0)));  // a denormal
  EXPECT_EQ(VectorExp(-87.5f), static_cast<float>(std::exp(-87.5)));    // just below FLT_MIN
  EXPECT_EQ(VectorExp(-110.0f), 0.0f);                                  // underflow
  EXPECT_EQ(VectorLog(1.0f), 0.0f);
  EXPECT_EQ(VectorLog(0.0f), -kInf);
  EXPECT_EQ(VectorLog(-0.0f), -kInf);
  EXPECT_EQ(VectorLog(kInf), kInf);
  EXPECT_TRUE(std::isnan(VectorLog(-1.0f)));
  EXPECT_TRUE(std::isnan(VectorLog(-kInf)));
  EXPECT_EQ(VectorLog(std::numeric_limits<float>::denorm_min()), static_cast<float>(std::log(0x1p-149)));
  using ScalarFn = float (*)(float);
  const ScalarFn odd_functions[] = {&VectorTanh, &VectorErf};
  for (ScalarFn odd : odd_functions) {
    EXPECT_EQ(std::bit_cast<uint32_t>(odd(-0.0f)), std::bit_cast<uint32_t>(-0.0f));  // the sign of zero
    EXPECT_EQ(std::bit_cast<uint32_t>(odd(0.0f)), 0u);
    EXPECT_EQ(odd(kInf), 1.0f);
    EXPECT_EQ(odd(-kInf), -1.0f);
    EXPECT_EQ(odd(100.0f), 1.0f);
  }
  EXPECT_EQ(VectorLogistic(kInf), 1.0f);
  EXPECT_EQ(VectorLogistic(-kInf), 0.0f);
  EXPECT_EQ(VectorLogistic(0.0f), 0.5f);
  EXPECT_EQ(VectorLogistic(-100.0f), static_cast<float>(std::exp(-100.0)));  // a denormal, not 0
  for (const Function& f : kFunctions) {
    EXPECT_TRUE(std::isnan(f.vector(kNaN))) << f.name;
    EXPECT_TRUE(std::isnan(f.vector(-kNaN))) << f.name;
  }
}

// The array erf takes the polynomial alone over runs with no element at or above 1 in magnitude: every
// element must still be the scalar function's bits, whichever elements of a run are large (or NaN,
// infinite, -0), wherever runs begin and however short the last one is.
TEST(VectorMathTest, ErfOfAnArrayIsTheScalarBitsWhateverMixOfSmallAndLargeElements) {
  // At 1 and just above, the polynomial alone gives other bits than the function: a run that took it for
  // them would fail below.
  for (const float at : {1.0f, 1.0000001f, 3.5f}) {
    ASSERT_NE(std::bit_cast<uint32_t>(ErfBelowOne(at)), std::bit_cast<uint32_t>(VectorErf(at))) << at;
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> small(-0.999f, 0.999f);
  const float odd_ones[] = {1.0f, -1.0f, 0.9999999f, 1.0000001f, 3.5f, -7.0f, kInf, -kInf, kNaN, -kNaN, -0.0f, 0.0f};
  for (int64_t n : {1, 63, 64, 65, 200, 1024, 1031}) {
    for (const float odd : odd_ones) {
      for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
        std::vector<float> x(static_cast<size_t>(n)), out(static_cast<size_t>(n));
        for (float& v : x) v = small(rng);
        x[static_cast<size_t>(at)] = odd;
        for (int64_t offset : {int64_t{0}, std::min<int64_t>(n - 1, 3)}) {  // runs starting off the array's start
          VectorErf(x.data() + offset, n - offset, out.data());
          for (int64_t i = 0; i < n - offset; ++i) {
            const float in = x[static_cast<size_t>(i + offset)];
            ASSERT_EQ(std::bit_cast<uint32_t>(out[static_cast<size_t>(i)]), std::bit_cast<uint32_t>(VectorErf(in)))
                << "erf(" << std::hexfloat << in << ") at " << i << " of " << n - offset;
          }
        }
      }
    }
  }
}

// GELU, x Phi(x), and its derivative Phi(x) + x phi(x) against the f64 formulas: within a few ulp of
// max(1, |value|) (the derivative's values are in [-0.17, 1.13], and it crosses 0 near x = -0.75, where
// no relative bound holds); the derivative NaN at NaN and +-inf (the formula's inf * 0, as PyTorch's);
// and the array loops, whose runs take erf's polynomial alone where they can, give the scalar bits.
TEST(VectorMathTest, GeluAndItsDerivativeAreTheFormulasValuesAndTheirArraysTheScalarBits) {
  std::vector<float> xs;
  for (int i = -120000; i <= 120000; ++i) xs.push_back(static_cast<float>(i) * 1e-4f);
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 1.4142135f, -1.4142135f, 5.656854f, -5.656854f, 30.0f, -30.0f}) {
    xs.push_back(x);
  }
  double worst_derivative = 0, worst_gelu = 0;
  for (float x : xs) {
    const double d = x, cdf = 0.5 * (1 + std::erf(d / std::sqrt(2.0)));
    const double derivative = cdf + d * std::exp(-d * d / 2) / std::sqrt(2 * M_PI);
    worst_derivative = std::max(worst_derivative, std::abs(VectorGeluDerivative(x) - derivative));
    worst_gelu = std::max(worst_gelu, std::abs(VectorGelu(x) - d * cdf) / std::max(1.0, std::abs(d * cdf)));
  }
  EXPECT_LE(worst_derivative, 4 * 0x1p-24) << "GELU's derivative is " << worst_derivative << " off";
  EXPECT_LE(worst_gelu, 4 * 0x1p-24) << "GELU is " << worst_gelu << " off";
  for (float x : {kNaN, -kNaN, kInf, -kInf}) EXPECT_TRUE(std::isnan(VectorGeluDerivative(x))) << x;
  EXPECT_TRUE(std::isnan(VectorGelu(kNaN)));
  EXPECT_EQ(VectorGelu(kInf), kInf);
  using ArrayFn = void (*)(const float*, int64_t, float*);
  using ScalarFn = float (*)(float);
  for (const auto& [array, scalar] : {std::pair<ArrayFn, ScalarFn>{&VectorGelu, &VectorGelu},
                                      std::pair<ArrayFn, ScalarFn>{&VectorGeluDerivative, &VectorGeluDerivative}}) {
    std::vector<float> out(xs.size());
    for (int64_t offset : {0, 5, 64}) {
      array(xs.data() + offset, static_cast<int64_t>(xs.size()) - offset, out.data());
      for (size_t i = 0; i + static_cast<size_t>(offset) < xs.size(); ++i) {
        const float x = xs[i + static_cast<size_t>(offset)];
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(scalar(x))) << x;
      }
    }
  }
}

// The kernels run the functions in vectorized loops (fused programs and unfused elementwise kernels,
// bf16 computed in f32): every lane must give the scalar function's bits, so that constant folding,
// the fused and the unfused kernel agree.
TEST(VectorMathTest, KernelsGiveTheScalarFunctionsBits) {
  std::vector<float> xs = SweepInputs();
  xs.resize(300001);  // enough lanes of every kind, a test-sized run
  const Dims dims = {static_cast<int64_t>(xs.size())};
  const std::vector<HostArray> args = {MakeArray<float>(PrimitiveType::kF32, dims, xs)};
  const std::pair<Opcode, float (*)(float)> ops[] = {{Opcode::kExp, &VectorExp},
                                                     {Opcode::kLog, &VectorLog},
                                                     {Opcode::kTanh, &VectorTanh},
                                                     {Opcode::kLogistic, &VectorLogistic},
                                                     {Opcode::kErf, &VectorErf},
                                                     {Opcode::kGelu, &VectorGelu},
                                                     {Opcode::kGeluDerivative, &VectorGeluDerivative}};
  std::unique_ptr<Client> client = testing::MakeClient();
  for (const auto& [opcode, fn] : ops) {
    ModuleBuilder mb;
    const int64_t x = mb.Parameter(0, proto::F32, dims);
    mb.Output(mb.Unary(opcode, x));
    mb.Output(mb.Unary(opcode, mb.Unary(Opcode::kNegate, x)));  // a fused chain
    for (bool fusion : {false, true}) {
      absl::StatusOr<std::vector<HostArray>> out =
          testing::CompileAndRun(*client, mb.module(), {.fusion = fusion, .autotune = false}, args);
      ASSERT_TRUE(out.ok()) << out.status();
      for (size_t i = 0; i < xs.size(); ++i) {
        const int64_t k = static_cast<int64_t>(i);
        ASSERT_EQ(std::bit_cast<uint32_t>((*out)[0].at<float>(k)), std::bit_cast<uint32_t>(fn(xs[i])))
            << OpcodeName(opcode) << "(" << std::hexfloat << xs[i] << "), fusion " << fusion;
        ASSERT_EQ(std::bit_cast<uint32_t>((*out)[1].at<float>(k)), std::bit_cast<uint32_t>(fn(-xs[i])))
            << OpcodeName(opcode) << "(-" << std::hexfloat << xs[i] << "), fusion " << fusion;
      }
    }
  }
}

}  // namespace vector_math_test
}  // namespace lazyrt::pjrt
