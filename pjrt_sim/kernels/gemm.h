// Dense matrix products through a GEMM library, kept behind this small interface so that each
// library's large header is compiled in one file only.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace lazyrt::pjrt {

// A matrix view: element (i, j) is at data[i * row_stride + j * col_stride]. Transposes and panels
// are only strides and offsets.
template <typename T>
struct MatrixView {
  T* data;
  int64_t row_stride, col_stride;
};

// The libraries a DOT kernel can run on, stored in the executable (proto::Kernel.gemm_library). Each
// rounds differently, so the choice is a function of the CPU's features (PreferredGemmLibrary), never
// of a timing: two processes compiling the same graph on one machine must compute the same bits.
// Numbers are stored: never reuse one.
//   kBlis      BLIS 0.9 (Debian's serial build, linked statically)
//   kOpenBlas  OpenBLAS 0.3 (its AVX-512 kernels on SkylakeX and later), called single-threaded
enum class GemmLibrary : int32_t { kBlis = 0, kOpenBlas = 1 };
inline constexpr GemmLibrary kGemmLibraries[] = {GemmLibrary::kBlis, GemmLibrary::kOpenBlas};
std::optional<GemmLibrary> GemmLibraryFromNumber(int64_t number);
std::string_view GemmLibraryName(GemmLibrary library);
// The faster library on this CPU, as measured on the MLP's GEMM shapes (benchmarks/RESULTS.md,
// gemm_backends): OpenBLAS where AVX-512 is present (its SkylakeX kernels ran 1.3-2.6x BLIS's on 6 of 7
// shapes on an AVX-512 Xeon), BLIS otherwise (2.6x OpenBLAS on the layer-1 forward on an AVX2 Zen).
GemmLibrary PreferredGemmLibrary();

// C[m,n] = A[m,k] * B[k,n] on the calling thread (every library single-threaded: the device
// parallelizes by splitting C into panels over its own pool, and no library's pool competes with it).
void Gemm(GemmLibrary library, int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
          MatrixView<float> c);
void Gemm(GemmLibrary library, int64_t m, int64_t n, int64_t k, MatrixView<const double> a, MatrixView<const double> b,
          MatrixView<double> c);

// The same through one library, each in its own file (gemm_blis.cc, gemm_openblas.cc). The OpenBLAS
// entry returns false for views its CBLAS interface cannot express (no unit stride, a leading
// dimension beyond int); Gemm then runs BLIS, which takes any strides.
void BlisGemm(int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
              MatrixView<float> c);
void BlisGemm(int64_t m, int64_t n, int64_t k, MatrixView<const double> a, MatrixView<const double> b,
              MatrixView<double> c);
bool OpenBlasGemm(int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
                  MatrixView<float> c);
bool OpenBlasGemm(int64_t m, int64_t n, int64_t k, MatrixView<const double> a, MatrixView<const double> b,
                  MatrixView<double> c);

}  // namespace lazyrt::pjrt
