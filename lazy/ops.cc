// The traced ops: each checks its operands, infers its output shape and records one IR node (plus
// dtype conversions where operands must be promoted).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "ir/shape_inference.h"
#include "lazy/autograd.h"
#include "lazy/indexing_internal.h"
#include "lazy/runtime.h"
#include "lazy/tensor.h"
#include "lazy/tracing.h"

namespace lazyrt {

using detail::Check;
using detail::CommonDevice;
using detail::Converted;
using detail::ImplOf;
using detail::MakeTensor;
using detail::Record;
using detail::ReductionDims;
using detail::RequireFloating;
using detail::SumToShape;
using Grads = std::vector<Tensor>;
using detail::ScalarValue;
using detail::ValueOf;
using ir::AttrKey;
using ir::OpKind;

namespace detail {
void RequireFloating(const Tensor& x, absl::string_view op, const SourceLocation& loc) {
  if (!ir::IsFloating(ImplOf(x, op, loc).shape.dtype())) {
    throw Error(absl::StrCat(op, ": needs a floating-point tensor, got ", x.shape().ToString(), " (cast it first)"),
                loc);
  }
}

std::vector<int64_t> ReductionDims(const Shape& shape, std::vector<int64_t> dims, absl::string_view op,
                                   const SourceLocation& loc) {
  if (dims.empty()) {
    for (int64_t i = 0; i < shape.rank(); ++i) dims.push_back(i);
    return dims;
  }
  for (int64_t& d : dims) d = Check(ir::NormalizeDim(d, shape.rank()), op, loc);
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end()) {
    throw Error(absl::StrCat(op, ": a dimension is repeated in ", ir::DimsToString(dims)), loc);
  }
  return dims;
}

}  // namespace detail

