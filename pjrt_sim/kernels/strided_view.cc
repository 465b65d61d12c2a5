#include "pjrt_sim/kernels/strided_view.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pjrt_sim/module_verifier.h"

namespace lazyrt::pjrt {

namespace {

std::vector<OperandView> ViewsOf(const google::protobuf::RepeatedPtrField<proto::OperandView>& stored) {
  std::vector<OperandView> views;
  for (const proto::OperandView& v : stored) {
    OperandView& view = views.emplace_back(
        OperandView{{v.dims().begin(), v.dims().end()}, v.offset(), {v.strides().begin(), v.strides().end()}});
    // A dim of one element is never stepped along: its stride is 0 (1 for the rows' own, which are then
    // contiguous), whatever the executable says, so that walking past a view's last element (ForEachRun's
    // final carry) cannot overflow on a huge one.
    for (size_t d = 0; d < view.dims.size() && d < view.strides.size(); ++d) {
      if (view.dims[d] == 1) view.strides[d] = d + 1 == view.dims.size() ? 1 : 0;
    }
  }
  return views;
}

}  // namespace

std::vector<OperandView> OperandViewsOf(const proto::Kernel& kernel) { return ViewsOf(kernel.operand_views()); }

std::vector<OperandView> ResultViewsOf(const proto::Kernel& kernel) { return ViewsOf(kernel.result_views()); }

bool ViewsTile(std::span<const OperandView> views, int64_t numel) {
  if (views.empty()) return numel == 0;
  const OperandView& first = views.front();
  const int64_t step = views.size() > 1 ? views[1].offset : 0;  // between one part and the next
  std::vector<std::pair<int64_t, int64_t>> axes;                // (stride, size) of the dims of size > 1
  for (size_t i = 0; i < views.size(); ++i) {
    if (views[i].dims != first.dims || views[i].strides != first.strides) return false;
    int64_t offset = 0;
    if (__builtin_mul_overflow(static_cast<int64_t>(i), step, &offset) || views[i].offset != offset) return false;
  }
  if (std::ranges::find(first.dims, 0) != first.dims.end()) return numel == 0;
  for (size_t d = 0; d < first.dims.size(); ++d) {
    if (first.dims[d] > 1) axes.emplace_back(first.strides[d], first.dims[d]);
  }
  if (views.size() > 1) axes.emplace_back(step, static_cast<int64_t>(views.size()));
  std::ranges::sort(axes);
  // Row-major once the dims are ordered by stride: strides 1, d0, d0 d1, ..., and numel in all.
  int64_t expected = 1;
  for (const auto& [stride, size] : axes) {
    if (stride != expected || expected > numel / size) return false;
    expected *= size;
  }
  return expected == numel;
}

bool StridedViewInBounds(int64_t offset, std::span<const int64_t> strides, std::span<const int64_t> dims,
                         int64_t numel) {
  if (std::ranges::find(dims, 0) != dims.end()) return true;
  // The smallest and largest index reached over the whole array.
  int64_t lo = offset, hi = offset;
  for (size_t d = 0; d < dims.size(); ++d) {
    int64_t reach = 0;
    if (__builtin_mul_overflow(strides[d], dims[d] - 1, &reach)) return false;
    int64_t& end = reach < 0 ? lo : hi;
    if (__builtin_add_overflow(end, reach, &end)) return false;
  }
  return lo >= 0 && hi < numel;
}

absl::Status CheckOperandView(const OperandView& view, const ArrayShape& input, bool broadcasts) {
  const auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("the view (dims [", absl::StrJoin(view.dims, ","), "], offset ",
                                                   view.offset, ", strides [", absl::StrJoin(view.strides, ","),
                                                   "]) of ", input.ToString(), " ", what));
  };
  if (view.dims.empty() || view.dims.size() > 16) return fail("needs 1 to 16 dims");
  if (view.strides.size() != view.dims.size()) return fail("needs a stride per dim");
  // Bounded as a slot's dims are, also where another dim is 0 (a view of nothing: of an empty input too).
  for (int64_t d : view.dims) {
    if (d < 0 || d > kMaxElements) return fail("has a dimension out of range");
  }
  if (!DimsInRange(view.dims)) return fail("has more elements than a slot may have");
  const int64_t numel = ArrayShape{input.type, view.dims}.numel();  // 0 for a view of nothing
  if (!broadcasts && numel > input.numel()) return fail("has more elements than its input");
  if (view.strides.back() != 1) return fail("has rows that are not contiguous");
  if (!StridedViewInBounds(view.offset, view.strides, view.dims, input.numel())) {
    return fail("reaches outside its input");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ArrayShape>> ShapesRead(std::span<const OperandView> views,
                                                   std::span<const ArrayShape> inputs) {
  if (views.size() > inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(views.size(), " operand views for ", inputs.size(), " inputs"));
  }
  std::vector<ArrayShape> shapes(inputs.begin(), inputs.end());
  for (size_t i = 0; i < views.size(); ++i) {
    if (views[i].dims.empty()) continue;
    if (absl::Status s = CheckOperandView(views[i], inputs[i]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, ": ", s.message()));
    }
    shapes[i].dims = views[i].dims;
  }
  return shapes;
}

}  // namespace lazyrt::pjrt
