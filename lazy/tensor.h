// The public tensor API. A Tensor is a cheap handle; ops on it record IR nodes and run nothing until a
// sync barrier. Shapes are checked when an op is called: a mismatch throws lazyrt::Error naming the
// shapes and the caller's file:line.
#pragma once

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ir/dtype.h"
#include "ir/node.h"
#include "ir/op_kind.h"
#include "ir/shape.h"
#include "lazy/error.h"

namespace lazyrt {

using ir::DType;
using ir::Shape;
using SourceLocation = std::source_location;
#define LAZYRT_HERE SourceLocation loc = SourceLocation::current()

// A device of the runtime: "lazy:0".
struct Device {
  int index = 0;
  std::string ToString() const;
  friend bool operator==(Device, Device) = default;
};

// A host scalar used in an op. By default it becomes a device parameter, so a value that changes
// from step to step (a learning rate, a step count) does not change the graph. Mark it static only
// when it is a true constant of the program; static values are baked into the graph.
class Scalar {
 public:
  template <typename T>
    requires std::is_arithmetic_v<T>
  Scalar(T value) : value_(static_cast<double>(value)), integral_(std::is_integral_v<T>) {}  // NOLINT

  static Scalar Static(double value) {
    Scalar s(value);
    s.static_ = true;
    return s;
  }
  double value() const { return value_; }
  bool is_static() const { return static_; }
  bool is_integral() const { return integral_; }

 private:
  double value_;
  bool integral_;
  bool static_ = false;
};
inline Scalar static_scalar(double value) { return Scalar::Static(value); }

class Tensor;

// Implicit conversions that capture the caller's location, for operators (which cannot take a
// defaulted location parameter of their own).
struct TensorArg {
  TensorArg(const Tensor& t, SourceLocation where = SourceLocation::current()) : tensor(t), loc(where) {}  // NOLINT
  const Tensor& tensor;
  SourceLocation loc;
};
struct ScalarArg {
  template <typename T>
    requires std::is_arithmetic_v<T>
  ScalarArg(T v, SourceLocation where = SourceLocation::current()) : scalar(v), loc(where) {}       // NOLINT
  ScalarArg(Scalar s, SourceLocation where = SourceLocation::current()) : scalar(s), loc(where) {}  // NOLINT
  Scalar scalar;
  SourceLocation loc;
};

namespace detail {
struct TensorImpl;
// A TensorImpl's reference count (kept in it: see TensorImpl::refs).
void Retain(TensorImpl* impl) noexcept;
void Release(TensorImpl* impl) noexcept;
// The tensor that takes over one reference to `impl`, already counted: a new TensorImpl's first, or
// one the registry has just taken.
inline Tensor AdoptTensor(TensorImpl* impl) noexcept;
}  // namespace detail

class Tensor {
 public:
  // An undefined tensor (no data, no IR). Most operations on it throw.
  Tensor() = default;
  // Copies share the tensor (as PyTorch's handles do); moves leave the source undefined.
  Tensor(const Tensor& other) noexcept : impl_(other.impl_) {
    if (impl_ != nullptr) detail::Retain(impl_);
  }
  Tensor(Tensor&& other) noexcept : impl_(std::exchange(other.impl_, nullptr)) {}
  Tensor& operator=(const Tensor& other) noexcept {
    Tensor copy(other);
    std::swap(impl_, copy.impl_);
    return *this;
  }
  Tensor& operator=(Tensor&& other) noexcept {
    Tensor moved(std::move(other));
    std::swap(impl_, moved.impl_);
    return *this;
  }
  ~Tensor() {
    if (impl_ != nullptr) detail::Release(impl_);
  }