namespace {

// Records an elementwise node over already-promoted operand values.
Tensor Elementwise(OpKind op, ir::OperandList operands, int device, const SourceLocation& loc) {
  absl::InlinedVector<const Shape*, 3> shapes;
  for (const ir::Value& v : operands) shapes.push_back(&v.shape());
  Shape out = Check(ir::InferElementwise(op, shapes), ir::OpKindName(op), loc);
  return MakeTensor(op, std::move(operands), std::move(out), device, loc);
}

// The dtype a binary op computes in: PyTorch's result type of the two tensors (a 0-dim tensor promotes
// only across categories); true division of integers in f32.
DType ComputeType(OpKind op, const Shape& a, const Shape& b) {
  DType t = ir::ResultType(a, b);
  if (op == OpKind::kDiv && !ir::IsFloating(t)) return DType::kF32;
  return t;
}

Tensor Binary(OpKind op, const Tensor& a, const Tensor& b, const SourceLocation& loc) {
  const absl::string_view name = ir::OpKindName(op);
  const int device = CommonDevice({&a, &b}, name, loc);
  const DType t = ComputeType(op, a.shape(), b.shape());
  Tensor out = Elementwise(op, {Converted(ValueOf(a), t, loc), Converted(ValueOf(b), t, loc)}, device, loc);
  if (!ir::IsFloating(t) || ir::IsComparison(op)) return out;
  return Record(
      out, "binary", {a, b},
      [op, loc](const Tensor& g, const Tensor& y, const Grads& x) -> Grads {
        const Tensor& a = x[0];
        const Tensor& b = x[1];
        Tensor ga, gb;
        switch (op) {
          case OpKind::kAdd:
            ga = g;
            gb = g;
            break;
          case OpKind::kSub:
            ga = g;
            gb = neg(g, loc);
            break;
          case OpKind::kMul:
            ga = g * TensorArg(b, loc);
            gb = g * TensorArg(a, loc);
            break;
          case OpKind::kDiv:
            ga = g / TensorArg(b, loc);
            gb = neg(g * TensorArg(y, loc) / TensorArg(b, loc), loc);
            break;
          case OpKind::kPow: {
            // As PyTorch (pow_backward_self / pow_backward_exponent): d/da is 0 where b == 0 (b a^(b-1) would
            // be 0 * inf = NaN at a = 0), and d/db is 0 where a == 0 and b >= 0 (y ln a would be 0 * -inf).
            Tensor zero = zeros({}, g.dtype(), g.device(), loc);
            Tensor power = b * TensorArg(pow(a, b - ScalarArg(Scalar::Static(1), loc), loc), loc);
            ga = where(eq(b, Scalar::Static(0), loc), zero, g * TensorArg(power, loc), loc);
            Tensor flat = logical_and(eq(a, Scalar::Static(0), loc), ge(b, Scalar::Static(0), loc), loc);
            gb = g * TensorArg(where(flat, zero, y * TensorArg(log(a, loc), loc), loc), loc);
            break;
          }
          case OpKind::kMaximum:
          case OpKind::kMinimum: {
            // As PyTorch: ties split the gradient in halves; otherwise it goes to the operand picked. Where
            // either is NaN, neither comparison holds and both receive it (PyTorch does the same).
            Tensor zero = zeros({}, g.dtype(), g.device(), loc);
            Tensor tie = eq(a, b, loc);
            Tensor half = g * ScalarArg(Scalar::Static(0.5), loc);
            Tensor a_loses = op == OpKind::kMaximum ? lt(a, b, loc) : gt(a, b, loc);
            Tensor b_loses = op == OpKind::kMaximum ? gt(a, b, loc) : lt(a, b, loc);
            ga = where(tie, half, where(a_loses, zero, g, loc), loc);
            gb = where(tie, half, where(b_loses, zero, g, loc), loc);
            break;
          }
          default: return {};
        }
        return {SumToShape(cast(ga, a.dtype(), loc), a.shape(), loc),
                SumToShape(cast(gb, b.dtype(), loc), b.shape(), loc)};
      },
      loc);
}

// A tensor and a host scalar: the scalar takes the tensor's dtype (as a PyTorch wrapped number), except
// that a fractional scalar with an integer tensor computes in f32.
Tensor BinaryScalar(OpKind op, const Tensor& a, Scalar s, bool scalar_first, const SourceLocation& loc) {
  const detail::TensorImpl& impl = ImplOf(a, ir::OpKindName(op), loc);
  DType t = impl.shape.dtype();
  if (!ir::IsFloating(t) && !s.is_integral()) t = DType::kF32;
  if (op == OpKind::kDiv && !ir::IsFloating(t)) t = DType::kF32;
  // Moved into the operand list: copies would cost an atomic increment and decrement each.
  ir::OperandList operands;
  operands.push_back(Converted(ValueOf(a), t, loc));
  operands.push_back(ScalarValue(s, t, loc));
  if (scalar_first) std::swap(operands[0], operands[1]);
  Tensor out = Elementwise(op, std::move(operands), impl.device, loc);
  if (!ir::IsFloating(t) || ir::IsComparison(op)) return out;
  return Record(
      out, "binary_scalar", {a},
      [op, s, scalar_first, loc](const Tensor& g, const Tensor& y, const Grads& x) -> Grads {
        const Tensor& a = x[0];
        Tensor ga;
        switch (op) {
          case OpKind::kAdd: ga = g; break;
          case OpKind::kSub: ga = scalar_first ? neg(g, loc) : g; break;
          case OpKind::kMul: ga = g * ScalarArg(s, loc); break;
          case OpKind::kDiv:
            // s / a: -s/a^2 = -y/a
            ga = scalar_first ? neg(g * TensorArg(y, loc) / TensorArg(a, loc), loc) : g / ScalarArg(s, loc);
            break;
          case OpKind::kPow:
            if (scalar_first) {  // s^a: y ln s
              ga = g * TensorArg(y, loc) * ScalarArg(Scalar(std::log(s.value())), loc);
            } else {  // a^s: s a^(s-1), and 0 for s == 0 (PyTorch; not 0 * inf = NaN at a = 0)
              if (s.is_static() && s.value() == 0) {
                return {zeros(a.sizes(), a.dtype(), a.device(), loc)};
              }
              const Scalar s_minus_1 = s.is_static() ? Scalar::Static(s.value() - 1) : Scalar(s.value() - 1);
              ga = g * TensorArg(ScalarArg(s, loc) * pow(a, s_minus_1, loc), loc);
              if (!s.is_static()) {
                // A device parameter: decided on the device, so a changing exponent never changes the graph.
                Tensor exponent = full({}, s, g.dtype(), g.device(), loc);
                ga = where(eq(exponent, Scalar::Static(0), loc), zeros({}, g.dtype(), g.device(), loc), ga, loc);
              }
            }
            break;
          case OpKind::kMaximum:
          case OpKind::kMinimum:
          default: return {};
        }
        return {cast(ga, a.dtype(), loc)};
      },
      loc);
}

// d(op(x))/dx times g, given x and y = op(x), for the floating unary ops (LAZYRT_IR_FLOAT_UNARY_OPS):
// each row needs its specialization below, or the public function does not compile.
template <OpKind op>
Tensor FloatUnaryGrad(const Tensor& g, const Tensor& x, const Tensor& y, const SourceLocation& loc) = delete;

// Scalar constants and tensor operands of a gradient formula.
#define LAZYRT_GRAD_HELPERS                                             \
  auto c = [&](double v) { return ScalarArg(Scalar::Static(v), loc); }; \
  auto t = [&](const Tensor& v) { return TensorArg(v, loc); };          \
  (void)c;                                                              \
  (void)t;                                                              \
  (void)x;                                                              \
  (void)y

template <>
Tensor FloatUnaryGrad<OpKind::kExp>(const Tensor& g, const Tensor& x, const Tensor& y, const SourceLocation& loc) {
  LAZYRT_GRAD_HELPERS;
  return g * t(y);
}
template <>
Tensor FloatUnaryGrad<OpKind::kLog>(const Tensor& g, const Tensor& x, const Tensor& y, const SourceLocation& loc) {
  LAZYRT_GRAD_HELPERS;
  return g / t(x);
}
template <>
Tensor FloatUnaryGrad<OpKind::kSqrt>(const Tensor& g, const Tensor& x, const Tensor& y, const SourceLocation& loc) {
  LAZYRT_GRAD_HELPERS;
  return g * c(0.5) / t(y);
}
template <>
Tensor FloatUnaryGrad<OpKind::kRsqrt>(const Tensor& g, const Tensor& x, const Tensor& y, const SourceLocation& loc) {
  LAZYRT_GRAD_HELPERS;
  return g * c(-0.5) * t(y * t(y) * t(y));
}
template <>
Tensor FloatUnaryGrad<OpKind::kTanh>(const Tensor& g, const Tensor& x, const Tensor& y, const SourceLocation& loc) {
  LAZYRT_GRAD_HELPERS;
  return g * t(c(1) - y * t(y));
}
template <>
Tensor FloatUnaryGrad<OpKind::kSigmoid>(const Tensor& g, const Tensor& x, const Tensor& y, const SourceLocation& loc) {
  LAZYRT_GRAD_HELPERS;
  return g * t(y * t(c(1) - y));
}
template <>
Tensor FloatUnaryGrad<OpKind::kErf>(const Tensor& g, const Tensor& x, const Tensor& y, const SourceLocation& loc) {
  LAZYRT_GRAD_HELPERS;
  return g * c(2.0 / std::sqrt(M_PI)) * t(exp(neg(x * t(x), loc), loc));  // 2/sqrt(pi) e^(-x^2)
}
template <>
Tensor FloatUnaryGrad<OpKind::kSin>(const Tensor& g, const Tensor& x, const Tensor& y, const SourceLocation& loc) {
  LAZYRT_GRAD_HELPERS;
  return g * t(cos(x, loc));
}
template <>
Tensor FloatUnaryGrad<OpKind::kCos>(const Tensor& g, const Tensor& x, const Tensor& y, const SourceLocation& loc) {
  LAZYRT_GRAD_HELPERS;
  return g * t(neg(sin(x, loc), loc));
}
#undef LAZYRT_GRAD_HELPERS

// The derivative of the unary ops that are not floating math, of input x and result y.
Tensor UnaryGrad(OpKind op, const Tensor& g, const Tensor& x, const Tensor& y, const SourceLocation& loc) {
  if (op == OpKind::kNeg) return neg(g, loc);
  if (op == OpKind::kAbs) return g * TensorArg(sign(x, loc), loc);
  // Zero where the result is <= 0, as PyTorch's threshold_backward: a NaN input passes its gradient on.
  // From the result, not the input: the input then has one reader, so the bias add before a ReLU fuses
  // with it into one loop (two fewer kernels and two fewer 128x256 / 128x128 stores in the MLP step).
  if (op == OpKind::kRelu) return where(le(y, Scalar::Static(0), loc), zeros({}, g.dtype(), g.device(), loc), g, loc);
  // sign: zero everywhere (as PyTorch, a tensor of zeros rather than no gradient at all).
  if (op == OpKind::kSign) return zeros(x.sizes(), g.dtype(), g.device(), loc);
  return Tensor();
}

using GradFormula = Tensor (*)(const Tensor& g, const Tensor& x, const Tensor& y, const SourceLocation& loc);

// Unary floating math: integer inputs are computed in f32.
Tensor UnaryFloat(OpKind op, GradFormula grad, const Tensor& x, const SourceLocation& loc) {
  const detail::TensorImpl& impl = ImplOf(x, ir::OpKindName(op), loc);
  const DType t = ir::IsFloating(impl.shape.dtype()) ? impl.shape.dtype() : DType::kF32;
  Tensor out = Elementwise(op, {Converted(ValueOf(x), t, loc)}, impl.device, loc);
  return Record(
      out, "unary", {x},
      [grad, loc](const Tensor& g, const Tensor& y, const Grads& in) -> Grads { return {grad(g, in[0], y, loc)}; },
      loc);
}

Tensor Unary(OpKind op, const Tensor& x, const SourceLocation& loc) {
  const detail::TensorImpl& impl = ImplOf(x, ir::OpKindName(op), loc);
  if (impl.shape.dtype() == DType::kBool && op != OpKind::kNot) {
    throw Error(absl::StrCat(ir::OpKindName(op), ": not defined for ", impl.shape.ToString()), loc);
  }
  Tensor out = Elementwise(op, {ValueOf(x)}, impl.device, loc);
  if (!ir::IsFloating(impl.shape.dtype())) return out;
  return Record(
      out, "unary", {x},
      [op, loc](const Tensor& g, const Tensor& y, const Grads& in) -> Grads {
        return {UnaryGrad(op, g, in[0], y, loc)};
      },
      loc);
}

// A reduction without an identity (max, min) over no elements has no value: PyTorch refuses it, and so do we.
void RequireNonEmptyReduction(const Shape& shape, const std::vector<int64_t>& dims, absl::string_view op,
                              const SourceLocation& loc) {
  if (dims.empty()) {
    if (shape.numel() == 0)
      throw Error(absl::StrCat(op, ": cannot reduce ", shape.ToString(), ", which is empty"), loc);
    return;
  }
  for (int64_t dim : dims) {
    const int64_t d = Check(ir::NormalizeDim(dim, shape.rank()), op, loc);
    if (shape.dim(d) == 0) {
      throw Error(absl::StrCat(op, ": cannot reduce over dimension ", d, " of ", shape.ToString(), ", which is empty"),
                  loc);
    }
  }
}

Tensor Reduce(OpKind op, const Tensor& x, std::vector<int64_t> dims, bool keepdim, DType out_dtype,
              const SourceLocation& loc) {
  const absl::string_view name = ir::OpKindName(op);
  const detail::TensorImpl& impl = ImplOf(x, name, loc);
  dims = ReductionDims(impl.shape, std::move(dims), name, loc);
  Shape out = ir::InferReduce(impl.shape, dims, keepdim, out_dtype);
  Tensor r = MakeTensor(op, {Converted(ValueOf(x), out_dtype, loc)}, std::move(out), impl.device, loc,
                        ir::Attributes{{AttrKey::kAxes, dims}, {AttrKey::kKeepDim, keepdim}});
  if (!ir::IsFloating(out_dtype)) return r;
  return Record(
      r, "reduce", {x},
      [op, dims, loc](const Tensor& g, const Tensor& y, const Grads& in) -> Grads {
        const Tensor& x = in[0];
        const std::vector<int64_t> full(x.dims().begin(), x.dims().end());
        // The reduced dims back as size 1, then broadcast over x.
        std::vector<int64_t> kept = full;
        int64_t count = 1;
        for (int64_t d : dims) {
          kept[static_cast<size_t>(d)] = 1;
          count *= full[static_cast<size_t>(d)];
        }
        Tensor gb = expand(reshape(g, kept, loc), full, loc);
        if (op == OpKind::kReduceSum) return {gb};
        if (op == OpKind::kReduceMean) return {gb * ScalarArg(Scalar::Static(1.0 / static_cast<double>(count)), loc)};
        const Tensor yb = expand(reshape(y, kept, loc), full, loc);
        if (op == OpKind::kReduceProd) {
          // y / x where x != 0; where x is 0, the product of the others (computed directly, as PyTorch does).
          Tensor nonzero = ne(x, Scalar::Static(0), loc);
          Tensor safe_x = where(nonzero, x, ones({}, x.dtype(), x.device(), loc), loc);
          Tensor others = expand(reshape(prod(safe_x, dims, true, loc), kept, loc), full, loc);
          Tensor zeros_in_group =
              expand(sum(cast(logical_not(nonzero, loc), DType::kI64, loc), dims, true, loc), full, loc);
          // One zero: that element's derivative is the product of the others; two or more: all are 0.
          Tensor at_zero =
              where(eq(zeros_in_group, Scalar::Static(1), loc), others, zeros({}, x.dtype(), x.device(), loc), loc);
          return {gb * TensorArg(where(nonzero, yb / TensorArg(safe_x, loc), at_zero, loc), loc)};
        }
        // Max and min: shared evenly among the elements equal to the result.
        Tensor mask = cast(eq(x, yb, loc), x.dtype(), loc);
        Tensor ties = expand(sum(mask, dims, true, loc), full, loc);
        return {gb * TensorArg(mask, loc) / TensorArg(ties, loc)};
      },
      loc);
}

}  // namespace

