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

// Whether any of x[0, m) times `scale` is at or above 1 in magnitude, or NaN: erf's part from 1 on is needed.
[[gnu::always_inline]] inline bool NeedsErfFromOne(const float* x, int64_t m, float scale) {
  int beyond = 0;
  for (int64_t i = 0; i < m; ++i) beyond |= !(std::fabs(x[i] * scale) < 1.0f);
  return beyond != 0;
}

// erf of a run of at most kRun elements, inlined into each clone of its callers.
// A run of elements all below 1 in magnitude (the usual inputs of GELU's erf(x / sqrt 2)) takes the
// polynomial alone: a vector loop computes both parts in every lane and selects, and the exp part is
// three quarters of the work. Another run is computed in three passes over it (log erfc, its exp, the
// select), each a short loop: one loop of the whole function left most of its time to the latency of
// each vector's chain through the polynomial and exp, which the passes' independent iterations overlap
// (0.70 -> 0.57 ns an element on one core of a Sapphire Rapids Xeon, GELU-like inputs in L1). Each element's
// bits are VectorErf's either way: the same operations.
[[gnu::always_inline]] inline void ErfRun(const float* x, int64_t m, float* out) {
  if (!NeedsErfFromOne(x, m, 1.0f)) {
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

// A run at a time, as VectorErf's: one whose elements all have |x / sqrt 2| < 1 (the GPT's pre-activations
// early in training, all of them) skips erf's part from 1 on.
LAZYRT_VECTOR_CLONES void VectorGeluDerivative(const float* x, int64_t n, float* out) {
  for (int64_t begin = 0; begin < n; begin += kRun) {
    const int64_t m = std::min(kRun, n - begin);
    const float* xs = x + begin;
    if (NeedsErfFromOne(xs, m, static_cast<float>(kGeluErfScale))) {
      for (int64_t i = 0; i < m; ++i) out[begin + i] = GeluDerivativeWithErfFrom(xs[i], true);
    } else {
      for (int64_t i = 0; i < m; ++i) out[begin + i] = GeluDerivativeWithErfFrom(xs[i], false);
    }
  }
}

}  // namespace lazyrt::pjrt
