#include "pjrt_sim/types.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lazyrt::pjrt {

int64_t ByteWidth(PrimitiveType type) {
  switch (type) {
    case PrimitiveType::kF64:
    case PrimitiveType::kS64: return 8;
    case PrimitiveType::kF32:
    case PrimitiveType::kS32: return 4;
    case PrimitiveType::kBF16:
    case PrimitiveType::kF16: return 2;
    case PrimitiveType::kPred: return 1;
  }
  return 0;
}

absl::string_view PrimitiveTypeName(PrimitiveType type) {
  switch (type) {
    case PrimitiveType::kF32: return "f32";
    case PrimitiveType::kF64: return "f64";
    case PrimitiveType::kBF16: return "bf16";
    case PrimitiveType::kF16: return "f16";
    case PrimitiveType::kS32: return "s32";
    case PrimitiveType::kS64: return "s64";
    case PrimitiveType::kPred: return "pred";
  }
  return "?";
}

int64_t ArrayShape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string ArrayShape::ToString() const {
  return absl::StrCat(PrimitiveTypeName(type), "[", absl::StrJoin(dims, ","), "]");
}

}  // namespace lazyrt::pjrt
