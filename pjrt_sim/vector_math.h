// The f32 transcendental functions of the elementwise opcodes (exp, log, tanh, logistic, erf), written so
// that a loop over them vectorizes: range reduction and polynomials, special inputs handled by selects
// instead of branches, integer work on the bits instead of float-to-int conversions. glibc's scalar
// std::erf and std::exp cost ~2 ns an element and stop every loop that calls them from vectorizing;
// these run several elements an instruction.
//
// Accuracy (tests/pjrt_sim/vector_math_test.cc measures it against the correctly rounded result over
// dense sweeps, edge cases included): a few ulp, like PyTorch's vectorized CPU kernels (Sleef's u10
// functions and its own erf). The results are the same on every machine: only IEEE operations, each
// rounded once. The kernels are built without floating-point contraction; the polynomials' multiply-adds
// are written as std::fma, one rounding each on every machine: an instruction in the x86-64-v3 and v4
// clones (the GELU loop 12% faster than unfused on a Zen 3), the C library's correctly rounded fmaf elsewhere.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

// Marks a loop to be compiled for x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA) and the baseline x86-64, the
// CPU's best chosen when the program is loaded: function multiversioning where GCC builds for x86-64 ELF,
// elsewhere the baseline's loop only. Not under ThreadSanitizer, whose runtime is not yet up when the
// loader runs the resolvers, nor under clang (the fuzzers, clang-tidy): clang 16's resolver for arch=
// clones checks the CPU's vendor, never its features (llvm-project#55830, fixed in clang 18), and its
// feature-named "avx2" clone has no FMA. The baseline calls fmaf for each fused multiply-add: ~10x
// slower transcendental functions in those builds, the same bits.
#if defined(__x86_64__) && defined(__ELF__) && !defined(__SANITIZE_THREAD__) && !defined(__clang__)
#define LAZYRT_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LAZYRT_VECTOR_CLONES
#endif
// The same for a function template (GCC multiversions templates too).
#define LAZYRT_VECTOR_CLONES_TEMPLATE LAZYRT_VECTOR_CLONES

namespace lazyrt::pjrt {

// 2^n for n in [-126, 127] (a normal float built from its exponent bits).
inline float PowerOfTwo(int32_t n) { return std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23); }

// exp(x) for x in [-104, 88.8] (and NaN): what VectorExp computes there, without its clamps, for callers
// whose arguments are known to lie there (erf's). Outside, the result is wrong but defined behaviour.
inline float VectorExpInRange(float x) {
  // Adding 1.5 * 2^23 rounds to an integer, held in the low bits: no float-to-int conversion (which is
  // undefined on NaN).
  constexpr float kShifter = 0x1.8p23f;
  const float shifted = std::fma(x, 1.44269504088896341f, kShifter);
  const float n = shifted - kShifter;
  const float r = std::fma(n, 2.12194440e-4f, std::fma(n, -0.693359375f, x));
  float p = std::fma(1.9875691500e-4f, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p, r * r, r) + 1.0f;
  // 2^n as two factors, each a normal float, so that results down in the denormals (n < -126) and up
  // to overflow (n = 128) come out right, rounded once by the last product.
  const int32_t ni = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kShifter));
  const int32_t half = ni >> 1;
  return p * PowerOfTwo(half) * PowerOfTwo(ni - half);
}

// exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2] (Cephes' expf
// reduction and polynomial). ln 2 is split in two so that n * the first part is exact.
inline float VectorExp(float x) {
  // Beyond these bounds the result is inf or 0; clamping keeps n in range. NaN passes through both.
  x = x > 88.8f ? 88.8f : x;
  x = x < -104.0f ? -104.0f : x;
  return VectorExpInRange(x);
}

// log(x) = e ln 2 + log(m), x = m 2^e with m in [sqrt(1/2), sqrt(2)) (Cephes' logf polynomial).
inline float VectorLog(float x) {
  // Denormals are scaled into the normals first.
  const bool denormal = x < 0x1p-126f;
  const float scaled = denormal ? x * 0x1p23f : x;
  const uint32_t bits = std::bit_cast<uint32_t>(scaled);
  int32_t e = static_cast<int32_t>((bits >> 23) & 0xffu) - 126 - (denormal ? 23 : 0);
  float m = std::bit_cast<float>((bits & 0x007fffffu) | 0x3f000000u);  // in [0.5, 1)
  const bool low = m < 0.707106781186547524f;
  e -= low ? 1 : 0;
  m = low ? m + m - 1.0f : m - 1.0f;
  const float z = m * m;
  float y = std::fma(7.0376836292e-2f, m, -1.1514610310e-1f);
  y = std::fma(y, m, 1.1676998740e-1f);
  y = std::fma(y, m, -1.2420140846e-1f);
  y = std::fma(y, m, 1.4249322787e-1f);
  y = std::fma(y, m, -1.6668057665e-1f);
  y = std::fma(y, m, 2.0000714765e-1f);
  y = std::fma(y, m, -2.4999993993e-1f);
  y = std::fma(y, m, 3.3333331174e-1f);
  y = y * m * z;
  const float fe = static_cast<float>(e);
  y = std::fma(fe, -2.12194440e-4f, y);
  y = std::fma(z, -0.5f, y);
  float result = std::fma(fe, 0.693359375f, m + y);
  result = x == 0.0f ? -std::numeric_limits<float>::infinity() : result;
  result = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : result;
  result = x == std::numeric_limits<float>::infinity() ? x : result;
  return x != x ? x : result;  // NaN stays NaN
}