// ---- Factories ---------------------------------------------------------------------------------------

namespace {
Shape FactoryShape(std::vector<int64_t> dims, DType dtype, absl::string_view op, const SourceLocation& loc) {
  for (int64_t d : dims) {
    if (d < 0) throw Error(absl::StrCat(op, ": negative dimension in ", ir::DimsToString(dims)), loc);
  }
  return Shape(dtype, dims);
}

Tensor Splat(double value, std::vector<int64_t> dims, DType dtype, Device device, absl::string_view op,
             const SourceLocation& loc) {
  detail::Runtime::Get().device_state(device, loc);
  return MakeTensor(OpKind::kConstant, {}, FactoryShape(std::move(dims), dtype, op, loc), device.index, loc,
                    ir::Attributes{{AttrKey::kValue, value}});
}
}  // namespace

Tensor zeros(std::vector<int64_t> dims, DType dtype, Device device, SourceLocation loc) {
  return Splat(0.0, std::move(dims), dtype, device, "zeros", loc);
}

Tensor ones(std::vector<int64_t> dims, DType dtype, Device device, SourceLocation loc) {
  return Splat(1.0, std::move(dims), dtype, device, "ones", loc);
}

Tensor full(std::vector<int64_t> dims, Scalar value, DType dtype, Device device, SourceLocation loc) {
  if (value.is_static()) return Splat(value.value(), std::move(dims), dtype, device, "full", loc);
  detail::Runtime::Get().device_state(device, loc);
  Shape shape = FactoryShape(dims, dtype, "full", loc);
  return MakeTensor(OpKind::kExpand, {ScalarValue(value, dtype, loc)}, std::move(shape), device.index, loc,
                    ir::Attributes{{AttrKey::kSizes, std::move(dims)}});
}

