// Strided views of stored arrays: a kernel reading a transpose or slice of an input where it is, not a
// copy of it. Their check against the input (every index inside it) and their walk in row-major order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

// Element (i_0, ..., i_r) of an array of `dims` at offset + sum(i_d * strides[d]) of its input
// (proto::OperandView). Empty dims: the input as it is, row-major.
struct OperandView {
  std::vector<int64_t> dims;
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

// The kinds of kernel that read operand views (the others have none).
constexpr bool ReadsOperandViews(proto::Kernel::Kind kind) {
  return kind == proto::Kernel::ATTENTION || kind == proto::Kernel::ATTENTION_GRAD ||
         kind == proto::Kernel::CONCATENATE || kind == proto::Kernel::DOT;
}

// A kernel's operand views, in the order of its inputs (none: every input as it is).
std::vector<OperandView> OperandViewsOf(const proto::Kernel& kernel);
// An ATTENTION_GRAD kernel's result views (proto::Kernel.result_views; none: its packed result).
std::vector<OperandView> ResultViewsOf(const proto::Kernel& kernel);

// Whether every element offset + sum(i_d * strides[d]) of an array of `dims` (dims >= 0, as many as
// strides) lies in [0, numel). Checked without overflow, so that huge strides cannot wrap around to an
// index that looks in range. True when the dims hold no element.
bool StridedViewInBounds(int64_t offset, std::span<const int64_t> strides, std::span<const int64_t> dims,
                         int64_t numel);

// Checks a view of `input` with dims: a stride per dim, no more elements than the input unless it
// `broadcasts` (and dims bounded as a slot's, also in a view of no elements), every index inside it, and
// contiguous rows (the last stride 1), which kernels copy or multiply a row at a time. The error says
// what is wrong with which view.
absl::Status CheckOperandView(const OperandView& view, const ArrayShape& input, bool broadcasts = false);

// Whether `views` together reach every element of an array of `numel` exactly once (writing through them
// leaves nothing unwritten and nothing written twice), as the parts of one array laid out row-major in
// some order of its dims: the views alike but for their offsets 0, step, 2 step, ... (the parts a dim of
// stride `step`), and those dims, ordered by stride, with strides 1, d0, d0 d1, ... and numel elements in
// all. An attention's heads' gradients in the projections' [B, T, 3, H, D] are such parts. Checked from
// the dims alone, never by marking each element: a result may be as large as a slot can be.
bool ViewsTile(std::span<const OperandView> views, int64_t numel);

// The shapes a kernel reads its inputs as: each view's (checked by CheckOperandView), the input's where
// it has none. At most one view per input.
absl::StatusOr<std::vector<ArrayShape>> ShapesRead(std::span<const OperandView> views,
                                                   std::span<const ArrayShape> inputs);

// Calls fn(index, run, at) for the points [begin, begin + n) of an array of `dims` (rank >= 1) read
// through `strides` from element `offset`, in row-major order, a run of consecutive points along the
// last dim at a time: the run's first point is element `index` (the next index + strides.back(), ...) and
// point `at` of the n.
template <typename Fn>
void ForEachRun(std::span<const int64_t> dims, std::span<const int64_t> strides, int64_t offset, int64_t begin,
                int64_t n, Fn&& fn) {
  const size_t rank = dims.size();
  int64_t coords[16] = {};  // callers' ranks are checked to be at most 16
  int64_t p = begin;
  for (size_t d = rank; d-- > 0;) {
    coords[d] = dims[d] == 0 ? 0 : p % dims[d];
    p = dims[d] == 0 ? 0 : p / dims[d];
  }
  int64_t index = offset;
  for (size_t d = 0; d < rank; ++d) index += coords[d] * strides[d];
  const int64_t inner_dim = dims[rank - 1], inner_stride = strides[rank - 1];
  int64_t at = 0;
  while (at < n) {
    const int64_t run = std::min(n - at, inner_dim - coords[rank - 1]);
    fn(index, run, at);
    at += run;
    index += run * inner_stride;
    coords[rank - 1] += run;
    for (size_t d = rank - 1; d > 0 && coords[d] == dims[d]; --d) {  // carry, like an odometer
      index -= coords[d] * strides[d];
      coords[d] = 0;
      ++coords[d - 1];
      index += strides[d - 1];
    }
  }
}

}  // namespace lazyrt::pjrt