// tanh(x): an odd polynomial below |x| = 0.625 (Cephes' tanhf), 1 - 2 / (exp(2|x|) + 1) above, where
// no cancellation loses bits; the sign is put back last (tanh(-0) = -0).
inline float VectorTanh(float x) {
  const float a = std::fabs(x);
  const float z = a * a;
  float poly = std::fma(-5.70498872745e-3f, z, 2.06390887954e-2f);
  poly = std::fma(poly, z, -5.37397155531e-2f);
  poly = std::fma(poly, z, 1.33314422036e-1f);
  poly = std::fma(poly, z, -3.33332819422e-1f);
  const float small = std::fma(a, z * poly, a);
  const float large = 1.0f - 2.0f / (VectorExp(a + a) + 1.0f);  // exp overflows to inf: 1
  return std::copysign(a < 0.625f ? small : large, x);
}

// 1 / (1 + exp(-x)), computed as exp(x) / (1 + exp(x)) for negative x: exp(-x) would overflow below
// -88.7 and lose the denormal results.
inline float VectorLogistic(float x) {
  const float e = VectorExp(-std::fabs(x));
  return (x < 0.0f ? e : 1.0f) / (1.0f + e);
}

// erf(x): x P(x^2) below |x| = 1, 1 - exp(Q(|x| - 2.5)) from 1 to 4 (Q approximates log erfc), 1 beyond
// (erfc(4) is below half an ulp of 1). Minimax fits made for this file. The two parts are functions of
// their own so that an array's loop can take the first alone where no element needs the second.
inline float ErfBelowOne(float a) {  // a = |x| < 1 (any a in the lanes whose result is discarded)
  const float z = a * a;
  float poly = std::fma(7.889477e-05f, z, -8.020957e-04f);
  poly = std::fma(poly, z, 5.1895496e-03f);
  poly = std::fma(poly, z, -2.6854454e-02f);
  poly = std::fma(poly, z, 1.12836e-01f);
  poly = std::fma(poly, z, -3.7612626e-01f);
  poly = std::fma(poly, z, 1.1283791f);
  return a * poly;
}
// log erfc(a) for a = min(|x|, 4) >= 1 (any a in the lanes whose result is discarded): Q(a - 2.5).
inline float LogErfc(float a) {
  // Q by Estrin's scheme: pairs, then pairs of pairs. The chain through Q and exp bounds a vector loop
  // of erf (the CPU overlaps too few iterations to hide it), and Horner's 16 dependent operations were
  // half of it: 0.71 -> 0.55 ns an element on a Zen 5, still within the test's 2 ulp.
  const float t = a - 2.5f;
  const float t2 = t * t, t4 = t2 * t2;
  const float q01 = std::fma(-5.3526807f, t, -7.806815f), q23 = std::fma(-1.0858487e-02f, t, -9.438936e-01f);
  const float q45 = std::fma(-4.201731e-04f, t, 2.1650817e-03f), q67 = std::fma(-1.33017165e-05f, t, 7.7454875e-05f);
  return std::fma(1.5998297e-06f, t4 * t4, std::fma(std::fma(q67, t2, q45), t4, std::fma(q23, t2, q01)));
}
inline float ErfFromOne(float a) {  // a = min(|x|, 4) >= 1 (any a in the lanes whose result is discarded)
  // For |x| in [1, 4], log erfc is in [-18.0, -1.8]: exp's clamps would change nothing. In the lanes of
  // smaller |x| it is in [-1.9, 0.001] (or NaN), and the select in VectorErf discards it.
  return 1.0f - VectorExpInRange(LogErfc(a));
}
// The argument both parts take: min(|x|, 4), NaN passing.
inline float ErfMagnitude(float x) {
  const float a = std::fabs(x);
  return a > 4.0f ? 4.0f : a;
}
// erf(x) from a = ErfMagnitude(x) and ErfFromOne(a): the part a's magnitude selects, with x's sign.
inline float ErfOfParts(float x, float a, float from_one) {
  return std::copysign(a < 1.0f ? ErfBelowOne(a) : from_one, x);
}
inline float VectorErf(float x) {
  const float a = ErfMagnitude(x);
  return ErfOfParts(x, a, ErfFromOne(a));
}

