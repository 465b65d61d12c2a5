// The scatter-add ops (scatter_add, index_add) and embedding, and the range check every indexing op
// shares: at the call when the indices are known, else by the device kernel, whose error names the op
// and the caller's line (see SiteNamerOf in graph_executor.cc).
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/shape_inference.h"
#include "lazy/autograd.h"
#include "lazy/indexing_internal.h"
#include "lazy/runtime.h"
#include "lazy/tensor.h"
#include "lazy/tracing.h"

namespace lazyrt {

using detail::Check;
using detail::ImplOf;
using detail::ValueOf;
using ir::AttrKey;
using ir::OpKind;
using Grads = std::vector<Tensor>;

namespace {

// The values of an integer tensor whose data is already computed on the device, read without a sync
// or a wait (a tensor made by FromData, or one computed by a finished step); nullopt otherwise.
std::optional<std::vector<int64_t>> KnownIntegers(const Tensor& t) {
  const detail::TensorImpl& impl = *t.impl();
  if (t.is_pending() || impl.buffer == nullptr || !impl.buffer->ready()->IsReady()) return std::nullopt;
  const DType dtype = impl.shape.dtype();
  if (!ir::IsIntegral(dtype)) return std::nullopt;
  std::vector<unsigned char> raw(static_cast<size_t>(impl.shape.byte_size()));
  if (!impl.buffer->ToHost(raw.data(), raw.size()).ok()) return std::nullopt;  // reported when read
  std::vector<int64_t> values(static_cast<size_t>(impl.shape.numel()));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kI64) {
      std::memcpy(&values[i], raw.data() + i * 8, 8);
    } else {
      int32_t v;
      std::memcpy(&v, raw.data() + i * 4, 4);
      values[i] = v;
    }
  }
  return values;
}

void RequireSameDType(const Tensor& x, const Tensor& src, absl::string_view op, absl::string_view what,
                      const SourceLocation& loc) {
  if (x.dtype() != src.dtype()) {
    throw Error(absl::StrCat(op, ": ", what, " must have x's dtype: x is ", x.shape().ToString(), ", ", what, " is ",
                             src.shape().ToString()),
                loc);
  }
}

}  // namespace

