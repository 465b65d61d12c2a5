// The ops a GPT and its mixture-of-experts routing need beyond the basic set: dropout, clamp, var/std,
// cumsum, sorting (topk, sort, argsort) and splitting (split, chunk, stack). Most are compositions of
// existing ops, whose gradients they inherit; cumsum and argsort are device ops of their own.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "ir/shape_inference.h"
#include "lazy/autograd.h"
#include "lazy/tensor.h"
#include "lazy/tracing.h"

namespace lazyrt {

using detail::Check;
using detail::Converted;
using detail::ImplOf;
using detail::MakeTensor;
using detail::Record;
using detail::RequireFloating;
using detail::ValueOf;
using ir::AttrKey;
using ir::OpKind;
using Grads = std::vector<Tensor>;

namespace {

std::vector<int64_t> SizesOf(const Tensor& x) { return {x.dims().begin(), x.dims().end()}; }

// x in reverse order along `dim` (a gather of the positions n-1, ..., 0).
Tensor Reversed(const Tensor& x, int64_t dim, const SourceLocation& loc) {
  const int64_t n = x.dim(dim);
  if (n <= 1) return x;
  return index_select(x, dim, arange(n - 1, -1, -1, DType::kI64, x.device(), loc), loc);
}

// An op along one dim of a 0-dim tensor: PyTorch takes dim 0 (or -1) as its one element; `fn` runs on
// the tensor as [1] and its result is made 0-dim again.
template <typename Fn>
Tensor OnScalarAsVector(const Tensor& x, int64_t dim, absl::string_view op, const SourceLocation& loc, Fn fn) {
  Check(ir::NormalizeDim(dim, 1), op, loc);
  return reshape(fn(reshape(x, {1}, loc)), {}, loc);
}

}  // namespace

// ---- Regularization and bounds -------------------------------------------------------------------------

Tensor dropout(const Tensor& x, double p, bool training, SourceLocation loc) {
  RequireFloating(x, "dropout", loc);
  if (!(p >= 0 && p <= 1)) {
    throw Error(absl::StrCat("dropout: probability p = ", p, " is outside [0, 1]"), loc);
  }
  if (!training || p == 0) return x;
  // As PyTorch: x * 0, so a NaN or infinite input stays NaN, and the gradient is 0.
  if (p == 1) return x * TensorArg(zeros({}, x.dtype(), x.device(), loc), loc);
  // p and the scale are device parameters: another p is another value, not another graph.
  const DType draw = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  Tensor keep = ge(rand(SizesOf(x), Scalar::Static(0.0), Scalar::Static(1.0), draw, x.device(), loc), Scalar(p), loc);
  Tensor mask = cast(keep, x.dtype(), loc) * ScalarArg(Scalar(1.0 / (1.0 - p)), loc);
  // The product's gradient is g * mask: the forward's mask, never a second draw.
  return x * TensorArg(mask, loc);
}

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max, SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "clamp", loc);
  if (!min.has_value() && !max.has_value()) throw Error("clamp: at least one of min and max must be given", loc);
  const DType in = impl.shape.dtype();
  if (in == DType::kBool) throw Error(absl::StrCat("clamp: not defined for ", impl.shape.ToString()), loc);
  // PyTorch's promotion with scalar bounds: an integer tensor with a fractional bound computes in f32.
  DType t = in;
  for (const std::optional<Scalar>& bound : {min, max}) {
    if (!ir::IsFloating(t) && bound.has_value() && !bound->is_integral()) t = DType::kF32;
  }
  Tensor out;
  {
    // The gradient is clamp's own (below), not that of the maximum and minimum computing the value.
    NoGradGuard no_grad;
    out = cast(x, t, loc);
    if (min.has_value()) out = maximum(out, full({}, *min, t, x.device(), loc), loc);
    if (max.has_value()) out = minimum(out, full({}, *max, t, x.device(), loc), loc);
  }
  if (!ir::IsFloating(in)) return out;
  return Record(
      out, "clamp", {x},
      [min, max, loc](const Tensor& g, const Tensor&, const Grads& xs) -> Grads {
        // As PyTorch's clamp_backward: the gradient passes where min <= x <= max, bounds included.
        const Tensor& x = xs[0];
        std::optional<Tensor> inside;
        if (min.has_value()) inside = ge(x, *min, loc);
        if (max.has_value()) inside = inside ? logical_and(*inside, le(x, *max, loc), loc) : le(x, *max, loc);
        return {where(*inside, g, zeros({}, g.dtype(), g.device(), loc), loc)};
      },
      loc);
}