Tensor arange(int64_t start, int64_t end, int64_t step, DType dtype, Device device, SourceLocation loc) {
  if (step == 0) throw Error("arange: step must not be 0", loc);
  if ((step > 0 && end < start) || (step < 0 && end > start)) {
    // PyTorch refuses this too: an empty range here is usually a sign error in the caller's bounds.
    throw Error(
        absl::StrCat("arange: the bounds [", start, ", ", end, ") are inconsistent with the sign of step ", step), loc);
  }
  detail::Runtime::Get().device_state(device, loc);
  const int64_t n = std::max<int64_t>(0, (end - start + step + (step > 0 ? -1 : 1)) / step);
  return MakeTensor(
      OpKind::kIota, {}, Shape(dtype, {n}), device.index, loc,
      ir::Attributes{{AttrKey::kStart, std::vector<int64_t>{start}}, {AttrKey::kStride, std::vector<int64_t>{step}}});
}

namespace {
Tensor Random(OpKind op, std::vector<int64_t> dims, Scalar shift, Scalar scale, DType dtype, Device device,
              const SourceLocation& loc) {
  const absl::string_view name = ir::OpKindName(op);
  if (!ir::IsFloating(dtype)) {
    throw Error(absl::StrCat(name, ": needs a floating-point dtype, got ", ir::DTypeName(dtype)), loc);
  }
  detail::DeviceState& state = detail::Runtime::Get().device_state(device, loc);
  Tensor t = MakeTensor(op, {state.SeedValue()}, FactoryShape(std::move(dims), dtype, name, loc), device.index, loc,
                        ir::Attributes{{AttrKey::kStream, state.NextRngStream()}});
  // Identity scale and shift are skipped only when static, so the graph never depends on a value.
  if (!(scale.is_static() && scale.value() == 1)) t = t * ScalarArg(scale, loc);
  if (!(shift.is_static() && shift.value() == 0)) t = t + ScalarArg(shift, loc);
  return t;
}

Scalar Difference(Scalar high, Scalar low) {
  if (high.is_static() && low.is_static()) return Scalar::Static(high.value() - low.value());
  return Scalar(high.value() - low.value());
}
}  // namespace

Tensor rand(std::vector<int64_t> dims, Scalar low, Scalar high, DType dtype, Device device, SourceLocation loc) {
  return Random(OpKind::kRngUniform, std::move(dims), low, Difference(high, low), dtype, device, loc);
}

Tensor randn(std::vector<int64_t> dims, Scalar mean, Scalar stddev, DType dtype, Device device, SourceLocation loc) {
  return Random(OpKind::kRngNormal, std::move(dims), mean, stddev, dtype, device, loc);
}

void manual_seed(uint64_t seed, Device device) {
  detail::Runtime::Get().device_state(device, SourceLocation::current()).Seed(seed);
}

// ---- Elementwise ----------------------------------------------------------------------------------

Tensor operator+(const Tensor& a, TensorArg b) { return Binary(OpKind::kAdd, a, b.tensor, b.loc); }
Tensor operator-(const Tensor& a, TensorArg b) { return Binary(OpKind::kSub, a, b.tensor, b.loc); }
Tensor operator*(const Tensor& a, TensorArg b) { return Binary(OpKind::kMul, a, b.tensor, b.loc); }
Tensor operator/(const Tensor& a, TensorArg b) { return Binary(OpKind::kDiv, a, b.tensor, b.loc); }
Tensor operator+(const Tensor& a, ScalarArg b) { return BinaryScalar(OpKind::kAdd, a, b.scalar, false, b.loc); }
Tensor operator-(const Tensor& a, ScalarArg b) { return BinaryScalar(OpKind::kSub, a, b.scalar, false, b.loc); }
Tensor operator*(const Tensor& a, ScalarArg b) { return BinaryScalar(OpKind::kMul, a, b.scalar, false, b.loc); }
Tensor operator/(const Tensor& a, ScalarArg b) { return BinaryScalar(OpKind::kDiv, a, b.scalar, false, b.loc); }
Tensor operator+(ScalarArg a, const Tensor& b) { return BinaryScalar(OpKind::kAdd, b, a.scalar, true, a.loc); }
Tensor operator-(ScalarArg a, const Tensor& b) { return BinaryScalar(OpKind::kSub, b, a.scalar, true, a.loc); }
Tensor operator*(ScalarArg a, const Tensor& b) { return BinaryScalar(OpKind::kMul, b, a.scalar, true, a.loc); }
Tensor operator/(ScalarArg a, const Tensor& b) { return BinaryScalar(OpKind::kDiv, b, a.scalar, true, a.loc); }
Tensor operator-(const Tensor& a) { return neg(a); }

Tensor add(const Tensor& a, const Tensor& b, SourceLocation loc) { return Binary(OpKind::kAdd, a, b, loc); }
Tensor sub(const Tensor& a, const Tensor& b, SourceLocation loc) { return Binary(OpKind::kSub, a, b, loc); }
Tensor mul(const Tensor& a, const Tensor& b, SourceLocation loc) { return Binary(OpKind::kMul, a, b, loc); }
Tensor div(const Tensor& a, const Tensor& b, SourceLocation loc) { return Binary(OpKind::kDiv, a, b, loc); }
Tensor pow(const Tensor& a, const Tensor& b, SourceLocation loc) { return Binary(OpKind::kPow, a, b, loc); }
Tensor pow(const Tensor& a, Scalar exponent, SourceLocation loc) {
  const DType base = ImplOf(a, "pow", loc).shape.dtype();
  if (ir::IsIntegral(base) && exponent.is_integral() && exponent.value() < 0) {
    // The exact result is a fraction (0 for |a| > 1): PyTorch refuses it, and so do we.
    throw Error(absl::StrCat("pow: integers to negative integer powers are not allowed (", a.shape().ToString(), " ** ",
                             exponent.value(), "); cast the base to a floating dtype first"),
                loc);
  }
  return BinaryScalar(OpKind::kPow, a, exponent, false, loc);
}
Tensor maximum(const Tensor& a, const Tensor& b, SourceLocation loc) { return Binary(OpKind::kMaximum, a, b, loc); }
Tensor minimum(const Tensor& a, const Tensor& b, SourceLocation loc) { return Binary(OpKind::kMinimum, a, b, loc); }
Tensor eq(const Tensor& a, const Tensor& b, SourceLocation loc) { return Binary(OpKind::kEq, a, b, loc); }
Tensor ne(const Tensor& a, const Tensor& b, SourceLocation loc) { return Binary(OpKind::kNe, a, b, loc); }
Tensor lt(const Tensor& a, const Tensor& b, SourceLocation loc) { return Binary(OpKind::kLt, a, b, loc); }
Tensor le(const Tensor& a, const Tensor& b, SourceLocation loc) { return Binary(OpKind::kLe, a, b, loc); }
Tensor gt(const Tensor& a, const Tensor& b, SourceLocation loc) { return Binary(OpKind::kGt, a, b, loc); }
Tensor ge(const Tensor& a, const Tensor& b, SourceLocation loc) { return Binary(OpKind::kGe, a, b, loc); }
Tensor eq(const Tensor& a, Scalar b, SourceLocation loc) { return BinaryScalar(OpKind::kEq, a, b, false, loc); }
Tensor ne(const Tensor& a, Scalar b, SourceLocation loc) { return BinaryScalar(OpKind::kNe, a, b, false, loc); }
Tensor lt(const Tensor& a, Scalar b, SourceLocation loc) { return BinaryScalar(OpKind::kLt, a, b, false, loc); }
Tensor le(const Tensor& a, Scalar b, SourceLocation loc) { return BinaryScalar(OpKind::kLe, a, b, false, loc); }
Tensor gt(const Tensor& a, Scalar b, SourceLocation loc) { return BinaryScalar(OpKind::kGt, a, b, false, loc); }
Tensor ge(const Tensor& a, Scalar b, SourceLocation loc) { return BinaryScalar(OpKind::kGe, a, b, false, loc); }

