#include "ir/shape_inference.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace lazyrt::ir {

absl::StatusOr<int64_t> NormalizeDim(int64_t dim, int64_t rank) {
  if (dim < -rank || dim >= rank) {
    return absl::OutOfRangeError(absl::StrCat("dimension ", dim, " is out of range for a tensor of rank ", rank,
                                              rank > 0 ? absl::StrCat(" (valid: ", -rank, " to ", rank - 1, ")") : ""));
  }
  return dim < 0 ? dim + rank : dim;
}

absl::StatusOr<Dims> BroadcastDims(std::span<const int64_t> a, std::span<const int64_t> b) {
  const size_t rank = std::max(a.size(), b.size());
  Dims out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", DimsToString(a), " and ", DimsToString(b),
                                                     " cannot be broadcast together (dimension ", i, ": ", da, " vs ",
                                                     db, ")"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {
int Category(DType d) {
  if (d == DType::kBool) return 0;
  return IsIntegral(d) ? 1 : 2;
}
}  // namespace

DType ResultType(const Shape& a, const Shape& b) {
  const bool a_zero_dim = a.rank() == 0, b_zero_dim = b.rank() == 0;
  if (a_zero_dim == b_zero_dim) return PromoteTypes(a.dtype(), b.dtype());
  const DType dimensioned = a_zero_dim ? b.dtype() : a.dtype();
  const DType zero_dim = a_zero_dim ? a.dtype() : b.dtype();
  return Category(zero_dim) > Category(dimensioned) ? PromoteTypes(dimensioned, zero_dim) : dimensioned;
}

absl::StatusOr<Shape> InferElementwise(OpKind op, std::span<const Shape* const> operands) {
  // Select's condition is bool; its value operands decide the dtype.
  const size_t first_value = op == OpKind::kSelect ? 1 : 0;
  const DType dtype = operands[first_value]->dtype();
  for (size_t i = first_value + 1; i < operands.size(); ++i) {
    if (operands[i]->dtype() != dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("operand dtypes differ: ", operands[first_value]->ToString(), " vs ", operands[i]->ToString()));
    }
  }
  // Arithmetic on truth values has no single meaning (PyTorch: + is or, - an error): refused.
  const bool arithmetic = op == OpKind::kAdd || op == OpKind::kSub || op == OpKind::kMul || op == OpKind::kDiv ||
                          op == OpKind::kPow || op == OpKind::kNeg;
  if (arithmetic && dtype == DType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat("arithmetic on bool values (", operands[first_value]->ToString(),
                     "); cast to an integer or floating dtype first, or use logical_and/logical_or/logical_not"));
  }
  if (op == OpKind::kSelect && operands[0]->dtype() != DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat("the condition must be bool, got ", operands[0]->ToString()));
  }
  Dims dims = operands[0]->dims();
  for (size_t i = 1; i < operands.size(); ++i) {
    absl::StatusOr<Dims> b = BroadcastDims(dims, operands[i]->dims());
    if (!b.ok()) {
      std::string all;
      for (size_t j = 0; j < operands.size(); ++j) {
        absl::StrAppend(&all, j ? " and " : "", operands[j]->ToString());
      }
      return absl::InvalidArgumentError(absl::StrCat("shapes ", all, " cannot be broadcast together"));
    }
    dims = *std::move(b);
  }
  return Shape(IsComparison(op) ? DType::kBool : dtype, std::move(dims));
}

absl::StatusOr<Shape> InferMatMul(const Shape& a, const Shape& b, bool transpose_a, bool transpose_b) {
  if (a.rank() < 2 || b.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("matmul needs operands of rank >= 2, got ", a.ToString(), " and ", b.ToString()));
  }
  if (a.dtype() != b.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("matmul operand dtypes differ: ", a.ToString(), " vs ", b.ToString()));
  }
  const int64_t m = a.dim(a.rank() - (transpose_a ? 1 : 2));
  const int64_t ka = a.dim(a.rank() - (transpose_a ? 2 : 1));
  const int64_t kb = b.dim(b.rank() - (transpose_b ? 1 : 2));
  const int64_t n = b.dim(b.rank() - (transpose_b ? 2 : 1));
  if (ka != kb) {
    return absl::InvalidArgumentError(absl::StrCat("matmul contraction sizes differ: ", a.ToString(), " x ",
                                                   b.ToString(), " (", ka, " vs ", kb, ")"));
  }
  absl::StatusOr<Dims> batch =
      BroadcastDims(std::span(a.dims()).first(a.rank() - 2), std::span(b.dims()).first(b.rank() - 2));
  if (!batch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("matmul batch dimensions of ", a.ToString(), " and ", b.ToString(),
                                                   " cannot be broadcast together"));
  }
  Dims out = *std::move(batch);
  out.push_back(m);
  out.push_back(n);
  return Shape(a.dtype(), std::move(out));
}