// ---- Statistics --------------------------------------------------------------------------------------------

Tensor var(const Tensor& x, std::vector<int64_t> dims, double correction, bool keepdim, SourceLocation loc) {
  RequireFloating(x, "var", loc);
  if (!std::isfinite(correction)) throw Error(absl::StrCat("var: correction must be finite, got ", correction), loc);
  dims = detail::ReductionDims(x.shape(), std::move(dims), "var", loc);
  int64_t count = 1;
  for (int64_t d : dims) count *= x.dim(d);
  // Two passes: the squared deviations from the mean, not E[x^2] - E[x]^2, which cancels catastrophically
  // when the mean is large against the spread.
  Tensor deviation = x - TensorArg(mean(x, dims, true, loc), loc);
  Tensor squares = sum(deviation * TensorArg(deviation, loc), dims, keepdim, loc);
  // As PyTorch: divisor max(0, N - correction); 0 gives inf (or NaN for no spread), not an error.
  return squares / ScalarArg(Scalar::Static(std::max(0.0, static_cast<double>(count) - correction)), loc);
}

Tensor std(const Tensor& x, std::vector<int64_t> dims, double correction, bool keepdim, SourceLocation loc) {
  return sqrt(var(x, std::move(dims), correction, keepdim, loc), loc);
}

// ---- Scans and sorting ---------------------------------------------------------------------------------------

Tensor cumsum(const Tensor& x, int64_t dim, SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "cumsum", loc);
  if (impl.shape.rank() == 0) {
    return OnScalarAsVector(x, dim, "cumsum", loc, [&](const Tensor& v) { return cumsum(v, 0, loc); });
  }
  const int64_t d = Check(ir::NormalizeDim(dim, impl.shape.rank()), "cumsum", loc);
  const DType t = ir::IsFloating(impl.shape.dtype()) ? impl.shape.dtype() : DType::kI64;
  Tensor out = MakeTensor(OpKind::kCumsum, {Converted(ValueOf(x), t, loc)}, impl.shape.WithDType(t), impl.device, loc,
                          ir::Attributes{{AttrKey::kAxis, d}});
  if (!ir::IsFloating(t)) return out;
  return Record(
      out, "cumsum", {x},
      [d, loc](const Tensor& g, const Tensor&, const Grads&) -> Grads {
        // out[j] sums x[i] for i <= j, so x[i] receives the sum of g[j] for j >= i: a reversed cumsum.
        return {Reversed(cumsum(Reversed(g, d, loc), d, loc), d, loc)};
      },
      loc);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool /*stable*/, SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "argsort", loc);
  if (impl.shape.rank() == 0) {
    return OnScalarAsVector(x, dim, "argsort", loc,
                            [&](const Tensor& v) { return argsort(v, 0, descending, true, loc); });
  }
  const int64_t d = Check(ir::NormalizeDim(dim, impl.shape.rank()), "argsort", loc);
  // Always stable: the device sorts stably, so equal keys come in one deterministic order either way.
  return MakeTensor(OpKind::kArgsort, {ValueOf(x)}, impl.shape.WithDType(DType::kI64), impl.device, loc,
                    ir::Attributes{{AttrKey::kAxis, d}, {AttrKey::kDescending, descending}});
}

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool stable, SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "sort", loc);
  if (impl.shape.rank() == 0) {
    Check(ir::NormalizeDim(dim, 1), "sort", loc);
    return {x, zeros({}, DType::kI64, x.device(), loc)};
  }
  const int64_t d = Check(ir::NormalizeDim(dim, impl.shape.rank()), "sort", loc);
  Tensor order = argsort(x, d, descending, stable, loc);
  // The values by gather, whose gradient scatters back to the positions they came from.
  return {gather(x, d, order, loc), order};
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted*/,
                               SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "topk", loc);
  if (impl.shape.dtype() == DType::kBool)
    throw Error(absl::StrCat("topk: not defined for ", impl.shape.ToString()), loc);
  // A 0-dim tensor has one element along dim 0 (or -1), as PyTorch.
  const int64_t rank = std::max<int64_t>(1, impl.shape.rank());
  const int64_t d = Check(ir::NormalizeDim(dim, rank), "topk", loc);
  const int64_t size = impl.shape.rank() == 0 ? 1 : impl.shape.dim(d);
  if (k < 0 || k > size) {
    throw Error(absl::StrCat("topk: k = ", k, " is out of range for dimension ", d, " of ", impl.shape.ToString(),
                             " (valid: 0 <= k <= ", size, ")"),
                loc);
  }
  if (impl.shape.rank() == 0) {
    if (k == 1) return {x, zeros({}, DType::kI64, x.device(), loc)};
    return topk(reshape(x, {1}, loc), k, 0, largest, true, loc);
  }
  // Sorted either way (`sorted` = false allows any order; this one is deterministic).
  Tensor picked = slice(argsort(x, d, largest, true, loc), d, 0, k, 1, loc);
  return {gather(x, d, picked, loc), picked};
}