  // Copies host data to `device`. `values.size()` must equal the product of `dims`.
  static Tensor FromData(std::span<const float> values, const std::vector<int64_t>& dims, Device device = {},
                         LAZYRT_HERE);
  static Tensor FromData(std::span<const double> values, const std::vector<int64_t>& dims, Device device = {},
                         LAZYRT_HERE);
  static Tensor FromData(std::span<const int32_t> values, const std::vector<int64_t>& dims, Device device = {},
                         LAZYRT_HERE);
  static Tensor FromData(std::span<const int64_t> values, const std::vector<int64_t>& dims, Device device = {},
                         LAZYRT_HERE);
  static Tensor FromData(std::initializer_list<float> values, std::initializer_list<int64_t> dims, Device device = {},
                         LAZYRT_HERE);
  // Uses host data in place, without copying it (torch.from_blob; PJRT's zero-copy host buffers): the
  // tensor and the steps computing from it read `values` where they are. `owner` (not null) keeps them
  // alive, and is held until the tensor and every step reading it are done; they must not change
  // meanwhile. For data that outlives its steps unchanged, such as a dataset's batches.
  static Tensor FromExternal(std::span<const float> values, const std::vector<int64_t>& dims,
                             std::shared_ptr<const void> owner, Device device = {}, LAZYRT_HERE);
  static Tensor FromExternal(std::span<const double> values, const std::vector<int64_t>& dims,
                             std::shared_ptr<const void> owner, Device device = {}, LAZYRT_HERE);
  static Tensor FromExternal(std::span<const int32_t> values, const std::vector<int64_t>& dims,
                             std::shared_ptr<const void> owner, Device device = {}, LAZYRT_HERE);
  static Tensor FromExternal(std::span<const int64_t> values, const std::vector<int64_t>& dims,
                             std::shared_ptr<const void> owner, Device device = {}, LAZYRT_HERE);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  DType dtype() const { return shape().dtype(); }
  const ir::Dims& dims() const { return shape().dims(); }
  // The dims as the factory functions and reshape take them.
  std::vector<int64_t> sizes() const { return {dims().begin(), dims().end()}; }
  int64_t dim(int64_t i) const;
  int64_t rank() const { return shape().rank(); }
  int64_t numel() const { return shape().numel(); }
  Device device() const;
  // True while the tensor is defined by IR not yet executed.
  bool is_pending() const;
  // The IR value computing this tensor (a DeviceData leaf for materialized tensors).
  ir::Value ir_value() const;

  // Makes this handle (and every copy of it) refer to `other`'s value: an in-place update, as an
  // optimizer does to parameters. Shapes must match.
  void assign(const Tensor& other, LAZYRT_HERE);

  // Reading values. A pending tensor is computed first: an implicit sync of the whole pending graph
  // on its device (cause `item` / `to_host`, recorded with the caller's location).
  // The single element, as a double. Throws if the tensor has more than one element.
  double item(LAZYRT_HERE) const;
  // All elements, row-major, converted to T (float, double, int32_t, int64_t or uint8_t).
  template <typename T>
  std::vector<T> to_vector(LAZYRT_HERE) const;

  // ---- Autograd -------------------------------------------------------------------------------
  // Marks a leaf tensor as one whose gradient backward() accumulates (a parameter). Returns *this.
  Tensor& requires_grad_(bool on = true);
  bool requires_grad() const;
  // The gradient accumulated by backward(); undefined before any.
  Tensor grad() const;
  // Replaces the accumulated gradient (an undefined tensor resets it, as zero_grad does).
  void set_grad(const Tensor& grad);
  // Reverse-mode differentiation of this one-element tensor: accumulates d(this)/d(leaf) into every
  // leaf that requires grad. Only records lazy IR, so forward, backward and the optimizer update can
  // be one graph. Frees the autograd graph behind this tensor.
  void backward(LAZYRT_HERE) const;
  // The same value, cut off from the autograd graph.
  Tensor detach() const;

  // Method forms of common ops (see the free functions below).
  Tensor reshape(std::vector<int64_t> sizes, LAZYRT_HERE) const;
  Tensor transpose(int64_t dim0, int64_t dim1, LAZYRT_HERE) const;
  Tensor sum(std::vector<int64_t> dims, bool keepdim = false, LAZYRT_HERE) const;
  Tensor mean(std::vector<int64_t> dims, bool keepdim = false, LAZYRT_HERE) const;
  Tensor to(DType dtype, LAZYRT_HERE) const;
  // The same values on `device` (PyTorch's tensor.to(device)); this tensor itself when already there.
  // The copy is asynchronous: it is queued on this tensor's device after the work that computes it,
  // ops on the result wait for it on `device`, and the host goes on at once. A pending tensor is
  // computed first by a sync of its device (cause `to_device`, which returns without waiting): a graph
  // runs on one device, and what moves between devices is data. The result's bytes count on `device`
  // from the call on; this tensor's stay on its own device until it is dropped. Differentiable: the
  // gradient goes back to this tensor's device. An unknown device is an error naming the valid ones.
  Tensor to(Device device, LAZYRT_HERE) const;

  detail::TensorImpl* impl() const { return impl_; }

 private:
  friend Tensor detail::AdoptTensor(detail::TensorImpl* impl) noexcept;
  explicit Tensor(detail::TensorImpl* impl) noexcept : impl_(impl) {}

