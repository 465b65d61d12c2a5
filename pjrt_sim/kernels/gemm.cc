#include "pjrt_sim/kernels/gemm.h"

#include <algorithm>
#include <climits>
#include <type_traits>
#include <vector>

#include "pjrt_sim/cpu_isa.h"

namespace lazyrt::pjrt {

std::optional<RowMajorOperand> AsRowMajor(int64_t row_stride, int64_t col_stride, int64_t rows, int64_t cols) {
  if (col_stride == 1 && row_stride >= std::max<int64_t>(1, cols) && row_stride <= INT_MAX) {
    return RowMajorOperand{false, row_stride};
  }
  if (row_stride == 1 && col_stride >= std::max<int64_t>(1, rows) && col_stride <= INT_MAX) {
    return RowMajorOperand{true, col_stride};
  }
  return std::nullopt;
}

std::optional<GemmLibrary> GemmLibraryFromNumber(int64_t number) {
  for (GemmLibrary library : kGemmLibraries) {
    if (static_cast<int64_t>(library) == number) return library;
  }
  return std::nullopt;
}

std::string_view GemmLibraryName(GemmLibrary library) {
  switch (library) {
    case GemmLibrary::kBlis: return "blis";
    case GemmLibrary::kOpenBlas: return "openblas";
    case GemmLibrary::kOneDnn: return "onednn";
    case GemmLibrary::kOneDnnMatmul: return "onednn_matmul";
    case GemmLibrary::kLibxsmm: return "libxsmm";
  }
  return "?";
}

GemmLibrary PreferredGemmLibrary() {
  static const GemmLibrary preferred = HostHas("avx512f") ? GemmLibrary::kOneDnn : GemmLibrary::kBlis;
  return preferred;
}

namespace {

template <typename T>
void Dispatch(GemmLibrary library, int64_t m, int64_t n, int64_t k, MatrixView<const T> a, MatrixView<const T> b,
              MatrixView<T> c) {
  if (k == 0) {  // the product of nothing is zeros, here for every library (CBLAS and JIT kernels refuse k = 0)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c.data[i * c.row_stride + j * c.col_stride] = T{0};
    }
    return;
  }
  switch (library) {
    case GemmLibrary::kOpenBlas:
      if (OpenBlasGemm(m, n, k, a, b, c)) return;
      break;  // strides CBLAS cannot express
    case GemmLibrary::kOneDnn:
      if constexpr (std::is_same_v<T, float>) {
        if (OneDnnGemm(m, n, k, a, b, c)) return;
      }
      break;  // f64, or strides its row-major interface cannot express
    case GemmLibrary::kOneDnnMatmul:
      if constexpr (std::is_same_v<T, float>) {
        if (OneDnnMatmulGemm(m, n, k, a, b, c)) return;
      }
      break;  // f64, or strides the primitive refused
    case GemmLibrary::kLibxsmm:
      if (LibxsmmGemm(m, n, k, a, b, c)) return;
      break;  // strides it cannot express, or a shape without a JIT kernel
    case GemmLibrary::kBlis: break;
  }
  BlisGemm(m, n, k, a, b, c);
}

}  // namespace

void Gemm(GemmLibrary library, int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
          MatrixView<float> c) {
  Dispatch(library, m, n, k, a, b, c);
}

void Gemm(GemmLibrary library, int64_t m, int64_t n, int64_t k, MatrixView<const double> a, MatrixView<const double> b,
          MatrixView<double> c) {
  Dispatch(library, m, n, k, a, b, c);
}

void PrepareGemmLibraries() {
  StartLibxsmm();
  // 16x16x16: oneDNN multiplies a 1x1x1 product without building its kernels.
  constexpr int64_t kSide = 16;
  const std::vector<float> operand(kSide * kSide, 1.0f);
  std::vector<float> product(kSide * kSide);
  Gemm(PreferredGemmLibrary(), kSide, kSide, kSide, {operand.data(), kSide, 1}, {operand.data(), kSide, 1},
       {product.data(), kSide, 1});
}

}  // namespace lazyrt::pjrt