namespace {
Tensor Logical(OpKind op, std::initializer_list<const Tensor*> xs, const SourceLocation& loc) {
  const absl::string_view name = ir::OpKindName(op);
  const int device = CommonDevice(xs, name, loc);
  ir::OperandList operands;
  for (const Tensor* x : xs) {
    if (x->dtype() != DType::kBool) {
      throw Error(absl::StrCat(name, ": needs bool tensors, got ", x->shape().ToString()), loc);
    }
    operands.push_back(ValueOf(*x));
  }
  return Elementwise(op, std::move(operands), device, loc);
}
}  // namespace

Tensor logical_and(const Tensor& a, const Tensor& b, SourceLocation loc) {
  return Logical(OpKind::kAnd, {&a, &b}, loc);
}
Tensor logical_or(const Tensor& a, const Tensor& b, SourceLocation loc) { return Logical(OpKind::kOr, {&a, &b}, loc); }
Tensor logical_not(const Tensor& a, SourceLocation loc) { return Logical(OpKind::kNot, {&a}, loc); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, SourceLocation loc) {
  const int device = CommonDevice({&cond, &a, &b}, "where", loc);
  if (cond.dtype() != DType::kBool) {
    throw Error(absl::StrCat("where: the condition must be bool, got ", cond.shape().ToString()), loc);
  }
  const DType t = ir::ResultType(a.shape(), b.shape());
  Tensor out = Elementwise(OpKind::kSelect,
                           {ValueOf(cond), Converted(ValueOf(a), t, loc), Converted(ValueOf(b), t, loc)}, device, loc);
  if (!ir::IsFloating(t)) return out;
  return Record(
      out, "where", {a, b, cond},
      [loc](const Tensor& g, const Tensor&, const Grads& x) -> Grads {
        Tensor zero = zeros({}, g.dtype(), g.device(), loc);
        return {SumToShape(cast(where(x[2], g, zero, loc), x[0].dtype(), loc), x[0].shape(), loc),
                SumToShape(cast(where(x[2], zero, g, loc), x[1].dtype(), loc), x[1].shape(), loc)};
      },
      loc);
}

Tensor neg(const Tensor& x, SourceLocation loc) { return Unary(OpKind::kNeg, x, loc); }
Tensor abs(const Tensor& x, SourceLocation loc) { return Unary(OpKind::kAbs, x, loc); }
Tensor relu(const Tensor& x, SourceLocation loc) { return Unary(OpKind::kRelu, x, loc); }
Tensor sign(const Tensor& x, SourceLocation loc) { return Unary(OpKind::kSign, x, loc); }
#define LAZYRT_X(name, fn, device)                                                \
  Tensor fn(const Tensor& x, SourceLocation loc) {                                \
    return UnaryFloat(OpKind::k##name, &FloatUnaryGrad<OpKind::k##name>, x, loc); \
  }
LAZYRT_IR_FLOAT_UNARY_OPS(LAZYRT_X)
#undef LAZYRT_X

Tensor gelu(const Tensor& x, absl::string_view approximate, SourceLocation loc) {
  if (approximate != "none" && approximate != "tanh") {
    throw Error(absl::StrCat("gelu: approximate must be \"none\" or \"tanh\", not \"", approximate, "\""), loc);
  }
  const detail::TensorImpl& impl = ImplOf(x, "gelu", loc);
  const DType dtype = ir::IsFloating(impl.shape.dtype()) ? impl.shape.dtype() : DType::kF32;
  const bool tanh_form = approximate == "tanh";
  Tensor out = MakeTensor(OpKind::kGelu, {Converted(ValueOf(x), dtype, loc)}, Shape(dtype, impl.shape.dims()),
                          impl.device, loc, ir::Attributes{{AttrKey::kApproximate, tanh_form}});
  return Record(
      out, "gelu", {x},
      [tanh_form, loc](const Tensor& g, const Tensor&, const Grads& in) -> Grads {
        const Tensor& x = in[0];
        auto c = [&](double v) { return ScalarArg(Scalar::Static(v), loc); };
        auto t = [&](const Tensor& v) { return TensorArg(v, loc); };
        if (!tanh_form) {
          // g (Phi(x) + x phi(x)) as one node (the device's GELU_DERIVATIVE opcode). x is floating (an
          // integer x has no gradient) and of g's dtype, gelu's.
          return {Elementwise(OpKind::kGeluGrad, {ValueOf(g), ValueOf(x)}, CommonDevice({&g, &x}, "gelu", loc), loc)};
        }
        // y = 0.5 x (1 + tanh(u)), u = k (x + 0.044715 x^3), k = sqrt(2/pi)
        const double k = std::sqrt(2.0 / M_PI);
        Tensor th = tanh((x + x * t(x) * t(x) * c(0.044715)) * c(k), loc);
        Tensor du = (x * t(x) * c(3 * 0.044715) + c(1)) * c(k);
        return {g * t((th + c(1)) * c(0.5) + x * c(0.5) * t(c(1) - th * t(th)) * t(du))};
      },
      loc);
}

Tensor cast(const Tensor& x, DType dtype, SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "cast", loc);
  if (impl.shape.dtype() == dtype) return x;
  Tensor out = MakeTensor(OpKind::kConvert, {ValueOf(x)}, impl.shape.WithDType(dtype), impl.device, loc,
                          ir::Attributes{{AttrKey::kDType, dtype}});
  if (!ir::IsFloating(dtype) || !ir::IsFloating(impl.shape.dtype())) return out;
  return Record(
      out, "cast", {x},
      [loc](const Tensor& g, const Tensor&, const Grads& in) -> Grads { return {cast(g, in[0].dtype(), loc)}; }, loc);
}

// ---- Contractions, reductions, composites ---------------------------------------------------------

