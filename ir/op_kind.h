// The operations of the lazy IR. One list, expanded wherever ops are enumerated.
#pragma once

#include <cstdint>
#include <optional>
#include "absl/strings/string_view.h"

namespace lazyrt::ir {

// X(Name, category). Categories: leaf (no operands), unary/binary/ternary (elementwise, NumPy
// broadcasting between operands), other (shape-changing, reductions, contractions, composites).
#define LAZYRT_IR_OPS(X)                    \
  X(DeviceData, kLeaf)                      \
  X(Constant, kLeaf)                        \
  X(Iota, kLeaf)                            \
  X(RngUniform, kOther)                     \
  X(RngNormal, kOther)                      \
  X(Neg, kUnary)                            \
  X(Abs, kUnary)                            \
  X(Exp, kUnary)                            \
  X(Log, kUnary)                            \
  X(Sqrt, kUnary)                           \
  X(Rsqrt, kUnary)                          \
  X(Tanh, kUnary)                           \
  X(Sigmoid, kUnary)                        \
  X(Relu, kUnary)                           \
  X(Gelu, kUnary)                           \
  X(Sign, kUnary)                           \
  X(Not, kUnary)                            \
  X(Convert, kUnary)                        \
  X(Add, kBinary)                           \
  X(Sub, kBinary)                           \
  X(Mul, kBinary)                           \
  X(Div, kBinary)                           \
  X(Pow, kBinary)                           \
  X(Maximum, kBinary)                       \
  X(Minimum, kBinary)                       \
  X(Eq, kBinary)                            \
  X(Ne, kBinary)                            \
  X(Lt, kBinary)                            \
  X(Le, kBinary)                            \
  X(Gt, kBinary)                            \
  X(Ge, kBinary)                            \
  X(And, kBinary)                           \
  X(Or, kBinary)                            \
  X(Select, kTernary)                       \
  X(Reshape, kOther)                        \
  X(Permute, kOther)                        \
  X(Expand, kOther)                         \
  X(Slice, kOther)                          \
  X(Concat, kOther)                         \
  X(IndexSelect, kOther)                    \
  X(Gather, kOther)                         \
  X(OneHot, kOther)                         \
  X(ReduceSum, kOther)                      \
  X(ReduceMax, kOther)                      \
  X(ReduceMean, kOther)                     \
  X(Argmax, kOther)                         \
  X(MatMul, kOther)                         \
  X(Softmax, kOther)                        \
  X(LogSoftmax, kOther)

enum class OpKind : uint16_t {
#define LAZYRT_X(name, category) k##name,
  LAZYRT_IR_OPS(LAZYRT_X)
#undef LAZYRT_X
};

enum class OpCategory : uint8_t { kLeaf, kUnary, kBinary, kTernary, kOther };

inline constexpr OpKind kAllOpKinds[] = {
#define LAZYRT_X(name, category) OpKind::k##name,
    LAZYRT_IR_OPS(LAZYRT_X)
#undef LAZYRT_X
};

// "Add", "MatMul", ...
absl::string_view OpKindName(OpKind op);
std::optional<OpKind> OpKindFromName(absl::string_view name);
OpCategory CategoryOf(OpKind op);
inline bool IsElementwise(OpKind op) {
  OpCategory c = CategoryOf(op);
  return c == OpCategory::kUnary || c == OpCategory::kBinary || c == OpCategory::kTernary;
}
// Comparisons produce bool whatever their operands' dtype.
bool IsComparison(OpKind op);

}  // namespace lazyrt::ir
