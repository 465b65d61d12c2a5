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

// How a row-major BLAS interface reads a view of rows x cols: untransposed with leading dimension
// row_stride, or transposed with leading dimension col_stride. Nothing for other strides, or for a
// leading dimension beyond int (CBLAS's limit).
struct RowMajorOperand {
  bool transposed;
  int64_t ld;
};
std::optional<RowMajorOperand> AsRowMajor(int64_t row_stride, int64_t col_stride, int64_t rows, int64_t cols);

// The libraries a DOT or attention kernel can run on, stored in the executable (proto::Kernel.gemm_library). Each
// rounds differently, so the choice is a function of the machine (its GEMM tuning record,
// pjrt_sim/gemm_tuning.h, else the CPU's features: PreferredGemmLibrary), never of one compile's timing:
// two processes compiling the same graph on one machine must compute the same bits.
// Numbers are stored: never reuse one.
//   kBlis      BLIS 0.9 (Debian's serial build, linked statically)
//   kOpenBlas  OpenBLAS 0.3 (its AVX-512 kernels on SkylakeX and later), called single-threaded
//   kOneDnn    oneDNN 2.6 (its JIT kernels for the CPU it runs on; bf16 on AVX512-BF16 / AMX), called
//              single-threaded; f32 through its BLAS interface (dnnl_sgemm), bf16 through its matmul
//              primitive; f64 runs on BLIS (oneDNN has no f64 GEMM)
//   kOneDnnMatmul  oneDNN 2.6 as kOneDnn, but f32 through its matmul primitive too (brgemm kernels on
//              AVX-512), which adds a DOT's bias as it stores the product. Faster on some shapes, slower on
//              most: on one Zen 4 core, the GPT's MLP down-projection 4096x128x512 at 101 GFLOP/s against
//              sgemm's 92, its weight gradients at 79-90 against 102-106 (gemm_backends, RESULTS.md)
//   kLibxsmm   libxsmm 1.17: JIT kernels that take the operands as they are, without the packing a BLAS call
//              spends on each product. Fused attention's block products (64-128 x 32-128 x 32-128) at
//              103-114 GFLOP/s on one Zen 4 core, where oneDNN's sgemm reached 76-101; f32 and f64
enum class GemmLibrary : int32_t { kBlis = 0, kOpenBlas = 1, kOneDnn = 2, kOneDnnMatmul = 3, kLibxsmm = 4 };
inline constexpr GemmLibrary kGemmLibraries[] = {GemmLibrary::kBlis, GemmLibrary::kOpenBlas, GemmLibrary::kOneDnn,
                                                 GemmLibrary::kOneDnnMatmul, GemmLibrary::kLibxsmm};
// Whether `library` is oneDNN (either way of calling it): bf16 products run natively there.
inline bool IsOneDnn(GemmLibrary library) {
  return library == GemmLibrary::kOneDnn || library == GemmLibrary::kOneDnnMatmul;
}
std::optional<GemmLibrary> GemmLibraryFromNumber(int64_t number);
std::string_view GemmLibraryName(GemmLibrary library);
// The fastest library on this CPU kind, as measured on the MLP's and the GPT's GEMM shapes
// (benchmarks/RESULTS.md, gemm_backends): oneDNN where AVX-512 is present (1.1-1.3x OpenBLAS's SkylakeX
// kernels, 1.5-1.9x BLIS, on 14 of 16 shapes on an AVX-512 Xeon, and native bf16 there), BLIS
// otherwise (2.6x OpenBLAS on the layer-1 forward on an AVX2 Zen; oneDNN not measured there).
GemmLibrary PreferredGemmLibrary();

// C[m,n] = A[m,k] * B[k,n] on the calling thread (every library single-threaded: the device
// parallelizes by splitting C into panels over its own pool, and no library's pool competes with it).
void Gemm(GemmLibrary library, int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
          MatrixView<float> c);
