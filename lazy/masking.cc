// masked_fill, tril and triu: a select against a mask, the triangular masks built on the device from
// iota comparisons (they fuse into the select's loop; no mask is made on the host).
#include "absl/strings/str_cat.h"
#include "ir/shape_inference.h"
#include "lazy/tensor.h"
#include "lazy/tracing.h"

namespace lazyrt {

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value, SourceLocation loc) {
  detail::CommonDevice({&x, &mask}, "masked_fill", loc);
  if (mask.dtype() != DType::kBool) {
    throw Error(absl::StrCat("masked_fill: the mask must be bool, got ", mask.shape().ToString()), loc);
  }
  // As torch, the mask broadcasts to x, never x to the mask.
  absl::StatusOr<ir::Dims> both = ir::BroadcastDims(mask.dims(), x.dims());
  if (!both.ok() || *both != x.dims()) {
    throw Error(
        absl::StrCat("masked_fill: the mask ", mask.shape().ToString(), " must broadcast to x ", x.shape().ToString()),
        loc);
  }
  return where(mask, full({}, value, x.dtype(), x.device(), loc), x, loc);
}

namespace {
// x where (column - row) compares with `diagonal` as `keep` says, else 0, over the last two dims.
Tensor Triangle(const Tensor& x, int64_t diagonal, bool lower, const char* op, const SourceLocation& loc) {
  if (x.rank() < 2) {
    throw Error(absl::StrCat(op, ": needs a tensor of at least 2 dimensions, got ", x.shape().ToString()), loc);
  }
  const int64_t rows = x.dim(-2), cols = x.dim(-1);
  const Tensor row = reshape(arange(0, rows, 1, DType::kI64, x.device(), loc), {rows, 1}, loc);
  const Tensor col = reshape(arange(0, cols, 1, DType::kI64, x.device(), loc), {1, cols}, loc);
  const Tensor offset = col - TensorArg(row, loc);  // [rows, cols]: which diagonal each element is on
  const Scalar d = Scalar::Static(static_cast<double>(diagonal));
  const Tensor keep = lower ? le(offset, d, loc) : ge(offset, d, loc);
  return where(keep, x, zeros({}, x.dtype(), x.device(), loc), loc);
}
}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal, SourceLocation loc) { return Triangle(x, diagonal, true, "tril", loc); }
Tensor triu(const Tensor& x, int64_t diagonal, SourceLocation loc) { return Triangle(x, diagonal, false, "triu", loc); }

}  // namespace lazyrt
