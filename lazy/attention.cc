// scaled_dot_product_attention: one fused Attention node forward, one fused AttentionGrad node for
// its gradients (pjrt_sim/kernels/attention.h computes both blockwise).
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/shape_inference.h"
#include "lazy/autograd.h"
#include "lazy/runtime.h"
#include "lazy/tensor.h"
#include "lazy/tracing.h"

namespace lazyrt {

using detail::Check;
using detail::CommonDevice;
using detail::MakeTensor;
using detail::Record;
using detail::SumToShape;
using detail::ValueOf;
using ir::AttrKey;
using ir::OpKind;

namespace {

constexpr absl::string_view kOp = "scaled_dot_product_attention";

// Rows [begin, begin + rows * width) of the last dim of `packed`, reshaped to [batch..., rows, width].
Tensor Unpack(const Tensor& packed, int64_t begin, int64_t rows, int64_t width, const SourceLocation& loc) {
  std::vector<int64_t> dims = packed.sizes();
  dims.back() = rows;
  dims.push_back(width);
  return reshape(slice(packed, -1, begin, begin + rows * width, 1, loc), dims, loc);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale, SourceLocation loc) {
  const bool masked = attn_mask.defined();
  const int device = masked ? CommonDevice({&q, &k, &v, &attn_mask}, kOp, loc) : CommonDevice({&q, &k, &v}, kOp, loc);
  if (!(dropout_p >= 0 && dropout_p <= 1)) {
    throw Error(absl::StrCat(kOp, ": dropout_p must be in [0, 1], got ", dropout_p), loc);
  }
  if (is_causal && masked) {
    throw Error(absl::StrCat(kOp, ": is_causal and an explicit attn_mask ", attn_mask.shape().ToString(),
                             " cannot be combined (as in PyTorch): fold the causal mask into attn_mask"),
                loc);
  }
  const Shape out_shape =
      Check(ir::InferAttention(q.shape(), k.shape(), v.shape(), masked ? &attn_mask.shape() : nullptr), kOp, loc);
  const int64_t e = q.dim(-1);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(e)));
  if (!std::isfinite(s)) {
    throw Error(absl::StrCat(kOp, ": the scale must be finite, got ", s,
                             scale.has_value() ? "" : absl::StrCat(" (1/sqrt(E) with E = ", e, ")")),
                loc);
  }
  if (masked && ir::IsFloating(attn_mask.dtype()) && attn_mask.requires_grad() && detail::GradModeEnabled()) {
    // PyTorch differentiates an added mask; its gradient (dS) is [..., L, S], the very matrix the fused
    // kernel avoids. Such a mask takes the unfused path, which gives it.
    Tensor scores = matmul(q, transpose(k, -1, -2, loc), loc) * ScalarArg(Scalar::Static(s), loc);
    Tensor probs = softmax(scores + TensorArg(attn_mask, loc), -1, loc);
    if (dropout_p > 0) {
      const Tensor drawn =
          rand(probs.sizes(), Scalar::Static(0.0), Scalar::Static(1.0), probs.dtype(), probs.device(), loc);
      const double keep = dropout_p < 1 ? 1 / (1 - dropout_p) : 0;
      probs = where(ge(drawn, Scalar::Static(dropout_p), loc), probs * ScalarArg(Scalar::Static(keep), loc),
                    zeros({}, probs.dtype(), probs.device(), loc), loc);
    }
    return matmul(probs, v, loc);
  }
  ir::Attributes attrs{{AttrKey::kScale, s}, {AttrKey::kCausal, is_causal}};
  ir::OperandList operands{ValueOf(q), ValueOf(k), ValueOf(v)};
  if (masked) operands.push_back(ValueOf(attn_mask));
  // Dropout draws in the kernels, forward and backward alike, from this step's seed and a stream of its own.
  ir::Value seed;
  if (dropout_p > 0) {
    detail::DeviceState& state = detail::Runtime::Get().device_state(Device{device}, loc);
    seed = state.SeedValue();
    attrs.Set(AttrKey::kDropout, dropout_p).Set(AttrKey::kStream, state.NextRngStream());
    operands.push_back(seed);
  }
  // [..., L, Ev + 1]: the output, then each row's logsumexp, which the backward pass reads.
  const Tensor packed = MakeTensor(OpKind::kAttention, operands, out_shape, device, loc, attrs);
  const int64_t ev = v.dim(-1);
  // Of q's dtype: bf16's packed result is f32 (a cast to the same dtype is the tensor itself).
  const Tensor out = cast(slice(packed, -1, 0, ev, 1, loc), q.dtype(), loc);
  return Record(
      out, "scaled_dot_product_attention", {q, k, v},
      [packed, attn_mask, seed, attrs, device, loc](const Tensor& g, const Tensor&, const std::vector<Tensor>& x) {
        const Tensor &q = x[0], &k = x[1], &v = x[2];
        const Shape* mask = attn_mask.defined() ? &attn_mask.shape() : nullptr;
        ir::OperandList operands{ValueOf(q), ValueOf(k), ValueOf(v), ValueOf(packed), ValueOf(g)};
        if (mask != nullptr) operands.push_back(ValueOf(attn_mask));
        if (seed) operands.push_back(seed);
        const Shape shape = Check(ir::InferAttentionGrad(q.shape(), k.shape(), v.shape(), mask), kOp, loc);
        const Tensor grads = MakeTensor(OpKind::kAttentionGrad, operands, shape, device, loc, attrs);
        const int64_t l = q.dim(-2), s = k.dim(-2), e = q.dim(-1), ev = v.dim(-1);
        if (l == s && e == ev) {
          // Self-attention's three gradients are alike: [..., 3, L, E] slices of one array. Sliced along
          // that 3, each is a view the compiler reads through into its readers (say, the transpose back
          // to [batch, time, heads, E]), where a slice of the flat rows must be copied out first.
          std::vector<int64_t> dims = grads.sizes();
          dims.back() = 3;
          dims.insert(dims.end(), {l, e});
          const Tensor parts = reshape(grads, dims, loc);
          std::vector<int64_t> part = dims;
          part.erase(part.end() - 3);
          std::vector<Tensor> out;
          for (int64_t i = 0; i < 3; ++i) {
            out.push_back(SumToShape(reshape(slice(parts, -3, i, i + 1, 1, loc), part, loc), x[i].shape(), loc));
          }
          return out;
        }
        return std::vector<Tensor>{SumToShape(Unpack(grads, 0, l, e, loc), q.shape(), loc),
                                   SumToShape(Unpack(grads, l * e, s, e, loc), k.shape(), loc),
                                   SumToShape(Unpack(grads, l * e + s * e, s, ev, loc), v.shape(), loc)};
      },
      loc);
}

}  // namespace lazyrt
