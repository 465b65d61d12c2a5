#include "ir/op_kind.h"

namespace lazyrt::ir {

absl::string_view OpKindName(OpKind op) {
  switch (op) {
#define LAZYRT_IR_ROW(name, category) \
  case OpKind::k##name: return #name;
    LAZYRT_IR_ALL_OPS(LAZYRT_IR_ROW)
#undef LAZYRT_IR_ROW
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
#define LAZYRT_IR_ROW(name, category) \
  case OpKind::k##name: return OpCategory::category;
    LAZYRT_IR_ALL_OPS(LAZYRT_IR_ROW)
#undef LAZYRT_IR_ROW
  }
  return OpCategory::kOther;
}

bool IsComparison(OpKind op) {
  return op == OpKind::kEq || op == OpKind::kNe || op == OpKind::kLt || op == OpKind::kLe || op == OpKind::kGt ||
         op == OpKind::kGe;
}

}  // namespace lazyrt::ir