// ---- Splitting and stacking ------------------------------------------------------------------------------

std::vector<Tensor> split(const Tensor& x, std::vector<int64_t> split_sizes, int64_t dim, SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "split", loc);
  const int64_t d = Check(ir::NormalizeDim(dim, impl.shape.rank()), "split", loc);
  const int64_t size = impl.shape.dim(d);
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    if (s < 0) throw Error(absl::StrCat("split: sizes must be non-negative, got ", ir::DimsToString(split_sizes)), loc);
    total += std::min(s, size + 1);  // bounded: a huge size cannot overflow the sum, and still fails below
  }
  if (total != size) {
    throw Error(absl::StrCat("split: the sizes ", ir::DimsToString(split_sizes), " do not add up to ", size,
                             ", the size of dimension ", d, " of ", impl.shape.ToString()),
                loc);
  }
  std::vector<Tensor> pieces;
  int64_t at = 0;
  for (int64_t s : split_sizes) {
    pieces.push_back(slice(x, d, at, at + s, 1, loc));
    at += s;
  }
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim, SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "split", loc);
  const int64_t d = Check(ir::NormalizeDim(dim, impl.shape.rank()), "split", loc);
  const int64_t size = impl.shape.dim(d);
  if (split_size < 0 || (split_size == 0 && size > 0)) {
    throw Error(absl::StrCat("split: split_size must be positive (or 0 for an empty dimension), got ", split_size,
                             " for dimension ", d, " of ", impl.shape.ToString()),
                loc);
  }
  std::vector<int64_t> sizes;
  if (size == 0) sizes.push_back(0);  // as PyTorch: one empty piece
  for (int64_t at = 0; at < size; at += split_size) sizes.push_back(std::min(split_size, size - at));
  return split(x, std::move(sizes), d, loc);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim, SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "chunk", loc);
  if (chunks <= 0) throw Error(absl::StrCat("chunk: chunks must be positive, got ", chunks), loc);
  const int64_t d = Check(ir::NormalizeDim(dim, impl.shape.rank()), "chunk", loc);
  const int64_t size = impl.shape.dim(d);
  // As PyTorch: an empty dimension gives `chunks` empty pieces; otherwise pieces of ceil(size / chunks).
  if (size == 0) return split(x, std::vector<int64_t>(static_cast<size_t>(chunks), 0), d, loc);
  return split(x, size / chunks + (size % chunks != 0 ? 1 : 0), d, loc);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim, SourceLocation loc) {
  if (tensors.empty()) throw Error("stack: needs at least one tensor", loc);
  const detail::TensorImpl& first = ImplOf(tensors[0], "stack", loc);
  const int64_t d = Check(ir::NormalizeDim(dim, first.shape.rank() + 1), "stack", loc);
  std::vector<Tensor> rows;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const detail::TensorImpl& impl = ImplOf(tensors[i], "stack", loc);
    if (impl.shape.dims() != first.shape.dims()) {
      throw Error(absl::StrCat("stack: every tensor must have the same shape, but tensor 0 is ", first.shape.ToString(),
                               " and tensor ", i, " is ", impl.shape.ToString()),
                  loc);
    }
    std::vector<int64_t> sizes = SizesOf(tensors[i]);
    sizes.insert(sizes.begin() + d, 1);
    rows.push_back(reshape(tensors[i], std::move(sizes), loc));
  }
  return cat(rows, d, loc);
}

}  // namespace lazyrt