Shape InferReduce(const Shape& in, std::span<const int64_t> dims, bool keepdim, DType out_dtype) {
  Dims out;
  for (int64_t i = 0; i < in.rank(); ++i) {
    const bool reduced = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (!reduced) {
      out.push_back(in.dim(i));
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return Shape(out_dtype, std::move(out));
}

absl::StatusOr<Shape> InferReshape(const Shape& in, std::span<const int64_t> sizes) {
  Dims out(sizes.begin(), sizes.end());
  int64_t known = 1;
  int infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer_at >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("reshape to ", DimsToString(sizes), ": only one dimension may be -1"));
      }
      infer_at = static_cast<int>(i);
    } else if (out[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("reshape to ", DimsToString(sizes), ": negative size ", out[i]));
    } else {
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    if (known == 0 || in.numel() % known != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot reshape ", in.ToString(), " (", in.numel(), " elements) to ", DimsToString(sizes)));
    }
    out[static_cast<size_t>(infer_at)] = in.numel() / known;
    known = in.numel();
  }
  if (known != in.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", in.ToString(), " (", in.numel(), " elements) to ",
                                                   DimsToString(sizes), " (", known, " elements)"));
  }
  return Shape(in.dtype(), std::move(out));
}

absl::StatusOr<Shape> InferPermute(const Shape& in, std::span<const int64_t> perm) {
  if (static_cast<int64_t>(perm.size()) != in.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("permutation ", DimsToString(perm), " has ", perm.size(), " entries for ", in.ToString()));
  }
  // A plain vector: moving an InlinedVector here trips a false -Wmaybe-uninitialized in GCC 12.
  std::vector<int64_t> out;
  std::vector<bool> seen(perm.size(), false);
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= in.rank() || seen[static_cast<size_t>(perm[i])]) {
      return absl::InvalidArgumentError(
          absl::StrCat(DimsToString(perm), " is not a permutation of the dimensions of ", in.ToString()));
    }
    seen[static_cast<size_t>(perm[i])] = true;
    out.push_back(in.dim(perm[i]));
  }
  return Shape(in.dtype(), std::span<const int64_t>(out));
}

absl::StatusOr<Shape> InferExpand(const Shape& in, std::span<const int64_t> sizes) {
  if (static_cast<int64_t>(sizes.size()) < in.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot expand ", in.ToString(), " to fewer dimensions ", DimsToString(sizes)));
  }
  const size_t lead = sizes.size() - static_cast<size_t>(in.rank());
  Dims out(sizes.begin(), sizes.end());
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t have = i < lead ? 1 : in.dim(static_cast<int64_t>(i - lead));
    if (sizes[i] == -1 && i >= lead) {
      out[i] = have;
    } else if (have != 1 && have != sizes[i]) {
      return absl::InvalidArgumentError(absl::StrCat("cannot expand ", in.ToString(), " to ", DimsToString(sizes),
                                                     " (dimension ", i, ": ", have, " vs ", sizes[i], ")"));
    } else if (sizes[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot expand ", in.ToString(), " to ", DimsToString(sizes)));
    }
  }
  return Shape(in.dtype(), std::move(out));
}

absl::StatusOr<Shape> InferSlice(const Shape& in, std::span<const int64_t> start, std::span<const int64_t> limit,
                                 std::span<const int64_t> stride) {
  const size_t rank = static_cast<size_t>(in.rank());
  if (start.size() != rank || limit.size() != rank || stride.size() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice of ", in.ToString(), " needs ", rank, " starts, limits and strides"));
  }
  Dims out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t size = in.dims()[i];
    if (stride[i] <= 0 || start[i] < 0 || limit[i] < start[i] || limit[i] > size) {
      return absl::OutOfRangeError(absl::StrCat("slice [", start[i], ":", limit[i], ":", stride[i], "] of dimension ",
                                                i, " of ", in.ToString(), " is out of range"));
    }
    out[i] = (limit[i] - start[i] + stride[i] - 1) / stride[i];
  }
  return Shape(in.dtype(), std::move(out));
}

