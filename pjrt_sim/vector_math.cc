#include "pjrt_sim/vector_math.h"

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
LAZYRT_VECTOR_CLONES void VectorErf(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = VectorErf(x[i]);
}

}  // namespace lazyrt::pjrt