  detail::TensorImpl* impl_ = nullptr;
};

inline Tensor detail::AdoptTensor(TensorImpl* impl) noexcept { return Tensor(impl); }

// While alive, ops record no autograd graph (optimizer updates, evaluation).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// ---- Factories ---------------------------------------------------------------------------------------
Tensor zeros(std::vector<int64_t> dims, DType dtype = DType::kF32, Device device = {}, LAZYRT_HERE);
Tensor ones(std::vector<int64_t> dims, DType dtype = DType::kF32, Device device = {}, LAZYRT_HERE);
// Every element `value` (a device parameter unless static).
Tensor full(std::vector<int64_t> dims, Scalar value, DType dtype = DType::kF32, Device device = {}, LAZYRT_HERE);
// [start, end) in steps of `step`.
Tensor arange(int64_t start, int64_t end, int64_t step = 1, DType dtype = DType::kI64, Device device = {}, LAZYRT_HERE);
inline Tensor arange(int64_t end, LAZYRT_HERE) { return arange(0, end, 1, DType::kI64, {}, loc); }
// Uniform in [low, high) / normal(mean, std), drawn on the device from the runtime's seed, which
// advances every step: the graph stays the same from step to step, the numbers do not.
Tensor rand(std::vector<int64_t> dims, Scalar low = Scalar::Static(0.0), Scalar high = Scalar::Static(1.0),
            DType dtype = DType::kF32, Device device = {}, LAZYRT_HERE);
Tensor randn(std::vector<int64_t> dims, Scalar mean = Scalar::Static(0.0), Scalar stddev = Scalar::Static(1.0),
             DType dtype = DType::kF32, Device device = {}, LAZYRT_HERE);
// Sets the device random seed (takes effect for random ops traced after the call).
void manual_seed(uint64_t seed, Device device = {});

// ---- Elementwise ----------------------------------------------------------------------------------
Tensor operator+(const Tensor& a, TensorArg b);
Tensor operator-(const Tensor& a, TensorArg b);
Tensor operator*(const Tensor& a, TensorArg b);
Tensor operator/(const Tensor& a, TensorArg b);
Tensor operator+(const Tensor& a, ScalarArg b);
Tensor operator-(const Tensor& a, ScalarArg b);
Tensor operator*(const Tensor& a, ScalarArg b);
Tensor operator/(const Tensor& a, ScalarArg b);
Tensor operator+(ScalarArg a, const Tensor& b);
Tensor operator-(ScalarArg a, const Tensor& b);
Tensor operator*(ScalarArg a, const Tensor& b);
Tensor operator/(ScalarArg a, const Tensor& b);
Tensor operator-(const Tensor& a);

Tensor add(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor sub(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor mul(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor div(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor pow(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor pow(const Tensor& a, Scalar exponent, LAZYRT_HERE);
Tensor maximum(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor minimum(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor eq(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor ne(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor lt(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor le(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor gt(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor ge(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor eq(const Tensor& a, Scalar b, LAZYRT_HERE);
Tensor ne(const Tensor& a, Scalar b, LAZYRT_HERE);
Tensor lt(const Tensor& a, Scalar b, LAZYRT_HERE);
Tensor le(const Tensor& a, Scalar b, LAZYRT_HERE);
Tensor gt(const Tensor& a, Scalar b, LAZYRT_HERE);
Tensor ge(const Tensor& a, Scalar b, LAZYRT_HERE);
Tensor logical_and(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor logical_or(const Tensor& a, const Tensor& b, LAZYRT_HERE);
Tensor logical_not(const Tensor& a, LAZYRT_HERE);
// cond ? a : b, with broadcasting.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, LAZYRT_HERE);
// As torch.masked_fill: `value` where the bool `mask` (broadcast to x's shape) is true, x elsewhere.
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value, LAZYRT_HERE);
// As torch.tril / torch.triu over the last two dims (any batch dims): elements on and below (tril) or on
// and above (triu) the diagonal `diagonal` (0 the main one, > 0 above it) are kept, the rest are 0.
Tensor tril(const Tensor& x, int64_t diagonal = 0, LAZYRT_HERE);
Tensor triu(const Tensor& x, int64_t diagonal = 0, LAZYRT_HERE);

Tensor neg(const Tensor& x, LAZYRT_HERE);
Tensor abs(const Tensor& x, LAZYRT_HERE);
// exp, log, sqrt, rsqrt, tanh, sigmoid, erf, sin, cos: one per row of LAZYRT_IR_FLOAT_UNARY_OPS
// (ir/op_kind.h). An integer tensor is computed in f32.
#define LAZYRT_X(name, fn, device) Tensor fn(const Tensor& x, LAZYRT_HERE);
LAZYRT_IR_FLOAT_UNARY_OPS(LAZYRT_X)
#undef LAZYRT_X
Tensor relu(const Tensor& x, LAZYRT_HERE);
// GELU as PyTorch's gelu: x * Phi(x) with the exact normal CDF (erf) by default; approximate = "tanh"
// uses 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Another approximate is an error.
Tensor gelu(const Tensor& x, absl::string_view approximate = "none", LAZYRT_HERE);
Tensor sign(const Tensor& x, LAZYRT_HERE);
Tensor cast(const Tensor& x, DType dtype, LAZYRT_HERE);

// ---- Contractions, reductions, composites ---------------------------------------------------------
// Batched matrix product with broadcast batch dims; a 1-D operand is treated as numpy.matmul does.
Tensor matmul(const Tensor& a, const Tensor& b, LAZYRT_HERE);
// Reductions over `dims` (negative dims count from the end; empty = all dims).
Tensor sum(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false, LAZYRT_HERE);
Tensor mean(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false, LAZYRT_HERE);
Tensor max(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false, LAZYRT_HERE);
Tensor min(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false, LAZYRT_HERE);
// Product over dims; integer and bool tensors multiply in i64, as PyTorch's prod.
Tensor prod(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false, LAZYRT_HERE);
// Index of the largest element along `dim` (the first one on ties), as i64.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false, LAZYRT_HERE);
Tensor softmax(const Tensor& x, int64_t dim, LAZYRT_HERE);
Tensor log_softmax(const Tensor& x, int64_t dim, LAZYRT_HERE);
// softmax(q k^T * scale + mask) v, as torch.nn.functional.scaled_dot_product_attention: q [..., L, E],
// k [..., S, E], v [..., S, Ev] (f32, f64 or bf16, batch dims broadcast) give [..., L, Ev] of q's dtype; bf16
// is multiplied as bf16 with f32 sums, its softmax and gradient sums f32 (see README). `attn_mask`, bool
// (true takes part) or q's dtype (added to the scores), broadcasts to [..., L, S]; `is_causal` lets query
// i see keys j <= i (top-left aligned, as torch) and excludes a mask. `scale` defaults to 1/sqrt(E).
// Computed by a fused kernel that never materializes the [L, S] scores (see README); a row with every
// key masked is NaN. dropout_p drops each probability with that chance, drawn on the device from the
// step's seed (manual_seed) like rand(), and scales the others by 1 / (1 - dropout_p).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, LAZYRT_HERE);

// ---- Normalization ---------------------------------------------------------------------------------
// As torch.nn.functional.layer_norm: (x - mean) / sqrt(var + eps) over the trailing dims
// `normalized_shape` (biased variance), times `weight` plus `bias` (each of shape normalized_shape, or
// undefined). One fused device kernel per direction; statistics accumulated in f64.
Tensor layer_norm(const Tensor& x, std::vector<int64_t> normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5, LAZYRT_HERE);
// As torch.nn.functional.rms_norm: x / sqrt(mean(x^2) + eps) over the trailing dims, times `weight`.
// eps nullopt is the machine epsilon of x's dtype, as torch.
Tensor rms_norm(const Tensor& x, std::vector<int64_t> normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt, LAZYRT_HERE);

// ---- Shape and data movement ----------------------------------------------------------------------
// One size may be -1 (inferred).
Tensor reshape(const Tensor& x, std::vector<int64_t> sizes, LAZYRT_HERE);
Tensor permute(const Tensor& x, std::vector<int64_t> perm, LAZYRT_HERE);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1, LAZYRT_HERE);
// Broadcast to `sizes` (-1 keeps a dimension).
Tensor expand(const Tensor& x, std::vector<int64_t> sizes, LAZYRT_HERE);
// x[start:end:step] along `dim`; start/end are clamped as in Python slicing.
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1, LAZYRT_HERE);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim, LAZYRT_HERE);
// Rows of `x` along `dim` picked by the 1-D integer `index` (an embedding lookup).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, LAZYRT_HERE);
// out[i][j] = x[index[i][j]][j] for dim 0 (and so on), as torch.gather.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, LAZYRT_HERE);
// out[..., c] = (index[...] == c), in i64 by default as torch.nn.functional.one_hot. An index outside
// [0, num_classes) is an error: at the call when the index's values are already known (FromData, or a
// finished step), otherwise when the result, or anything computed from it, is read.
Tensor one_hot(const Tensor& index, int64_t num_classes, DType dtype = DType::kI64, LAZYRT_HERE);
// As torch.nn.functional.embedding: the rows of `weight` [num_embeddings, dim] picked by integer
// `indices` of any rank -> [..., dim]. Its gradient is a scatter-add of the rows' gradients.
Tensor embedding(const Tensor& indices, const Tensor& weight, LAZYRT_HERE);
// As torch.scatter_add: x with src[c] added at x[c with c[dim] = index[c]] for every position c of index
// (index and src of x's rank; src may be larger than index, and only its leading part is added). The
// additions happen in one fixed order: the same bits on every run.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, LAZYRT_HERE);
// As torch.index_add: x with alpha * source's slice j along dim added at x's slice index[j] (1-D index).
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 Scalar alpha = Scalar::Static(1), LAZYRT_HERE);
// Every indexing op (index_select, gather, embedding, one_hot, scatter_add, index_add, cross_entropy's
// labels) refuses an index outside [0, size) (a negative one too, as torch): at the call when the
// index's values are already known, otherwise when the result, or anything computed from it, is read;
// the error names the op, the index, its position, the valid range and the line of the op's call.

// ---- Transformer ops: regularization, statistics, scans, sorting, splitting (lazy/transformer_ops.cc) ----
// As torch.nn.functional.dropout: each element kept with probability 1 - p and scaled by 1 / (1 - p), the
// keep mask drawn on the device from the runtime's seed (reproducible for a seed, new every step). The
// gradient reuses the forward's mask. Identity when !training or p == 0; zeros (x * 0) when p == 1; p
// outside [0, 1] is an error. Floating tensors only.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, LAZYRT_HERE);
// As torch.clamp: min(max(x, min), max); at least one bound must be given, and min > max gives max.
// The gradient passes where min <= x <= max (boundaries included, as PyTorch's). An integer tensor
// stays integer unless a bound is fractional (then f32), as PyTorch's type promotion.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt, LAZYRT_HERE);
// Variance over `dims` (empty = all) with Bessel's `correction` (divisor max(0, N - correction)), computed
// in two passes (the mean, then the squared deviations from it). Floating tensors only.
Tensor var(const Tensor& x, std::vector<int64_t> dims = {}, double correction = 1, bool keepdim = false, LAZYRT_HERE);
// sqrt(var(...)).
Tensor std(const Tensor& x, std::vector<int64_t> dims = {}, double correction = 1, bool keepdim = false, LAZYRT_HERE);
// Running sums along `dim`, as torch.cumsum: floating tensors keep their dtype (f32 accumulates in f64),
// integer and bool tensors sum in i64.
Tensor cumsum(const Tensor& x, int64_t dim, LAZYRT_HERE);
// The k largest (or smallest) elements along `dim` and their i64 positions, in order (largest first when
// `largest`). NaN counts as the largest value; ties come in increasing position. `sorted` = false returns
// them in that order too. k must be in [0, size of dim].
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true,
                               LAZYRT_HERE);
// The elements along `dim` in order, and their i64 positions in x. The sort is always stable (`stable`
// only names PyTorch's flag): equal elements keep their order; NaN sorts as the largest value.
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false,
                               LAZYRT_HERE);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false, LAZYRT_HERE);
// Pieces of `split_size` along `dim` (the last one smaller), or of the given sizes (which must sum to the
// dim's size), as torch.split.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0, LAZYRT_HERE);
std::vector<Tensor> split(const Tensor& x, std::vector<int64_t> split_sizes, int64_t dim = 0, LAZYRT_HERE);
// ceil(size / chunks)-sized pieces, as torch.chunk (which may give fewer than `chunks`).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0, LAZYRT_HERE);
// The tensors (of equal shapes; dtypes promote as cat's) joined along a new dim `dim`.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0, LAZYRT_HERE);

// ---- Inspecting graphs without running them --------------------------------------------------------
std::string graph_text(const std::vector<Tensor>& tensors);
std::string graph_dot(const std::vector<Tensor>& tensors);
// The DAG hash of the graph computing `tensors` (equal in any process that builds the same graph).
uint64_t graph_hash(const std::vector<Tensor>& tensors);

}  // namespace lazyrt
