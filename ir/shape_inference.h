// Output shapes of ops, computed when an op is traced. Each error says what did not fit, naming the
// shapes involved; the caller adds the op and the user's source location.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "ir/op_kind.h"
#include "ir/shape.h"

namespace lazyrt::ir {

// A dimension index in [-rank, rank) made non-negative.
absl::StatusOr<int64_t> NormalizeDim(int64_t dim, int64_t rank);
// NumPy broadcasting of two dimension lists.
absl::StatusOr<Dims> BroadcastDims(std::span<const int64_t> a, std::span<const int64_t> b);

// The dtype PyTorch computes a binary op on two tensors in (torch.result_type): a 0-dim tensor takes
// part in promotion only when its category (bool < integer < floating) is higher than the other
// operand's, so f32[3] + f64[] is f32, i32[3] + i64[] is i32 and i32[3] + f64[] is f64. Two operands of
// the same kind (both 0-dim or both not) promote as PromoteTypes.
DType ResultType(const Shape& a, const Shape& b);

// Elementwise ops with NumPy broadcasting. Binary ops require equal dtypes (the caller promotes);
// comparisons yield bool. The operands' shapes by pointer: tracing an op reads them where they are.
absl::StatusOr<Shape> InferElementwise(OpKind op, std::span<const Shape* const> operands);
// [..., m, k] x [..., k, n] -> [..., m, n], batch dims broadcast; 1-D operands as in numpy.matmul
// are the caller's business (it reshapes them).
absl::StatusOr<Shape> InferMatMul(const Shape& a, const Shape& b, bool transpose_a = false, bool transpose_b = false);
// `dims` must be normalized, unique and sorted.
Shape InferReduce(const Shape& in, std::span<const int64_t> dims, bool keepdim, DType out_dtype);
absl::StatusOr<Shape> InferReshape(const Shape& in, std::span<const int64_t> sizes);
absl::StatusOr<Shape> InferPermute(const Shape& in, std::span<const int64_t> perm);
absl::StatusOr<Shape> InferExpand(const Shape& in, std::span<const int64_t> sizes);
absl::StatusOr<Shape> InferSlice(const Shape& in, std::span<const int64_t> start, std::span<const int64_t> limit,
                                 std::span<const int64_t> stride);
absl::StatusOr<Shape> InferConcat(std::span<const Shape> inputs, int64_t axis);
absl::StatusOr<Shape> InferIndexSelect(const Shape& in, int64_t axis, const Shape& index);
absl::StatusOr<Shape> InferGather(const Shape& in, int64_t axis, const Shape& index);
// Scaled dot-product attention, q [..., L, E], k [..., S, E], v [..., S, Ev] of one dtype (f32, f64 or
// bf16), their batch dims broadcast together; `mask` (may be null) bool or q's dtype, broadcastable to
// [..., L, S] without growing it. The result packs the output and each row's logsumexp: [..., L, Ev + 1],
// f32 for bf16 operands (their attention computes in f32), else q's dtype.
absl::StatusOr<Shape> InferAttention(const Shape& q, const Shape& k, const Shape& v, const Shape* mask);
// The gradients of Attention, each batch element's dq [L, E], dk [S, E] and dv [S, Ev] flattened and laid
// end to end: [..., L*E + S*E + S*Ev] of q's dtype.
absl::StatusOr<Shape> InferAttentionGrad(const Shape& q, const Shape& k, const Shape& v, const Shape* mask);
absl::StatusOr<Shape> InferOneHot(const Shape& index, int64_t num_classes, DType dtype);
// scatter_add(x, axis, index, src): index and src of x's rank, index no larger than src anywhere nor
// than x outside axis (the caller passes src cut to index's dims); the result is x's shape.
absl::StatusOr<Shape> InferScatterAdd(const Shape& x, int64_t axis, const Shape& index, const Shape& src);
// index_add(x, axis, index, src): a 1-D integer index; src is x's shape with index's length along axis.
absl::StatusOr<Shape> InferIndexAdd(const Shape& x, int64_t axis, const Shape& index, const Shape& src);
// layer_norm / rms_norm: a floating tensor whose trailing dims are `normalized_shape` (non-empty). The
// result has the input's shape.
absl::StatusOr<Shape> InferNormalize(const Shape& in, std::span<const int64_t> normalized_shape);

}  // namespace lazyrt::ir