absl::StatusOr<Shape> InferConcat(std::span<const Shape> inputs, int64_t axis) {
  if (inputs.empty()) return absl::InvalidArgumentError("concat needs at least one tensor");
  const Shape& first = inputs[0];
  Dims out = first.dims();
  out[static_cast<size_t>(axis)] = 0;
  for (const Shape& s : inputs) {
    bool fits = s.rank() == first.rank() && s.dtype() == first.dtype();
    for (int64_t i = 0; fits && i < s.rank(); ++i) fits = i == axis || s.dim(i) == first.dim(i);
    if (!fits) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot concatenate ", first.ToString(), " and ", s.ToString(), " along dimension ", axis));
    }
    out[static_cast<size_t>(axis)] += s.dim(axis);
  }
  return Shape(first.dtype(), std::move(out));
}

absl::StatusOr<Shape> InferIndexSelect(const Shape& in, int64_t axis, const Shape& index) {
  if (!IsIntegral(index.dtype()) || index.rank() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("index_select needs a 1-D integer index, got ", index.ToString()));
  }
  Dims out = in.dims();
  out[static_cast<size_t>(axis)] = index.dim(0);
  return Shape(in.dtype(), std::move(out));
}

absl::StatusOr<Shape> InferGather(const Shape& in, int64_t axis, const Shape& index) {
  bool fits = IsIntegral(index.dtype()) && index.rank() == in.rank();
  for (int64_t i = 0; fits && i < in.rank(); ++i) fits = i == axis || index.dim(i) <= in.dim(i);
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("gather along dimension ", axis, " of ", in.ToString(),
                                                   " needs an integer index of the same rank, no larger "
                                                   "outside that dimension; got ",
                                                   index.ToString()));
  }
  return Shape(in.dtype(), index.dims());
}

namespace {
// The sizes of an attention's operands: batch dims, L, S, E, Ev.
struct AttentionSizes {
  Dims batch;
  int64_t l = 0, s = 0, e = 0, ev = 0;
};

absl::StatusOr<AttentionSizes> CheckAttention(const Shape& q, const Shape& k, const Shape& v, const Shape* mask) {
  const std::string shapes = absl::StrCat("q ", q.ToString(), ", k ", k.ToString(), ", v ", v.ToString(),
                                          mask ? absl::StrCat(", mask ", mask->ToString()) : "");
  if (q.rank() < 2 || k.rank() < 2 || v.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("needs q [..., L, E], k [..., S, E] and v [..., S, Ev] of rank >= 2, got ", shapes));
  }
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype() ||
      (q.dtype() != DType::kF32 && q.dtype() != DType::kF64 && q.dtype() != DType::kBF16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("needs q, k and v of one dtype, f32, f64 or bf16 (convert f16 first), got ", shapes));
  }
  AttentionSizes sz;
  sz.l = q.dim(q.rank() - 2);
  sz.e = q.dim(q.rank() - 1);
  sz.s = k.dim(k.rank() - 2);
  sz.ev = v.dim(v.rank() - 1);
  if (k.dim(k.rank() - 1) != sz.e || v.dim(v.rank() - 2) != sz.s) {
    return absl::InvalidArgumentError(absl::StrCat(
        "needs q [..., L, E], k [..., S, E] and v [..., S, Ev] (k's last dim = E, v's second-to-last = S), got ",
        shapes));
  }
  absl::StatusOr<Dims> qk =
      BroadcastDims(std::span(q.dims()).first(q.rank() - 2), std::span(k.dims()).first(k.rank() - 2));
  absl::StatusOr<Dims> batch = qk.ok() ? BroadcastDims(*qk, std::span(v.dims()).first(v.rank() - 2)) : qk.status();
  if (!batch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the batch dims of q, k and v cannot be broadcast: ", shapes));
  }
  sz.batch = *std::move(batch);
  if (mask != nullptr) {
    if (mask->dtype() != DType::kBool && mask->dtype() != q.dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the mask must be bool or q's dtype ", DTypeName(q.dtype()), ", got ", shapes));
    }
    Dims scores = sz.batch;
    scores.push_back(sz.l);
    scores.push_back(sz.s);
    bool fits = mask->rank() <= static_cast<int64_t>(scores.size());
    for (int64_t i = 0; fits && i < mask->rank(); ++i) {
      const int64_t d = mask->dim(mask->rank() - 1 - i);
      fits = d == 1 || d == scores[scores.size() - 1 - static_cast<size_t>(i)];
    }
    if (!fits) {
      return absl::InvalidArgumentError(
          absl::StrCat("the mask must broadcast to the scores ", DimsToString(scores), " [..., L, S], got ", shapes));
    }
  }
  return sz;
}