Tensor matmul(const Tensor& a, const Tensor& b, SourceLocation loc) {
  const int device = CommonDevice({&a, &b}, "matmul", loc);
  RequireFloating(a, "matmul", loc);
  RequireFloating(b, "matmul", loc);
  if (a.rank() == 0 || b.rank() == 0) {
    throw Error(
        absl::StrCat("matmul: needs operands of rank >= 1, got ", a.shape().ToString(), " and ", b.shape().ToString()),
        loc);
  }
  // [..., m, k] x [k, n] (activations times a weight) is one [... m, k] x [k, n] product: a GEMM with
  // every row of the batch, not a batch of small GEMMs, and its weight gradient one GEMM as well, not a
  // batch of them summed.
  if (a.rank() > 2 && b.rank() == 2 && a.dim(-1) == b.dim(0)) {  // (a mismatch: the error names the shapes given)
    std::vector<int64_t> dims(a.dims().begin(), a.dims().end());
    Tensor flat = matmul(reshape(a, {-1, a.dim(-1)}, loc), b, loc);
    dims.back() = flat.dim(1);
    return reshape(flat, dims, loc);
  }
  // numpy.matmul: a 1-D left operand is a row, a 1-D right operand a column, removed afterwards.
  const bool row = a.rank() == 1, col = b.rank() == 1;
  Tensor a2 = row ? reshape(a, {1, a.dim(0)}, loc) : a;
  Tensor b2 = col ? reshape(b, {b.dim(0), 1}, loc) : b;
  Shape out = Check(ir::InferMatMul(a2.shape(), b2.shape()), "matmul", loc);
  Tensor r = MakeTensor(OpKind::kMatMul, {ValueOf(a2), ValueOf(b2)}, out, device, loc);
  r = Record(
      r, "matmul", {a2, b2},
      [loc](const Tensor& g, const Tensor&, const Grads& x) -> Grads {
        // dA = g B^T, dB = A^T g, each summed over batch dims it was broadcast across.
        Tensor ga = matmul(g, transpose(x[1], -1, -2, loc), loc);
        Tensor gb = matmul(transpose(x[0], -1, -2, loc), g, loc);
        return {SumToShape(ga, x[0].shape(), loc), SumToShape(gb, x[1].shape(), loc)};
      },
      loc);
  if (row || col) {
    std::vector<int64_t> dims(out.dims().begin(), out.dims().end());
    if (col) dims.pop_back();                         // the n = 1 column
    if (row) dims.erase(dims.end() - (col ? 1 : 2));  // the m = 1 row
    r = reshape(r, dims, loc);
  }
  return r;
}

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim, SourceLocation loc) {
  const DType in = ImplOf(x, "sum", loc).shape.dtype();
  return Reduce(OpKind::kReduceSum, x, std::move(dims), keepdim, ir::IsFloating(in) ? in : DType::kI64, loc);
}

Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim, SourceLocation loc) {
  RequireFloating(x, "mean", loc);
  return Reduce(OpKind::kReduceMean, x, std::move(dims), keepdim, x.dtype(), loc);
}

Tensor max(const Tensor& x, std::vector<int64_t> dims, bool keepdim, SourceLocation loc) {
  const DType in = ImplOf(x, "max", loc).shape.dtype();
  if (in == DType::kBool) throw Error("max: not defined for bool tensors", loc);
  RequireNonEmptyReduction(x.shape(), dims, "max", loc);
  return Reduce(OpKind::kReduceMax, x, std::move(dims), keepdim, in, loc);
}

Tensor min(const Tensor& x, std::vector<int64_t> dims, bool keepdim, SourceLocation loc) {
  const DType in = ImplOf(x, "min", loc).shape.dtype();
  if (in == DType::kBool) throw Error("min: not defined for bool tensors", loc);
  RequireNonEmptyReduction(x.shape(), dims, "min", loc);
  return Reduce(OpKind::kReduceMin, x, std::move(dims), keepdim, in, loc);
}

Tensor prod(const Tensor& x, std::vector<int64_t> dims, bool keepdim, SourceLocation loc) {
  const DType in = ImplOf(x, "prod", loc).shape.dtype();
  return Reduce(OpKind::kReduceProd, x, std::move(dims), keepdim, ir::IsFloating(in) ? in : DType::kI64, loc);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim, SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "argmax", loc);
  if (impl.shape.rank() == 0) {
    // As PyTorch: a 0-dim tensor has one position, dim 0 (or -1), and its argmax is 0.
    Check(ir::NormalizeDim(dim, 1), "argmax", loc);
    return argmax(reshape(x, {1}, loc), 0, false, loc);
  }
  const int64_t d = Check(ir::NormalizeDim(dim, impl.shape.rank()), "argmax", loc);
  if (impl.shape.dim(d) == 0)
    throw Error(absl::StrCat("argmax: dimension ", d, " of ", impl.shape.ToString(), " is empty"), loc);
  const int64_t dims[] = {d};
  return MakeTensor(OpKind::kArgmax, {ValueOf(x)}, ir::InferReduce(impl.shape, dims, keepdim, DType::kI64), impl.device,
                    loc, ir::Attributes{{AttrKey::kAxis, d}, {AttrKey::kKeepDim, keepdim}});
}

namespace {
Tensor SoftmaxLike(OpKind op, const Tensor& x, int64_t dim, const SourceLocation& loc) {
  const absl::string_view name = ir::OpKindName(op);
  RequireFloating(x, name, loc);
  const detail::TensorImpl& impl = ImplOf(x, name, loc);
  if (impl.shape.rank() == 0) {
    // As PyTorch: dim 0 (or -1) of a 0-dim tensor is its one element (softmax 1, log_softmax 0).
    Check(ir::NormalizeDim(dim, 1), name, loc);
    return reshape(SoftmaxLike(op, reshape(x, {1}, loc), 0, loc), {}, loc);
  }
  const int64_t d = Check(ir::NormalizeDim(dim, impl.shape.rank()), name, loc);
  Tensor out = MakeTensor(op, {ValueOf(x)}, impl.shape, impl.device, loc, ir::Attributes{{AttrKey::kAxis, d}});
  return Record(
      out, "softmax", {x},
      [op, d, loc](const Tensor& g, const Tensor& y, const Grads&) -> Grads {
        const std::vector<int64_t> full(y.dims().begin(), y.dims().end());
        if (op == OpKind::kSoftmax) {  // y (g - sum(g y))
          return {y *
                  TensorArg(g - TensorArg(expand(sum(g * TensorArg(y, loc), {d}, true, loc), full, loc), loc), loc)};
        }
        // log_softmax: g - exp(y) sum(g)
        return {g - TensorArg(exp(y, loc) * TensorArg(expand(sum(g, {d}, true, loc), full, loc), loc), loc)};
      },
      loc);
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, SourceLocation loc) { return SoftmaxLike(OpKind::kSoftmax, x, dim, loc); }
Tensor log_softmax(const Tensor& x, int64_t dim, SourceLocation loc) {
  return SoftmaxLike(OpKind::kLogSoftmax, x, dim, loc);
}

// ---- Shape and data movement ----------------------------------------------------------------------

Tensor reshape(const Tensor& x, std::vector<int64_t> sizes, SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "reshape", loc);
  Shape out = Check(ir::InferReshape(impl.shape, sizes), "reshape", loc);
  if (out == impl.shape) return x;
  std::vector<int64_t> resolved(out.dims().begin(), out.dims().end());
  Tensor r = MakeTensor(OpKind::kReshape, {ValueOf(x)}, std::move(out), impl.device, loc,
                        ir::Attributes{{AttrKey::kSizes, std::move(resolved)}});
  return Record(
      r, "reshape", {x},
      [loc](const Tensor& g, const Tensor&, const Grads& in) -> Grads { return {reshape(g, in[0].sizes(), loc)}; },
      loc);
}