void Gemm(GemmLibrary library, int64_t m, int64_t n, int64_t k, MatrixView<const double> a, MatrixView<const double> b,
          MatrixView<double> c);

// The same through one library, each in its own file (gemm_blis.cc, gemm_openblas.cc, gemm_onednn.cc,
// gemm_libxsmm.cc).
// The OpenBLAS, oneDNN and libxsmm entries return false for views their row-major interface cannot express
// (AsRowMajor), types they lack or shapes they refuse (k = 0 among them: Gemm writes those zeros itself); Gemm then
// runs BLIS, which takes any strides.
void BlisGemm(int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
              MatrixView<float> c);
void BlisGemm(int64_t m, int64_t n, int64_t k, MatrixView<const double> a, MatrixView<const double> b,
              MatrixView<double> c);
bool OpenBlasGemm(int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
                  MatrixView<float> c);
bool OpenBlasGemm(int64_t m, int64_t n, int64_t k, MatrixView<const double> a, MatrixView<const double> b,
                  MatrixView<double> c);
bool OneDnnGemm(int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
                MatrixView<float> c);
void StartLibxsmm();  // libxsmm_init: see PrepareGemmLibraries
bool LibxsmmGemm(int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
                 MatrixView<float> c);
bool LibxsmmGemm(int64_t m, int64_t n, int64_t k, MatrixView<const double> a, MatrixView<const double> b,
                 MatrixView<double> c);
// With `bias`, C[m,n] = A B + bias[n] (bias added to each row, each sum rounded once: the bits of adding it
// to the product afterwards); false for k = 0 then.
bool OneDnnMatmulGemm(int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
                      MatrixView<float> c, const float* bias = nullptr);

// Called after a library call that may have created the library's own statics. oneDNN makes its JIT
// kernels on first use as statics, which exit() destroys in reverse order of creation: before the handler
// of whoever registered an exit handler earlier (lazy's runtime, which runs the pending work at exit and
// waits for the devices). Such a handler registers itself again from this hook so that it runs first.
void SetLibraryStaticsHook(void (*hook)());

// Starts the GEMM libraries as the runtime starts, before it registers its exit handler:
// - libxsmm registers its own exit handler (which frees its JIT code) as it starts, on its first call
//   unless started before; started here, that handler runs after the runtime's, which waits for the
//   devices still running libxsmm's code (on a device's stream, the first call registered it after the
//   runtime's, and a process ending with work in flight crashed in libxsmm's freed code);
// - the CPU's library (PreferredGemmLibrary) builds its process-wide state with one small product:
//   oneDNN's first call JIT-compiles its GEMM kernels, 20-30 ms once per process, which a process's first
//   step paid otherwise (a warm start's whole compile-free step, 0.4-0.5x a cold one's).
void PrepareGemmLibraries();

// C[m,n] (f32) = A[m,k] * B[k,n] with bf16 operands (raw bits) and f32 accumulation, on the calling
// thread, where the CPU multiplies bf16 natively (OneDnnHasBf16: AVX512-BF16 or AMX). False when it
// does not or oneDNN refuses the views; the caller then widens to f32.
bool OneDnnHasBf16();
bool OneDnnGemmBf16(int64_t m, int64_t n, int64_t k, MatrixView<const uint16_t> a, MatrixView<const uint16_t> b,
                    MatrixView<float> c);
// The same rounded once to bf16 by oneDNN as it stores C: to nearest even, as FloatToBf16, except that a
// NaN keeps its sign and high payload bits (FloatToBf16 makes every NaN 0x7fc0) and a subnormal f32 sum
// becomes a zero of its sign (VCVTNEPS2BF16 flushes them; FloatToBf16 keeps them).
bool OneDnnGemmBf16(int64_t m, int64_t n, int64_t k, MatrixView<const uint16_t> a, MatrixView<const uint16_t> b,
                    MatrixView<uint16_t> c);

}  // namespace lazyrt::pjrt
