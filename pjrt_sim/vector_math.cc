#include "pjrt_sim/vector_math.h"

#include <algorithm>

namespace lazyrt::pjrt {

LAZYRT_VECTOR_CLONES void VectorExp(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = VectorExp(x[i]);
}
LAZYRT_VECTOR_CLONES void VectorLog(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = VectorLog(x[i]);
}
LAZYRT_VECTOR_CLONES void VectorTanh(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = VectorTanh(x[i]);
}
LAZYRT_VECTOR_CLONES void VectorLogistic(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = VectorLogistic(x[i]);
}
LAZYRT_VECTOR_CLONES void AddTo(float* sum, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) sum[i] += x[i];
}
LAZYRT_VECTOR_CLONES void AddTo(double* sum, const double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) sum[i] += x[i];
}

namespace {
constexpr int64_t kRun = 64;

// erf of a run of at most kRun elements, inlined into each clone of its callers.
// A run of elements all below 1 in magnitude (the usual inputs of GELU's erf(x / sqrt 2)) takes the
// polynomial alone: a vector loop computes both parts in every lane and selects, and the exp part is
// three quarters of the work. Another run is computed in three passes over it (log erfc, its exp, the
// select), each a short loop: one loop of the whole function left most of its time to the latency of
// each vector's chain through the polynomial and exp, which the passes' independent iterations overlap
// (0.70 -> 0.57 ns an element on one core of a Sapphire Rapids Xeon, GELU-like inputs in L1). Each element's
// bits are VectorErf's either way: the same operations.
[[gnu::always_inline]] inline void ErfRun(const float* x, int64_t m, float* out) {
  int beyond = 0;  // lanes at or above 1, or NaN
  for (int64_t i = 0; i < m; ++i) beyond |= !(std::fabs(x[i]) < 1.0f);
  if (beyond == 0) {
    for (int64_t i = 0; i < m; ++i) out[i] = std::copysign(ErfBelowOne(std::fabs(x[i])), x[i]);
    return;
  }
  float a[kRun], from_one[kRun];
  for (int64_t i = 0; i < m; ++i) a[i] = ErfMagnitude(x[i]);
  for (int64_t i = 0; i < m; ++i) from_one[i] = LogErfc(a[i]);
  for (int64_t i = 0; i < m; ++i) from_one[i] = 1.0f - VectorExpInRange(from_one[i]);  // ErfFromOne(a[i])
  for (int64_t i = 0; i < m; ++i) out[i] = ErfOfParts(x[i], a[i], from_one[i]);
}
}  // namespace

LAZYRT_VECTOR_CLONES void VectorErf(const float* x, int64_t n, float* out) {
  for (int64_t begin = 0; begin < n; begin += kRun) ErfRun(x + begin, std::min(kRun, n - begin), out + begin);
}

// A run at a time: its erf as VectorErf's array loop, then the product.
LAZYRT_VECTOR_CLONES void VectorGelu(const float* x, int64_t n, float* out) {
  for (int64_t begin = 0; begin < n; begin += kRun) {
    const int64_t m = std::min(kRun, n - begin);
    const float* xs = x + begin;
    float scaled[kRun], erf[kRun];
    for (int64_t i = 0; i < m; ++i) scaled[i] = xs[i] * static_cast<float>(kGeluErfScale);
    ErfRun(scaled, m, erf);
    for (int64_t i = 0; i < m; ++i) out[begin + i] = GeluOfParts(xs[i], erf[i]);
  }
}

// A run at a time: its erf as VectorErf's array loop (the polynomial alone where the run allows), the
// exponential of the run, then the formula: a few short passes in L1 where GELU's gradient took a step of
// the fused program per operation of the formula over each block (13 of them, in its kernel).
LAZYRT_VECTOR_CLONES void VectorGeluDerivative(const float* x, int64_t n, float* out) {
  for (int64_t begin = 0; begin < n; begin += kRun) {
    const int64_t m = std::min(kRun, n - begin);
    const float* xs = x + begin;
    float scaled[kRun], erf[kRun], exps[kRun];
    for (int64_t i = 0; i < m; ++i) scaled[i] = xs[i] * static_cast<float>(kGeluErfScale);
    ErfRun(scaled, m, erf);
    for (int64_t i = 0; i < m; ++i) exps[i] = VectorExp(xs[i] * xs[i] * -0.5f);
    for (int64_t i = 0; i < m; ++i) out[begin + i] = GeluDerivativeOfParts(xs[i], erf[i], exps[i]);
  }
}

}  // namespace lazyrt::pjrt