// e^(a^2) erfc(a) for a in [1, 4] (any a in the lanes whose result is discarded): P(a - 2.5), a fit weighted
// by e^(-a^2) made for this file (what erf's result sees is erfc's absolute error: at most 2.4e-9, a
// twelfth of half an ulp of erf there). GELU's derivative multiplies it by the e^(-a^2) its pdf term needs
// anyway: one exponential for both, where ErfFromOne takes one of its own.
inline float ScaledErfcFromOne(float a) {
  const float t = a - 2.5f;
  float p = std::fma(1.06843218e-4f, t, 2.25062831e-4f);
  p = std::fma(p, t, 5.43320028e-4f);
  p = std::fma(p, t, -6.61120517e-4f);
  p = std::fma(p, t, 2.30250321e-3f);
  p = std::fma(p, t, -8.13225191e-3f);
  p = std::fma(p, t, 2.49146260e-2f);
  p = std::fma(p, t, -7.43421838e-2f);
  return std::fma(p, t, 2.10807607e-1f);
}

// GELU, x Phi(x) = (0.5 x) (1 + erf(x / sqrt 2)), and its derivative Phi(x) + x phi(x) =
// 0.5 (1 + erf(x / sqrt 2)) + x e^(-x^2/2) / sqrt(2 pi), from erf(x / sqrt 2) and e^(-x^2/2): the operations
// of the formulas each rounded to T in turn (the constants too), for f32 here and for f64 (element_ops.h).
inline constexpr double kGeluErfScale = 0.70710678118654752440;  // 1 / sqrt 2
inline constexpr double kGeluPdfScale = 0.39894228040143267794;  // 1 / sqrt(2 pi)
template <typename T>
T GeluOfParts(T x, T erf_of_scaled) {
  return (T{0.5} * x) * (T{1} + erf_of_scaled);
}
template <typename T>
T GeluDerivativeOfParts(T x, T erf_of_scaled, T exp_of_half_square) {
  return (erf_of_scaled + T{1}) * T{0.5} + x * (exp_of_half_square * static_cast<T>(kGeluPdfScale));
}
inline float VectorGelu(float x) { return GeluOfParts(x, VectorErf(x * static_cast<float>(kGeluErfScale))); }
// The derivative's e^(-x^2/2) is e^(-z^2), z = x / sqrt 2 rounded (a relative difference of ~x^2 2^-24),
// and serves erf(z) from 1 on as e^(-z^2) (e^(z^2) erfc(z)): one exponential, where erf's own and the pdf's
// took two. `from_one` false: for lanes known to have |z| < 1 (an array's runs of them skip P), the same bits
// there.
[[gnu::always_inline]] inline float GeluDerivativeWithErfFrom(float x, bool from_one) {
  const float z = x * static_cast<float>(kGeluErfScale);
  const float e = VectorExp(-(z * z));
  const float a = ErfMagnitude(z);  // beyond 4, e P(4) < erfc(4) rounds away: erf is 1
  const float below_one = ErfBelowOne(a);
  const float erf = std::copysign(from_one && !(a < 1.0f) ? 1.0f - e * ScaledErfcFromOne(a) : below_one, z);
  return GeluDerivativeOfParts(x, erf, e);
}
inline float VectorGeluDerivative(float x) { return GeluDerivativeWithErfFrom(x, true); }

// The functions over arrays, out[i] = f(x[i]) for i < n, as the kernels run them: each compiled for
// x86-64-v4, v3 and the baseline x86-64, the CPU's best chosen when the program is loaded (2-3x the
// baseline's 4 lanes). Every version computes the scalar function's bits (the same IEEE operations in
// the same order, fused multiply-adds only where written: no contraction, no approximate reciprocal),
// so the choice never changes a result.
void VectorExp(const float* x, int64_t n, float* out);
void VectorLog(const float* x, int64_t n, float* out);
void VectorTanh(const float* x, int64_t n, float* out);
void VectorLogistic(const float* x, int64_t n, float* out);
void VectorErf(const float* x, int64_t n, float* out);
void VectorGeluDerivative(const float* x, int64_t n, float* out);
void VectorGelu(const float* x, int64_t n, float* out);
// sum[i] += x[i] for i < n, compiled the same way.
void AddTo(float* sum, const float* x, int64_t n);
void AddTo(double* sum, const double* x, int64_t n);

}  // namespace lazyrt::pjrt
