#include <libxsmm.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "absl/container/flat_hash_map.h"
#include "pjrt_sim/kernels/gemm.h"
#include "pjrt_sim/kernels/thread_scratch.h"

namespace lazyrt::pjrt {
namespace {

// A JIT kernel of one shape: (m, n, k, lda, ldb, ldc, flags) in libxsmm's column-major terms.
using ShapeKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int>;

// libxsmm's JIT kernel for a shape, looked up once per shape and thread: libxsmm's registry is shared and
// locked inside the library, out of ThreadSanitizer's sight, so those lookups run one at a time in the
// process; the kernel it returns is plain code that reads A and B and writes C. nullptr where libxsmm
// has no JIT kernel for the shape.
template <typename Function, typename Dispatch>
Function KernelFor(const ShapeKey& key, Dispatch dispatch) {
  thread_local absl::flat_hash_map<ShapeKey, Function> kernels;
  if (const auto it = kernels.find(key); it != kernels.end()) return it->second;
  static std::mutex lookups;
  const std::lock_guard<std::mutex> lock(lookups);
  const Function kernel = dispatch();
  kernels.emplace(key, kernel);
  return kernel;
}

struct TransposedOperandScratch {};

// C[m,n] = A[m,k] B[k,n] (row-major views) through a libxsmm JIT kernel: row-major C = A B is column-major
// C^T = B^T A^T, so libxsmm's A is our B and its B our A. Its JIT multiplies a transposed B (our A stored
// transposed) but not a transposed A: our B stored transposed (attention's k^T) is first copied into a
// row-major scratch of the calling thread, k x n values against the product's m x n x k.
template <typename T>
bool LibxsmmGemmOf(int64_t m, int64_t n, int64_t k, MatrixView<const T> a, MatrixView<const T> b, MatrixView<T> c) {
  const std::optional<RowMajorOperand> oa = AsRowMajor(a.row_stride, a.col_stride, m, k),
                                       ob = AsRowMajor(b.row_stride, b.col_stride, k, n),
                                       oc = AsRowMajor(c.row_stride, c.col_stride, m, n);
  // k = 0: no JIT kernel (Gemm writes the zeros).
  if (k == 0 || !oa || !ob || !oc || oc->transposed || std::max({m, n, k}) > INT_MAX) return false;
  if (m == 0 || n == 0) return true;
  const T* b_rows = b.data;
  int64_t ldb = ob->ld;
  if (ob->transposed) {
    T* rows = static_cast<T*>(ThreadScratch<TransposedOperandScratch>(static_cast<size_t>(k * n) * sizeof(T)));
    // libxsmm's own transpose (column-major k x n, ld ldb, into n x k, ld n): 0.1 ns an element where a loop
    // took 0.4-0.7, which made the copies 10% of the GPT's attention.
    libxsmm_otrans(rows, b.data, sizeof(T), static_cast<libxsmm_blasint>(k), static_cast<libxsmm_blasint>(n),
                   static_cast<libxsmm_blasint>(ldb), static_cast<libxsmm_blasint>(n));
    b_rows = rows;
    ldb = n;
  }
  const int flags = oa->transposed ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
  const ShapeKey key{n, m, k, ldb, oa->ld, oc->ld, flags};
  const auto dispatch = [&] {
    const libxsmm_blasint lda_ = static_cast<libxsmm_blasint>(ldb), ldb_ = static_cast<libxsmm_blasint>(oa->ld),
                          ldc_ = static_cast<libxsmm_blasint>(oc->ld);
    const T alpha = 1, beta = 0;
    // No prefetch: a kernel that prefetches takes the next call's operands as three more arguments.
    const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
    if constexpr (std::is_same_v<T, float>) {
      return libxsmm_smmdispatch(static_cast<libxsmm_blasint>(n), static_cast<libxsmm_blasint>(m),
                                 static_cast<libxsmm_blasint>(k), &lda_, &ldb_, &ldc_, &alpha, &beta, &flags,
                                 &prefetch);
    } else {
      return libxsmm_dmmdispatch(static_cast<libxsmm_blasint>(n), static_cast<libxsmm_blasint>(m),
                                 static_cast<libxsmm_blasint>(k), &lda_, &ldb_, &ldc_, &alpha, &beta, &flags,
                                 &prefetch);
    }
  };
  using Function = std::conditional_t<std::is_same_v<T, float>, libxsmm_smmfunction, libxsmm_dmmfunction>;
  const Function kernel = KernelFor<Function>(key, dispatch);
  if (kernel == nullptr) return false;
  kernel(b_rows, a.data, c.data);
  return true;
}

}  // namespace

void StartLibxsmm() { libxsmm_init(); }

bool LibxsmmGemm(int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
                 MatrixView<float> c) {
  return LibxsmmGemmOf(m, n, k, a, b, c);
}

bool LibxsmmGemm(int64_t m, int64_t n, int64_t k, MatrixView<const double> a, MatrixView<const double> b,
                 MatrixView<double> c) {
  return LibxsmmGemmOf(m, n, k, a, b, c);
}

}  // namespace lazyrt::pjrt
