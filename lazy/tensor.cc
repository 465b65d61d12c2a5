#include "lazy/tensor.h"

#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "ir/dump.h"
#include "ir/post_order.h"
#include "ir/shape_inference.h"
#include "lazy/metrics.h"
#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lazy/tracing.h"
#include "lowering/dtype.h"
#include "pjrt_sim/element_ops.h"

namespace lazyrt {

using detail::ImplOf;
using detail::TensorImpl;

std::string Device::ToString() const { return absl::StrCat("lazy:", index); }

namespace detail {

TensorImpl& ImplOf(const Tensor& t, absl::string_view op, const SourceLocation& loc) {
  if (!t.defined()) throw Error(absl::StrCat(op, ": use of an undefined tensor"), loc);
  return *t.impl();
}

ir::Value ValueOf(const Tensor& t) {
  TensorImpl& impl = *t.impl();
  if (!impl.ir) {
    impl.ir =
        ir::Value{ir::MakeNode(ir::OpKind::kDeviceData, ir::OperandList{}, ir::OneShape(impl.shape), ir::Attributes{},
                               std::make_shared<BufferLeaf>(impl.buffer, impl.sharded), impl.created_at)};
  }
  // The leaf stays the tensor's own (it is not pending); each use of a sharded one is annotated.
  if (impl.sharding && impl.ir.node->op() == ir::OpKind::kDeviceData) return Sharded(impl.ir, impl);
  return impl.ir;
}

ir::Value Sharded(const ir::Value& v, const TensorImpl& impl) {
  if (!impl.sharding) return v;
  const ir::Value& unannotated = v.node->op() == ir::OpKind::kShard ? v.node->operand(0) : v;
  return ir::Value{ir::MakeNode(ir::OpKind::kShard, ir::OperandList{unannotated}, ir::OneShape(impl.shape),
                                *impl.sharding, nullptr, impl.created_at)};
}

int CommonDevice(std::initializer_list<const Tensor*> tensors, absl::string_view op, const SourceLocation& loc) {
  int device = -1;
  for (const Tensor* t : tensors) {
    const int d = ImplOf(*t, op, loc).device;
    if (device >= 0 && d != device) {
      throw Error(absl::StrCat(op, ": tensors are on different devices, ", Device{device}.ToString(), " and ",
                               Device{d}.ToString(), "; move one of them first with .to(Device{", device,
                               "}) or .to(Device{", d, "})"),
                  loc);
    }
    device = d;
  }
  return device;
}

ir::Value ScalarValue(Scalar s, DType dtype, const SourceLocation& loc) {
  const bool special = Runtime::Get().options().special_scalars && (s.value() == 0 || s.value() == 1);
  if (s.is_static() || special) {
    return ir::Value{ir::MakeNode(ir::OpKind::kConstant, ir::OperandList{}, ir::OneShape(Shape(dtype, {})),
                                  ir::Attributes{{ir::AttrKey::kValue, s.value()}}, nullptr, loc)};
  }
  // Beside its node in the node arena: only the node holds it, and a general allocation and free cost
  // more than the rest of the leaf. (The step's seed leaf, held across the step's graphs, is not.)
  return ir::Value{ir::MakeNode(ir::OpKind::kDeviceData, ir::OperandList{}, ir::OneShape(Shape(dtype, {})),
                                ir::Attributes{},
                                std::allocate_shared<ScalarLeaf>(ir::NodeAllocator<ScalarLeaf>{}, s.value()), loc)};
}

ir::Value Converted(ir::Value v, DType dtype, const SourceLocation& loc) {
  if (v.shape().dtype() == dtype) return v;  // moved: no reference count touched
  return ir::Value{ir::MakeNode(ir::OpKind::kConvert, ir::OperandList{v}, ir::OneShape(v.shape().WithDType(dtype)),
                                ir::Attributes{{ir::AttrKey::kDType, dtype}}, nullptr, loc)};
}

Tensor MakeTensor(ir::OpKind op, ir::OperandList operands, Shape shape, int device, const SourceLocation& loc,
                  ir::Attributes attrs, const char* api_name) {
  Tensor out = NewTensor(shape, device, loc);
  out.impl()->ir = ir::Value{
      ir::MakeNode(op, std::move(operands), ir::OneShape(std::move(shape)), std::move(attrs), nullptr, loc, api_name)};
  Runtime& rt = Runtime::Get();
  DeviceState& state = rt.device_state({device}, loc);
  state.Register(out.impl());
  const int64_t limit = rt.options().graph_limit;
  if (limit > 0 && ++state.traced_nodes >= limit) Sync({device}, SyncCause::kGraphLimit, loc);
  return out;
}

}  // namespace detail

namespace {

// A tensor of host `values`: copied (no `owner`: FromData), or used in place for as long as `*owner` is
// held (FromExternal).
template <typename T>
Tensor FromHost(std::span<const T> values, const std::vector<int64_t>& dims, DType dtype, Device device,
                std::optional<std::shared_ptr<const void>> owner, const SourceLocation& loc) {
  const bool in_place = owner.has_value();
  const char* api = in_place ? "FromExternal" : "FromData";
  if (in_place && *owner == nullptr) {
    throw Error("FromExternal: no owner to keep the values alive (FromData copies them)", loc);
  }
  Shape shape(dtype, dims);
  for (int64_t d : dims) {
    if (d < 0) throw Error(absl::StrCat(api, ": negative dimension in ", shape.ToString()), loc);
  }
  if (static_cast<int64_t>(values.size()) != shape.numel()) {
    throw Error(absl::StrCat(api, ": ", values.size(), " values do not fill ", shape.ToString(), " (", shape.numel(),
                             " elements)"),
                loc);
  }
  detail::Runtime& rt = detail::Runtime::Get();
  detail::DeviceState& state = rt.device_state(device, loc);
  const pjrt::ArrayShape array{lowering::DeviceType(dtype), std::vector<int64_t>(dims.begin(), dims.end())};
  absl::StatusOr<std::shared_ptr<pjrt::Buffer>> buffer =
      in_place ? rt.client().BufferFromHostInPlace(values.data(), array, state.device, *std::move(owner))
               : rt.client().BufferFromHost(values.data(), array, state.device);
  ThrowIfError(buffer.status(), api, loc);
  static std::atomic<int64_t>& transfers = Counter(counters::kTransfersToDevice);  // looked up once
  if (!in_place) transfers.fetch_add(1);  // a copy to the device; data used in place moves nothing
  Tensor out = detail::NewTensor(std::move(shape), device.index, loc);
  out.impl()->buffer = *std::move(buffer);
  return out;
}

}  // namespace

// The copying and the in-place factory of each host element type.
#define LAZYRT_HOST_FACTORIES(T, DTYPE)                                                               \
  Tensor Tensor::FromData(std::span<const T> values, const std::vector<int64_t>& dims, Device device, \
                          SourceLocation loc) {                                                       \
    return FromHost(values, dims, DTYPE, device, std::nullopt, loc);                                  \
  }                                                                                                   \
  Tensor Tensor::FromExternal(std::span<const T> values, const std::vector<int64_t>& dims,            \
                              std::shared_ptr<const void> owner, Device device, SourceLocation loc) { \
    return FromHost(values, dims, DTYPE, device, std::move(owner), loc);                              \
  }
LAZYRT_HOST_FACTORIES(float, DType::kF32)
LAZYRT_HOST_FACTORIES(double, DType::kF64)
LAZYRT_HOST_FACTORIES(int32_t, DType::kI32)
LAZYRT_HOST_FACTORIES(int64_t, DType::kI64)
#undef LAZYRT_HOST_FACTORIES

Tensor Tensor::FromData(std::initializer_list<float> values, std::initializer_list<int64_t> dims, Device device,
                        SourceLocation loc) {
  return FromData(std::span<const float>(values.begin(), values.size()), std::vector<int64_t>(dims), device, loc);
}

const Shape& Tensor::shape() const { return ImplOf(*this, "shape", SourceLocation::current()).shape; }

int64_t Tensor::dim(int64_t i) const {
  const Shape& s = shape();
  return s.dim(detail::Check(ir::NormalizeDim(i, s.rank()), "dim", SourceLocation::current()));
}

Device Tensor::device() const { return {ImplOf(*this, "device", SourceLocation::current()).device}; }

bool Tensor::is_pending() const {
  const TensorImpl& impl = ImplOf(*this, "is_pending", SourceLocation::current());
  return impl.ir && impl.ir.node->op() != ir::OpKind::kDeviceData;
}

ir::Value Tensor::ir_value() const {
  ImplOf(*this, "ir_value", SourceLocation::current());
  return detail::ValueOf(*this);
}

void Tensor::assign(const Tensor& other, SourceLocation loc) {
  const TensorImpl& src = ImplOf(other, "assign", loc);
  TensorImpl& dst = ImplOf(*this, "assign", loc);
  if (!(src.shape == dst.shape)) {
    throw Error(absl::StrCat("assign: cannot assign ", src.shape.ToString(), " to a tensor of ", dst.shape.ToString()),
                loc);
  }
  detail::CommonDevice({this, &other}, "assign", loc);
  dst.buffer = src.buffer;
  dst.sharded = src.sharded;
  // An assigned tensor keeps its layout: an optimizer's update of a sharded parameter stays sharded.
  dst.ir = src.ir && src.ir.node->op() != ir::OpKind::kDeviceData ? detail::Sharded(src.ir, dst) : src.ir;
  if (dst.ir && dst.ir.node->op() != ir::OpKind::kDeviceData) {
    detail::Runtime::Get().device_state({dst.device}, loc).Register(&dst);
  }
}

namespace {

// Computes `t` if pending and copies its elements to the host as T.
template <typename T>
std::vector<T> ReadBack(const Tensor& t, SyncCause cause, const SourceLocation& loc) {
  const absl::string_view op = SyncCauseName(cause);
  TensorImpl& impl = ImplOf(t, op, loc);
  if (t.is_pending()) detail::Sync({impl.device}, cause, loc);
  if (impl.buffer == nullptr && impl.sharded == nullptr) {
    throw Error(absl::StrCat(op, ": the tensor holds no data"), loc);
  }
  const Shape& shape = impl.shape;
  std::vector<unsigned char> raw(static_cast<size_t>(shape.byte_size()));
  absl::Status status = absl::OkStatus();
  if (impl.buffer != nullptr) {
    status = impl.buffer->ToHost(raw.data(), raw.size());
  } else {  // the global value assembled from the pieces on the mesh's devices
    absl::StatusOr<std::vector<unsigned char>> assembled = detail::AssembleOnHost(*impl.sharded, shape);
    status = assembled.status();
    if (assembled.ok()) raw = *std::move(assembled);
  }
  if (!status.ok()) {
    throw Error(absl::StrCat(op, ": computing ", shape.ToString(), " failed: ", status.message()), loc);
  }
  Counter(counters::kTransfersToHost).fetch_add(1);
  std::vector<T> out(static_cast<size_t>(shape.numel()));
  const pjrt::PrimitiveType type = lowering::DeviceType(shape.dtype());
  for (size_t i = 0; i < out.size(); ++i) {
    if constexpr (std::is_same_v<T, int64_t>) {
      if (type == pjrt::PrimitiveType::kS64) {  // no round trip through double
        std::memcpy(&out[i], raw.data() + i * 8, 8);
        continue;
      }
    }
    out[i] = pjrt::SaturatingCast<T>(pjrt::LoadElement(raw.data(), type, static_cast<int64_t>(i)));
  }
  return out;
}

std::vector<ir::Value> RootsOf(const std::vector<Tensor>& tensors) {
  std::vector<ir::Value> roots;
  for (const Tensor& t : tensors) {
    ImplOf(t, "graph", SourceLocation::current());
    roots.push_back(detail::ValueOf(t));
  }
  return roots;
}
}  // namespace

double Tensor::item(SourceLocation loc) const {
  const int64_t n = ImplOf(*this, "item", loc).shape.numel();
  if (n != 1) throw Error(absl::StrCat("item: needs a single element, ", shape().ToString(), " has ", n), loc);
  return ReadBack<double>(*this, SyncCause::kItem, loc)[0];
}

template <typename T>
std::vector<T> Tensor::to_vector(SourceLocation loc) const {
  return ReadBack<T>(*this, SyncCause::kToHost, loc);
}
template std::vector<float> Tensor::to_vector<float>(SourceLocation) const;
template std::vector<double> Tensor::to_vector<double>(SourceLocation) const;
template std::vector<int32_t> Tensor::to_vector<int32_t>(SourceLocation) const;
template std::vector<int64_t> Tensor::to_vector<int64_t>(SourceLocation) const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>(SourceLocation) const;

std::string graph_text(const std::vector<Tensor>& tensors) { return ir::GraphText(RootsOf(tensors)); }
std::string graph_dot(const std::vector<Tensor>& tensors) { return ir::GraphDot(RootsOf(tensors)); }
uint64_t graph_hash(const std::vector<Tensor>& tensors) {
  std::vector<ir::Value> roots = RootsOf(tensors);
  ir::PostOrder order(roots);
  return order.dag_hash();
}

}  // namespace lazyrt
