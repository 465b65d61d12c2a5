#include <blis.h>

#include "pjrt_sim/kernels/gemm.h"

namespace lazyrt::pjrt {
namespace {

// BLIS takes non-const pointers to its inputs but only reads them.
template <typename T>
T* Mutable(const T* p) {
  return const_cast<T*>(p);
}

}  // namespace

void BlisGemm(int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
              MatrixView<float> c) {
  float one = 1.0f, zero = 0.0f;
  bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, Mutable(a.data), a.row_stride, a.col_stride,
            Mutable(b.data), b.row_stride, b.col_stride, &zero, c.data, c.row_stride, c.col_stride);
}

void BlisGemm(int64_t m, int64_t n, int64_t k, MatrixView<const double> a, MatrixView<const double> b,
              MatrixView<double> c) {
  double one = 1.0, zero = 0.0;
  bli_dgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, Mutable(a.data), a.row_stride, a.col_stride,
            Mutable(b.data), b.row_stride, b.col_stride, &zero, c.data, c.row_stride, c.col_stride);
}

}  // namespace lazyrt::pjrt