Tensor permute(const Tensor& x, std::vector<int64_t> perm, SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "permute", loc);
  for (int64_t& p : perm) {
    if (p < 0) p += impl.shape.rank();
  }
  Shape out = Check(ir::InferPermute(impl.shape, perm), "permute", loc);
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
  if (identity) return x;
  Tensor r = MakeTensor(OpKind::kPermute, {ValueOf(x)}, std::move(out), impl.device, loc,
                        ir::Attributes{{AttrKey::kPermutation, perm}});
  return Record(
      r, "permute", {x},
      [perm, loc](const Tensor& g, const Tensor&, const Grads&) -> Grads {
        std::vector<int64_t> inverse(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
        return {permute(g, inverse, loc)};
      },
      loc);
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1, SourceLocation loc) {
  const int64_t rank = ImplOf(x, "transpose", loc).shape.rank();
  if (rank == 0) {
    // As PyTorch: a 0-dim tensor has dims 0 and -1 only, and transposing them is the identity.
    Check(ir::NormalizeDim(dim0, 1), "transpose", loc);
    Check(ir::NormalizeDim(dim1, 1), "transpose", loc);
    return x;
  }
  const int64_t d0 = Check(ir::NormalizeDim(dim0, rank), "transpose", loc);
  const int64_t d1 = Check(ir::NormalizeDim(dim1, rank), "transpose", loc);
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) perm[static_cast<size_t>(i)] = i;
  std::swap(perm[static_cast<size_t>(d0)], perm[static_cast<size_t>(d1)]);
  return permute(x, std::move(perm), loc);
}

Tensor expand(const Tensor& x, std::vector<int64_t> sizes, SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "expand", loc);
  Shape out = Check(ir::InferExpand(impl.shape, sizes), "expand", loc);
  if (out == impl.shape) return x;
  std::vector<int64_t> resolved(out.dims().begin(), out.dims().end());
  Tensor r = MakeTensor(OpKind::kExpand, {ValueOf(x)}, std::move(out), impl.device, loc,
                        ir::Attributes{{AttrKey::kSizes, std::move(resolved)}});
  return Record(
      r, "expand", {x},
      [loc](const Tensor& g, const Tensor&, const Grads& in) -> Grads { return {SumToShape(g, in[0].shape(), loc)}; },
      loc);
}

namespace {
// one_hot's node, without its range check.
Tensor OneHotUnchecked(const Tensor& index, int64_t num_classes, DType dtype, const SourceLocation& loc) {
  const detail::TensorImpl& impl = ImplOf(index, "one_hot", loc);
  Shape out = Check(ir::InferOneHot(impl.shape, num_classes, dtype), "one_hot", loc);
  return MakeTensor(OpKind::kOneHot, {ValueOf(index)}, std::move(out), impl.device, loc,
                    ir::Attributes{{AttrKey::kNumClasses, num_classes}});
}
}  // namespace

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step, SourceLocation loc) {
  const detail::TensorImpl& impl = ImplOf(x, "slice", loc);
  const int64_t d = Check(ir::NormalizeDim(dim, impl.shape.rank()), "slice", loc);
  if (step <= 0) throw Error(absl::StrCat("slice: step must be positive, got ", step), loc);
  const int64_t size = impl.shape.dim(d);
  auto clamp = [size](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + size : i, 0, size); };
  const int64_t s = clamp(start);
  const int64_t e = std::max(s, clamp(end));
  std::vector<int64_t> starts(static_cast<size_t>(impl.shape.rank()), 0);
  std::vector<int64_t> limits(impl.shape.dims().begin(), impl.shape.dims().end());
  std::vector<int64_t> strides(static_cast<size_t>(impl.shape.rank()), 1);
  starts[static_cast<size_t>(d)] = s;
  limits[static_cast<size_t>(d)] = e;
  strides[static_cast<size_t>(d)] = step;
  Shape out = Check(ir::InferSlice(impl.shape, starts, limits, strides), "slice", loc);
  if (out == impl.shape) return x;
  Tensor r = MakeTensor(OpKind::kSlice, {ValueOf(x)}, std::move(out), impl.device, loc,
                        ir::Attributes{{AttrKey::kStart, std::move(starts)},
                                       {AttrKey::kLimit, std::move(limits)},
                                       {AttrKey::kStride, std::move(strides)}});
  return Record(
      r, "slice", {x},
      [d, s, step, loc](const Tensor& g, const Tensor&, const Grads& in) -> Grads {
        const Tensor& x = in[0];
        if (step == 1) {
          // g between zeros along d: a concatenation, one copy. The compiler merges the sum of such
          // gradients of slices that tile x (q, k and v cut from one projection) into one concatenation
          // of the slices' gradients, with no zeros left.
          const auto zeros_along_d = [&](int64_t n) {
            std::vector<int64_t> dims(x.dims().begin(), x.dims().end());
            dims[static_cast<size_t>(d)] = n;
            return zeros(dims, g.dtype(), g.device(), loc);
          };
          std::vector<Tensor> parts;
          if (s > 0) parts.push_back(zeros_along_d(s));
          parts.push_back(g);
          if (const int64_t after = x.dim(d) - s - g.dim(d); after > 0) parts.push_back(zeros_along_d(after));
          return {cat(parts, d, loc)};
        }
        // Scatter g back: position s + i * step along d receives g's slice i (an index_add into zeros).
        Tensor positions = arange(s, s + g.dim(d) * step, step, DType::kI64, g.device(), loc);
        Tensor zero = zeros(x.sizes(), g.dtype(), g.device(), loc);
        return {detail::IndexAddUnchecked(zero, d, positions, g, loc)};
      },
      loc);
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim, SourceLocation loc) {
  if (tensors.empty()) throw Error("cat: needs at least one tensor", loc);
  const detail::TensorImpl& first = ImplOf(tensors[0], "cat", loc);
  const int64_t d = Check(ir::NormalizeDim(dim, first.shape.rank()), "cat", loc);
  // As torch.cat, the tensors' dtypes promote (f32 with f64 is f64, i32 with f32 is f32).
  DType dtype = first.shape.dtype();
  for (const Tensor& t : tensors) dtype = ir::PromoteTypes(dtype, ImplOf(t, "cat", loc).shape.dtype());
  std::vector<Shape> shapes;
  ir::OperandList operands;
  for (const Tensor& t : tensors) {
    CommonDevice({&tensors[0], &t}, "cat", loc);
    shapes.push_back(t.shape().WithDType(dtype));
    operands.push_back(Converted(ValueOf(t), dtype, loc));
  }
  if (tensors.size() == 1) return tensors[0];
  Shape out = Check(ir::InferConcat(shapes, d), "cat", loc);
  Tensor r = MakeTensor(OpKind::kConcat, std::move(operands), std::move(out), first.device, loc,
                        ir::Attributes{{AttrKey::kAxis, d}});
  return Record(
      r, "cat", tensors,
      [d, loc](const Tensor& g, const Tensor&, const Grads& in) -> Grads {
        Grads out;
        int64_t at = 0;
        for (const Tensor& t : in) {
          out.push_back(cast(slice(g, d, at, at + t.dim(d), 1, loc), t.dtype(), loc));
          at += t.dim(d);
        }
        return out;
      },
      loc);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, SourceLocation loc) {
  const int device = CommonDevice({&x, &index}, "index_select", loc);
  const int64_t d = Check(ir::NormalizeDim(dim, x.rank()), "index_select", loc);
  Shape out = Check(ir::InferIndexSelect(x.shape(), d, index.shape()), "index_select", loc);
  detail::CheckKnownIndices(index, x.dim(d), "index_select", loc);
  Tensor r = MakeTensor(OpKind::kIndexSelect, {ValueOf(x), ValueOf(index)}, std::move(out), device, loc,
                        ir::Attributes{{AttrKey::kAxis, d}});
  return Record(
      r, "index_select", {x, index},
      [d, loc](const Tensor& g, const Tensor&, const Grads& in) -> Grads {
        // Rows picked several times receive the sum of their gradients: a scatter-add, O(n * row).
        const Tensor& x = in[0];
        Tensor zero = zeros(x.sizes(), g.dtype(), g.device(), loc);
        return {detail::IndexAddUnchecked(zero, d, in[1], g, loc), Tensor()};
      },
      loc);
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, SourceLocation loc) {
  const int64_t d = Check(ir::NormalizeDim(dim, ImplOf(x, "gather", loc).shape.rank()), "gather", loc);
  Check(ir::InferGather(x.shape(), d, index.shape()), "gather", loc);
  detail::CheckKnownIndices(index, x.dim(d), "gather", loc);
  return detail::GatherAs(x, d, index, nullptr, loc);
}

