// Building blocks every op uses to record IR: operand values, scalars as parameters, dtype promotion,
// and wrapping a new node in a Tensor. Internal to lazy/.
#pragma once

#include <initializer_list>
#include <optional>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "ir/node.h"
#include "lazy/runtime.h"
#include "lazy/tensor.h"

namespace lazyrt::detail {

// The tensor's implementation; throws if `t` is undefined.
TensorImpl& ImplOf(const Tensor& t, absl::string_view op, const SourceLocation& loc);
// The IR value computing `t` (creating its DeviceData leaf on first use after a sync).
ir::Value ValueOf(const Tensor& t);
// `v` annotated with `impl`'s sharding (a Shard node; `v` itself when the tensor is not sharded). A Shard
// node `v` is re-annotated, not wrapped.
ir::Value Sharded(const ir::Value& v, const TensorImpl& impl);
// The device shared by `tensors`; throws naming both devices otherwise.
int CommonDevice(std::initializer_list<const Tensor*> tensors, absl::string_view op, const SourceLocation& loc);

// A host scalar as an IR value of `dtype` and shape []: a device parameter, or a baked constant if
// static (or 0/1 with special scalars on).
ir::Value ScalarValue(Scalar s, DType dtype, const SourceLocation& loc);
// A Convert node, or `v` itself if it already has `dtype`.
ir::Value Converted(ir::Value v, DType dtype, const SourceLocation& loc);

// A new node with one output, wrapped in a registered pending tensor. `api_name`: the public function
// to name in a run-time error when it is not the op's own (ir::Node::api_name).
Tensor MakeTensor(ir::OpKind op, ir::OperandList operands, Shape shape, int device, const SourceLocation& loc,
                  ir::Attributes attrs = {}, const char* api_name = nullptr);

// Refuses an index outside [0, size) at the call when the index's values are already known (a tensor
// made by FromData, or computed by a finished step); indices only the device knows are checked by the
// kernel that reads them, and reported when the result is read. Returns whether the values were known.
// `ignored`: a value that is not an index (cross_entropy's ignore_index).
bool CheckKnownIndices(const Tensor& index, int64_t size, absl::string_view op, const SourceLocation& loc,
                       std::optional<int64_t> ignored = std::nullopt);

// Throws unless `x` has a floating-point dtype.
void RequireFloating(const Tensor& x, absl::string_view op, const SourceLocation& loc);
// Normalized, sorted, unique reduction dims of `shape` (empty means all); throws for a dim out of range
// or repeated.
std::vector<int64_t> ReductionDims(const Shape& shape, std::vector<int64_t> dims, absl::string_view op,
                                   const SourceLocation& loc);

// Unwraps `result` or throws Error("<op>: <message> (at file:line)").
template <typename T>
T Check(absl::StatusOr<T> result, absl::string_view op, const SourceLocation& loc) {
  ThrowIfError(result.status(), op, loc);
  return *std::move(result);
}

}  // namespace lazyrt::detail