namespace detail {

bool CheckKnownIndices(const Tensor& index, int64_t size, absl::string_view op, const SourceLocation& loc,
                       std::optional<int64_t> ignored) {
  std::optional<std::vector<int64_t>> values = KnownIntegers(index);
  if (!values.has_value()) return false;
  for (size_t i = 0; i < values->size(); ++i) {
    const int64_t v = (*values)[i];
    if ((v < 0 || v >= size) && v != ignored) {
      throw Error(absl::StrCat(op, ": index ", v, " is out of range for a dimension of size ", size, " (valid: [0, ",
                               size, ")), at position ", i, " of index ", index.shape().ToString()),
                  loc);
    }
  }
  return true;
}

Tensor ScatterAddUnchecked(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                           const SourceLocation& loc) {
  const int device = CommonDevice({&x, &index, &src}, "scatter_add", loc);
  Shape out = Check(ir::InferScatterAdd(x.shape(), dim, index.shape(), src.shape()), "scatter_add", loc);
  Tensor r = MakeTensor(OpKind::kScatterAdd, {ValueOf(x), ValueOf(index), ValueOf(src)}, std::move(out), device, loc,
                        ir::Attributes{{AttrKey::kAxis, dim}});
  return Record(
      r, "scatter_add", {x, index, src},
      [dim, loc](const Tensor& g, const Tensor&, const Grads& in) -> Grads {
        return {g, Tensor(), gather(g, dim, in[1], loc)};
      },
      loc);
}

Tensor IndexAddUnchecked(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                         const SourceLocation& loc) {
  const int device = CommonDevice({&x, &index, &src}, "index_add", loc);
  Shape out = Check(ir::InferIndexAdd(x.shape(), dim, index.shape(), src.shape()), "index_add", loc);
  Tensor r = MakeTensor(OpKind::kIndexAdd, {ValueOf(x), ValueOf(index), ValueOf(src)}, std::move(out), device, loc,
                        ir::Attributes{{AttrKey::kAxis, dim}});
  return Record(
      r, "index_add", {x, index, src},
      [dim, loc](const Tensor& g, const Tensor&, const Grads& in) -> Grads {
        return {g, Tensor(), index_select(g, dim, in[1], loc)};
      },
      loc);
}

}  // namespace detail

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, SourceLocation loc) {
  detail::CommonDevice({&x, &index, &src}, "scatter_add", loc);
  const int64_t d = Check(ir::NormalizeDim(dim, x.rank()), "scatter_add", loc);
  RequireSameDType(x, src, "scatter_add", "src", loc);
  Check(ir::InferScatterAdd(x.shape(), d, index.shape(), src.shape()), "scatter_add", loc);
  detail::CheckKnownIndices(index, x.dim(d), "scatter_add", loc);
  // As torch, only src's elements at the index's positions take part: cut src to the index's dims.
  // The elements cut off get a zero gradient from slice's.
  Tensor cut = src;
  for (int64_t k = 0; k < src.rank(); ++k) cut = slice(cut, k, 0, index.dim(k), 1, loc);
  return detail::ScatterAddUnchecked(x, d, index, cut, loc);
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha,
                 SourceLocation loc) {
  detail::CommonDevice({&x, &index, &source}, "index_add", loc);
  const int64_t d = Check(ir::NormalizeDim(dim, x.rank()), "index_add", loc);
  RequireSameDType(x, source, "index_add", "source", loc);
  Check(ir::InferIndexAdd(x.shape(), d, index.shape(), source.shape()), "index_add", loc);
  detail::CheckKnownIndices(index, x.dim(d), "index_add", loc);
  const Tensor flat = index.rank() == 0 ? reshape(index, {1}, loc) : index;
  const Tensor scaled = alpha.is_static() && alpha.value() == 1 ? source : source * ScalarArg(alpha, loc);
  return detail::IndexAddUnchecked(x, d, flat, cast(scaled, x.dtype(), loc), loc);
}

Tensor embedding(const Tensor& indices, const Tensor& weight, SourceLocation loc) {
  const int device = detail::CommonDevice({&indices, &weight}, "embedding", loc);
  if (weight.rank() != 2 || !ir::IsIntegral(indices.dtype())) {
    throw Error(absl::StrCat("embedding: needs integer indices and a 2-D weight [num_embeddings, embedding_dim], got "
                             "indices ",
                             indices.shape().ToString(), " and weight ", weight.shape().ToString()),
                loc);
  }
  detail::CheckKnownIndices(indices, weight.dim(0), "embedding", loc);
  const Tensor flat = reshape(indices, {-1}, loc);
  Shape rows_shape = Check(ir::InferIndexSelect(weight.shape(), 0, flat.shape()), "embedding", loc);
  Tensor rows = detail::MakeTensor(OpKind::kIndexSelect, {ValueOf(weight), ValueOf(flat)}, std::move(rows_shape),
                                   device, loc, ir::Attributes{{AttrKey::kAxis, int64_t{0}}}, "embedding");
  rows = detail::Record(
      rows, "embedding", {weight, flat},
      [loc](const Tensor& g, const Tensor&, const Grads& in) -> Grads {
        // Rows looked up several times receive the sum of their gradients: O(tokens * dim), not a one_hot.
        return {detail::IndexAddUnchecked(zeros(in[0].sizes(), g.dtype(), g.device(), loc), 0, in[1], g, loc),
                Tensor()};
      },
      loc);
  std::vector<int64_t> out = indices.sizes();
  out.push_back(weight.dim(1));
  return reshape(rows, out, loc);
}

}  // namespace lazyrt