Tensor detail::GatherAs(const Tensor& x, int64_t d, const Tensor& index, const char* api_name,
                        const SourceLocation& loc) {
  const int device = CommonDevice({&x, &index}, "gather", loc);
  Shape out = Check(ir::InferGather(x.shape(), d, index.shape()), api_name ? api_name : "gather", loc);
  Tensor r = MakeTensor(OpKind::kGather, {ValueOf(x), ValueOf(index)}, std::move(out), device, loc,
                        ir::Attributes{{AttrKey::kAxis, d}}, api_name);
  return Record(
      r, "gather", {x, index},
      [d, loc](const Tensor& g, const Tensor&, const Grads& in) -> Grads {
        // grad_x[.., k, ..] = sum over j of g[.., j, ..] where index[.., j, ..] == k: a scatter-add.
        const Tensor& x = in[0];
        Tensor zero = zeros(x.sizes(), g.dtype(), g.device(), loc);
        return {detail::ScatterAddUnchecked(zero, d, in[1], g, loc), Tensor()};
      },
      loc);
}

Tensor one_hot(const Tensor& index, int64_t num_classes, DType dtype, SourceLocation loc) {
  return detail::OneHotAs(index, num_classes, dtype, "one_hot", loc);
}

Tensor detail::OneHotAs(const Tensor& index, int64_t num_classes, DType dtype, const char* api_name,
                        const SourceLocation& loc) {
  const detail::TensorImpl& impl = ImplOf(index, api_name, loc);
  Tensor out = OneHotUnchecked(index, num_classes, dtype, loc);
  // PyTorch refuses an index outside [0, num_classes); a row of zeros would be silent garbage.
  if (detail::CheckKnownIndices(index, num_classes, api_name, loc)) return out;
  // Indices only the device knows are checked there, by the kernel that checks index_select's: selecting
  // one zero per index from a vector of num_classes zeros fails for an index out of range, so reading
  // the result (or anything computed from it) reports that index, as the caller's; adding the zeros
  // changes no value.
  const DType zero_type = dtype == DType::kBool ? DType::kI32 : dtype;
  std::vector<int64_t> dims(impl.shape.dims().begin(), impl.shape.dims().end());
  dims.push_back(1);
  const Tensor table = zeros({num_classes}, zero_type, Device{impl.device}, loc);
  const Tensor flat = reshape(index, {-1}, loc);
  Tensor picked = MakeTensor(OpKind::kIndexSelect, {ValueOf(table), ValueOf(flat)},
                             Check(ir::InferIndexSelect(table.shape(), 0, flat.shape()), api_name, loc), impl.device,
                             loc, ir::Attributes{{AttrKey::kAxis, int64_t{0}}}, api_name);
  Tensor check = reshape(picked, dims, loc);
  if (dtype == DType::kBool) return logical_or(out, ne(check, Scalar::Static(0), loc), loc);
  return out + TensorArg(check, loc);
}

// ---- Method forms -----------------------------------------------------------------------------------

Tensor Tensor::reshape(std::vector<int64_t> sizes, SourceLocation loc) const {
  return lazyrt::reshape(*this, std::move(sizes), loc);
}
Tensor Tensor::transpose(int64_t dim0, int64_t dim1, SourceLocation loc) const {
  return lazyrt::transpose(*this, dim0, dim1, loc);
}
Tensor Tensor::sum(std::vector<int64_t> dims, bool keepdim, SourceLocation loc) const {
  return lazyrt::sum(*this, std::move(dims), keepdim, loc);
}
Tensor Tensor::mean(std::vector<int64_t> dims, bool keepdim, SourceLocation loc) const {
  return lazyrt::mean(*this, std::move(dims), keepdim, loc);
}
Tensor Tensor::to(DType dtype, SourceLocation loc) const { return lazyrt::cast(*this, dtype, loc); }

}  // namespace lazyrt