// n = a * b + c ..., or an error if the product overflows.
absl::StatusOr<int64_t> CheckedSize(std::initializer_list<std::pair<int64_t, int64_t>> terms) {
  int64_t total = 0;
  for (auto [a, b] : terms) {
    int64_t product = 0;
    if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(total, product, &total)) {
      return absl::InvalidArgumentError("attention gradients too large to address");
    }
  }
  return total;
}
}  // namespace

absl::StatusOr<Shape> InferAttention(const Shape& q, const Shape& k, const Shape& v, const Shape* mask) {
  absl::StatusOr<AttentionSizes> sz = CheckAttention(q, k, v, mask);
  if (!sz.ok()) return sz.status();
  Dims out = std::move(sz->batch);
  out.push_back(sz->l);
  out.push_back(sz->ev + 1);
  // bf16 attention computes in f32, and its logsumexp needs f32's precision.
  return Shape(q.dtype() == DType::kBF16 ? DType::kF32 : q.dtype(), std::move(out));
}

absl::StatusOr<Shape> InferAttentionGrad(const Shape& q, const Shape& k, const Shape& v, const Shape* mask) {
  absl::StatusOr<AttentionSizes> sz = CheckAttention(q, k, v, mask);
  if (!sz.ok()) return sz.status();
  absl::StatusOr<int64_t> per_batch = CheckedSize({{sz->l, sz->e}, {sz->s, sz->e}, {sz->s, sz->ev}});
  if (!per_batch.ok()) return per_batch.status();
  Dims out = std::move(sz->batch);
  out.push_back(*per_batch);
  return Shape(q.dtype(), std::move(out));
}

absl::StatusOr<Shape> InferOneHot(const Shape& index, int64_t num_classes, DType dtype) {
  if (!IsIntegral(index.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("one_hot needs an integer index, got ", index.ToString()));
  }
  if (num_classes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("one_hot needs num_classes > 0, got ", num_classes));
  }
  Dims out = index.dims();
  out.push_back(num_classes);
  return Shape(dtype, std::move(out));
}

absl::StatusOr<Shape> InferScatterAdd(const Shape& x, int64_t axis, const Shape& index, const Shape& src) {
  bool fits = IsIntegral(index.dtype()) && index.rank() == x.rank() && src.rank() == x.rank();
  for (int64_t d = 0; fits && d < x.rank(); ++d) {
    fits = index.dim(d) <= src.dim(d) && (d == axis || index.dim(d) <= x.dim(d));
  }
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("scatter along dimension ", axis, " of ", x.ToString(),
                                                   " needs an integer index of the same rank as x and src, ",
                                                   "no larger than src, nor than x outside that dimension; got index ",
                                                   index.ToString(), " and src ", src.ToString()));
  }
  return x;
}

absl::StatusOr<Shape> InferIndexAdd(const Shape& x, int64_t axis, const Shape& index, const Shape& src) {
  bool fits = IsIntegral(index.dtype()) && index.rank() <= 1 && src.rank() == x.rank();
  for (int64_t d = 0; fits && d < x.rank(); ++d) fits = src.dim(d) == (d == axis ? index.numel() : x.dim(d));
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("index_add along dimension ", axis, " of ", x.ToString(),
                                                   " needs a 1-D integer index and a source of x's shape with the "
                                                   "index's length along that dimension; got index ",
                                                   index.ToString(), " and source ", src.ToString()));
  }
  return x;
}

absl::StatusOr<Shape> InferNormalize(const Shape& in, std::span<const int64_t> normalized_shape) {
  if (!IsFloating(in.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("needs a floating-point input, got ", in.ToString()));
  }
  if (normalized_shape.empty()) {
    return absl::InvalidArgumentError("normalized_shape must have at least one dimension, got []");
  }
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  bool fits = k <= in.rank();
  for (int64_t i = 0; fits && i < k; ++i) fits = in.dim(in.rank() - k + i) == normalized_shape[static_cast<size_t>(i)];
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("normalized_shape ", DimsToString(normalized_shape),
                                                   " must be the trailing dims of the input, got ", in.ToString()));
  }
  return in;
}

}  // namespace lazyrt::ir
