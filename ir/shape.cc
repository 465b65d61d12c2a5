#include "ir/shape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lazyrt::ir {

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::string Shape::ToString() const { return absl::StrCat(DTypeName(dtype_), DimsToString(dims_)); }

std::string DimsToString(std::span<const int64_t> dims) { return absl::StrCat("[", absl::StrJoin(dims, ","), "]"); }

}  // namespace lazyrt::ir
