// layer_norm and rms_norm: a normalization node (one fused device kernel) whose gradient is one
// gradient node, then the affine weight and bias as ordinary elementwise ops, whose own gradients give
// dweight and dbias as reductions.
#include <cfloat>
#include <cmath>
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

// x_hat: x normalized over its trailing normalized_shape.size() dims, without weight or bias.
Tensor Normalized(OpKind op, const Tensor& x, const std::vector<int64_t>& normalized_shape, double eps,
                  const char* name, const SourceLocation& loc) {
  const detail::TensorImpl& impl = ImplOf(x, name, loc);
  Shape out = Check(ir::InferNormalize(impl.shape, normalized_shape), name, loc);
  if (!std::isfinite(eps) || eps < 0) throw Error(absl::StrCat(name, ": eps must be finite and >= 0, got ", eps), loc);
  const int64_t axis = impl.shape.rank() - static_cast<int64_t>(normalized_shape.size());
  const ir::Attributes attrs{{AttrKey::kAxis, axis}, {AttrKey::kEpsilon, eps}};
  Tensor x_hat = detail::MakeTensor(op, {ValueOf(x)}, std::move(out), impl.device, loc, attrs);
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

}  // namespace

Tensor layer_norm(const Tensor& x, std::vector<int64_t> normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps, SourceLocation loc) {
  Tensor y = Normalized(OpKind::kLayerNorm, x, normalized_shape, eps, "layer_norm", loc);
  CheckAffine(x, weight, "weight", normalized_shape, "layer_norm", loc);
  CheckAffine(x, bias, "bias", normalized_shape, "layer_norm", loc);
  if (weight.defined()) y = y * TensorArg(weight, loc);
  if (bias.defined()) y = y + TensorArg(bias, loc);
  return y;
}

Tensor rms_norm(const Tensor& x, std::vector<int64_t> normalized_shape, const Tensor& weight, std::optional<double> eps,
                SourceLocation loc) {
  const double e = eps.has_value() ? *eps : MachineEpsilon(ImplOf(x, "rms_norm", loc).shape.dtype());
  Tensor y = Normalized(OpKind::kRmsNorm, x, normalized_shape, e, "rms_norm", loc);
  CheckAffine(x, weight, "weight", normalized_shape, "rms_norm", loc);
  if (weight.defined()) y = y * TensorArg(weight, loc);
  return y;
}

}  // namespace lazyrt
