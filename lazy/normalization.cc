// layer_norm and rms_norm: a normalization node (one fused device kernel) whose gradient is one
// gradient node. Layer norm with weight and bias (FusesAffine) takes them into both nodes; otherwise the
// affine is ordinary elementwise ops, whose own gradients give dweight and dbias as reductions.
#include <cfloat>
#include <cmath>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "ir/shape_inference.h"
#include "lazy/autograd.h"
#include "lazy/tensor.h"
#include "lazy/tracing.h"

namespace lazyrt {

using detail::Check;
using detail::ImplOf;
using detail::ValueOf;
using ir::AttrKey;
using ir::OpKind;

namespace {

// The gradient node of a normalization node.
OpKind GradientOf(OpKind op) { return op == OpKind::kLayerNorm ? OpKind::kLayerNormGrad : OpKind::kRmsNormGrad; }

// The attributes of a node normalizing x over its trailing normalized_shape.size() dims (its first normalized
// dim, its epsilon), checked.
ir::Attributes NormalizeAttributes(const Tensor& x, const std::vector<int64_t>& normalized_shape, double eps,
                                   const char* name, const SourceLocation& loc) {
  const detail::TensorImpl& impl = ImplOf(x, name, loc);
  Check(ir::InferNormalize(impl.shape, normalized_shape), name, loc);
  if (!std::isfinite(eps) || eps < 0) throw Error(absl::StrCat(name, ": eps must be finite and >= 0, got ", eps), loc);
  const int64_t axis = impl.shape.rank() - static_cast<int64_t>(normalized_shape.size());
  return ir::Attributes{{AttrKey::kAxis, axis}, {AttrKey::kEpsilon, eps}};
}

// x_hat: x normalized as `attrs` say (NormalizeAttributes), without weight or bias.
Tensor Normalized(OpKind op, const Tensor& x, const ir::Attributes& attrs, const char* name,
                  const SourceLocation& loc) {
  Tensor x_hat = detail::MakeTensor(op, {ValueOf(x)}, x.shape(), ImplOf(x, name, loc).device, loc, attrs);
  return detail::Record(
      x_hat, name, {x},
      [op, attrs, loc](const Tensor& g, const Tensor&, const std::vector<Tensor>& in) -> std::vector<Tensor> {
        const Tensor& x = in[0];
        return {detail::MakeTensor(GradientOf(op), {ValueOf(x), detail::Converted(ValueOf(g), x.dtype(), loc)},
                                   x.shape(), ImplOf(x, "backward", loc).device, loc, attrs)};
      },
      loc);
}

// weight or bias: undefined, or a floating tensor of shape normalized_shape on x's device.
void CheckAffine(const Tensor& x, const Tensor& t, absl::string_view what, const std::vector<int64_t>& normalized_shape,
                 absl::string_view name, const SourceLocation& loc) {
  if (!t.defined()) return;
  detail::CommonDevice({&x, &t}, name, loc);
  const bool same = t.dims().size() == normalized_shape.size() &&
                    std::equal(t.dims().begin(), t.dims().end(), normalized_shape.begin());
  if (!same || !ir::IsFloating(t.dtype())) {
    throw Error(absl::StrCat(name, ": ", what, " must be a floating tensor of shape normalized_shape ",
                             ir::DimsToString(normalized_shape), ", got ", t.shape().ToString()),
                loc);
  }
}

// The machine epsilon of a floating dtype (torch.finfo(dtype).eps).
double MachineEpsilon(DType dtype) {
  switch (dtype) {
    case DType::kF64: return DBL_EPSILON;
    case DType::kBF16: return 0x1p-7;
    case DType::kF16: return 0x1p-10;
    case DType::kF32:
    case DType::kI32:
    case DType::kI64:
    case DType::kBool: return FLT_EPSILON;  // integer inputs are refused by InferNormalize
  }
  return FLT_EPSILON;
}

// The fewest groups of rows (the product of x's dims before its last row dim) that layer_norm's gradient
// node packs its sums by: a group's rows are one task of the device's pool (fewer groups would leave cores
// idle), and a batch of B sequences [B, T, C] keeps its B split over devices (data parallelism).
constexpr int64_t kMinAffineGroups = 4;

// Whether layer_norm(x, ..., weight, bias) runs as one normalization node with its affine (and its gradient
// as one node giving dx, dweight and dbias): weight and bias both given, of x's floating type (f32 or f64:
// the gradient node stores each group's sums, summed in f64 over its rows, in x's type), and at least
// kMinAffineGroups groups of rows, none empty. Otherwise the affine is traced as elementwise ops on x_hat.
bool FusesAffine(const Tensor& x, const Tensor& weight, const Tensor& bias, size_t normalized_dims) {
  const DType type = x.dtype();
  if (!weight.defined() || !bias.defined() || (type != DType::kF32 && type != DType::kF64) || weight.dtype() != type ||
      bias.dtype() != type || static_cast<size_t>(x.rank()) < normalized_dims + 2) {
    return false;
  }
  const int64_t group_dim = x.rank() - static_cast<int64_t>(normalized_dims) - 1;
  int64_t groups = 1;
  for (int64_t d = 0; d < group_dim; ++d) groups *= x.dim(d);
  return groups >= kMinAffineGroups && x.dim(group_dim) > 0;
}

// y = x_hat weight + bias as one node. Its gradient node returns [..., T + 2, C...] for x [..., T, C...] (T the
// last row dim): dx in rows [0, T) of each group of T rows, then that group's sums of dy x_hat and of dy, which
// are summed over the groups into dweight and dbias.
Tensor AffineNormalized(const Tensor& x, const Tensor& weight, const Tensor& bias, const ir::Attributes& attrs,
                        const SourceLocation& loc) {
  const int64_t axis = attrs.Get<int64_t>(AttrKey::kAxis);
  Tensor y = detail::MakeTensor(OpKind::kLayerNorm, {ValueOf(x), ValueOf(weight), ValueOf(bias)}, x.shape(),
                                ImplOf(x, "layer_norm", loc).device, loc, attrs);
  return detail::Record(
      y, "layer_norm", {x, weight, bias},
      [attrs, axis, loc](const Tensor& g, const Tensor&, const std::vector<Tensor>& in) -> std::vector<Tensor> {
        const Tensor& x = in[0];
        const Tensor& weight = in[1];
        const int64_t group = axis - 1, rows = x.dim(group);
        std::vector<int64_t> packed = x.sizes();
        packed[static_cast<size_t>(group)] += 2;
        const Tensor grads = detail::MakeTensor(
            OpKind::kLayerNormGrad, {ValueOf(x), detail::Converted(ValueOf(g), x.dtype(), loc), ValueOf(weight)},
            Shape(x.dtype(), packed), ImplOf(x, "backward", loc).device, loc, attrs);
        std::vector<int64_t> row_dims(static_cast<size_t>(axis));
        std::iota(row_dims.begin(), row_dims.end(), 0);
        const auto summed = [&](int64_t row) {
          return sum(slice(grads, group, row, row + 1, 1, loc), row_dims, false, loc);
        };
        return {slice(grads, group, 0, rows, 1, loc), summed(rows), summed(rows + 1)};
      },
      loc);
}

}  // namespace

Tensor layer_norm(const Tensor& x, std::vector<int64_t> normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps, SourceLocation loc) {
  const ir::Attributes attrs = NormalizeAttributes(x, normalized_shape, eps, "layer_norm", loc);
  CheckAffine(x, weight, "weight", normalized_shape, "layer_norm", loc);
  CheckAffine(x, bias, "bias", normalized_shape, "layer_norm", loc);
  if (FusesAffine(x, weight, bias, normalized_shape.size())) return AffineNormalized(x, weight, bias, attrs, loc);
  Tensor y = Normalized(OpKind::kLayerNorm, x, attrs, "layer_norm", loc);
  if (weight.defined()) y = y * TensorArg(weight, loc);
  if (bias.defined()) y = y + TensorArg(bias, loc);
  return y;
}

Tensor rms_norm(const Tensor& x, std::vector<int64_t> normalized_shape, const Tensor& weight, std::optional<double> eps,
                SourceLocation loc) {
  const double e = eps.has_value() ? *eps : MachineEpsilon(ImplOf(x, "rms_norm", loc).shape.dtype());
  Tensor y =
      Normalized(OpKind::kRmsNorm, x, NormalizeAttributes(x, normalized_shape, e, "rms_norm", loc), "rms_norm", loc);
  CheckAffine(x, weight, "weight", normalized_shape, "rms_norm", loc);
  if (weight.defined()) y = y * TensorArg(weight, loc);
  return y;
}

}  // namespace lazyrt
