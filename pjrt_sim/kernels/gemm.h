// Dense matrix products through BLIS, kept behind this small interface so that BLIS's large header
// is compiled in one file only.
#pragma once

#include <cstdint>

namespace lazyrt::pjrt {

// A matrix view: element (i, j) is at data[i * row_stride + j * col_stride]. Transposes and panels
// are only strides and offsets.
template <typename T>
struct MatrixView {
  T* data;
  int64_t row_stride, col_stride;
};

// C[m,n] = A[m,k] * B[k,n] on the calling thread (BLIS's single-threaded build: the device
// parallelizes by splitting C into panels over its own pool).
void Gemm(int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b, MatrixView<float> c);
void Gemm(int64_t m, int64_t n, int64_t k, MatrixView<const double> a, MatrixView<const double> b,
          MatrixView<double> c);

}  // namespace lazyrt::pjrt
