#include "ir/op_kind.h"

namespace lazyrt::ir {

absl::string_view OpKindName(OpKind op) {
  switch (op) {
#define LAZYRT_X(name, category) \
  case OpKind::k##name:          \
    return #name;
    LAZYRT_IR_OPS(LAZYRT_X)
#undef LAZYRT_X
  }
  return "?";
}

std::optional<OpKind> OpKindFromName(absl::string_view name) {
  for (OpKind op : kAllOpKinds) {
    if (OpKindName(op) == name) return op;
  }
  return std::nullopt;
}

OpCategory CategoryOf(OpKind op) {
  switch (op) {
#define LAZYRT_X(name, category) \
  case OpKind::k##name:          \
    return OpCategory::category;
    LAZYRT_IR_OPS(LAZYRT_X)
#undef LAZYRT_X
  }
  return OpCategory::kOther;
}

bool IsComparison(OpKind op) {
  switch (op) {
    case OpKind::kEq:
    case OpKind::kNe:
    case OpKind::kLt:
    case OpKind::kLe:
    case OpKind::kGt:
    case OpKind::kGe: return true;
    default: return false;
  }
}

}  // namespace lazyrt::ir
