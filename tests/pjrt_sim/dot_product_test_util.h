// What the DOT kernel tests share: a product's shape and the DOT kernel that computes it.
#pragma once

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

}  // namespace lazyrt::pjrt
