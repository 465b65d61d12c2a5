// What the DOT kernel tests share: a product's shape and the DOT kernel that computes it.
#pragma once

#include <cmath>
#include <cstdint>

#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/kernels/gemm.h"

namespace lazyrt::pjrt {

struct Product {
  int64_t batch, m, n, k;
  bool transpose_lhs, transpose_rhs;
  bool broadcast_rhs;  // one B for every batch (batch stride 0)
};

// The DOT kernel of `p` in `variant` on `library`, its operands packed (batch strides m k and k n).
inline proto::Kernel DotKernel(const Product& p, int64_t variant, GemmLibrary library) {
  proto::Kernel kernel;
  kernel.set_kind(proto::Kernel::DOT);
  kernel.set_batch(p.batch);
  kernel.set_m(p.m);
  kernel.set_n(p.n);
  kernel.set_k(p.k);
  kernel.set_transpose_lhs(p.transpose_lhs);
  kernel.set_transpose_rhs(p.transpose_rhs);
  kernel.set_lhs_batch_stride(p.m * p.k);
  kernel.set_rhs_batch_stride(p.broadcast_rhs ? 0 : p.k * p.n);
  kernel.set_variant(variant);
  kernel.set_gemm_library(static_cast<int32_t>(library));
  return kernel;
}

// Row i of op(A) times column j of op(B) in f64, where every product of two f32 (or narrower) values
// is exact: the sum of the products, and the sum of their magnitudes (for a tolerance). `to_double`
// reads an element.
struct ExactDot {
  double value = 0, magnitude = 0;
};
template <typename T, typename ToDouble>
ExactDot ExactDotAt(const T* a, const T* b, const Product& p, int64_t i, int64_t j, ToDouble to_double) {
  ExactDot r;
  for (int64_t q = 0; q < p.k; ++q) {
    const double x = to_double(a[p.transpose_lhs ? q * p.m + i : i * p.k + q]);
    const double y = to_double(b[p.transpose_rhs ? j * p.k + q : q * p.n + j]);
    r.value += x * y;
    r.magnitude += std::abs(x * y);
  }
  return r;
}

}  // namespace lazyrt::pjrt
