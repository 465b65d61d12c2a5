#include <cblas.h>

#include <algorithm>
#include <mutex>

#include "pjrt_sim/kernels/gemm.h"

namespace lazyrt::pjrt {
namespace {

// How CBLAS reads a view (AsRowMajor).
struct CblasOperand {
  CBLAS_TRANSPOSE trans;
  blasint ld;
};

template <typename T>
bool Express(MatrixView<T> v, int64_t rows, int64_t cols, CblasOperand* out) {
  const std::optional<RowMajorOperand> op = AsRowMajor(v.row_stride, v.col_stride, rows, cols);
  if (!op) return false;
  *out = {op->transposed ? CblasTrans : CblasNoTrans, static_cast<blasint>(op->ld)};
  return true;
}

// OpenBLAS's own pool would run beside the device's on the same cores: every call runs on its caller.
void OpenBlasSingleThreaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

template <typename T, typename Call>
bool Run(int64_t m, int64_t n, int64_t k, MatrixView<const T> a, MatrixView<const T> b, MatrixView<T> c, Call call) {
  CblasOperand oa, ob, oc;
  // k = 0: CBLAS refuses a leading dimension of 0 (Gemm writes the zeros).
  if (k == 0 || !Express(a, m, k, &oa) || !Express(b, k, n, &ob) || !Express(c, m, n, &oc) ||
      oc.trans != CblasNoTrans) {
    return false;
  }
  OpenBlasSingleThreaded();
  call(oa, ob, oc);
  return true;
}

}  // namespace

bool OpenBlasGemm(int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
                  MatrixView<float> c) {
  return Run<float>(m, n, k, a, b, c, [&](CblasOperand oa, CblasOperand ob, CblasOperand oc) {
    cblas_sgemm(CblasRowMajor, oa.trans, ob.trans, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), 1.0f, a.data, oa.ld, b.data, ob.ld, 0.0f, c.data, oc.ld);
  });
}

bool OpenBlasGemm(int64_t m, int64_t n, int64_t k, MatrixView<const double> a, MatrixView<const double> b,
                  MatrixView<double> c) {
  return Run<double>(m, n, k, a, b, c, [&](CblasOperand oa, CblasOperand ob, CblasOperand oc) {
    cblas_dgemm(CblasRowMajor, oa.trans, ob.trans, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), 1.0, a.data, oa.ld, b.data, ob.ld, 0.0, c.data, oc.ld);
  });
}

}  // namespace lazyrt::pjrt
