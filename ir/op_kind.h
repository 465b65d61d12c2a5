// The operations of the lazy IR. One list, expanded wherever ops are enumerated.
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include "absl/strings/string_view.h"

namespace lazyrt::ir {

// X(Name, category). Categories: leaf (no operands), unary/binary/ternary (elementwise, NumPy
// broadcasting between operands), other (shape-changing, reductions, contractions, composites).
// AdamWMoment and AdamWParam are AdamW's update of a moment and of a parameter, one node each where the
// update is ~8 elementwise ops and their scalars (lazy/optim.cc); they lower to those very ops.
// GeluGrad(g, x) is g times GELU's derivative at x (approximate="none"), gelu's backward as one node.
// Two more lists below complete the set: the floating unary math ops and the plain reductions, whose
// rows also name their public function and the device opcode or combiner they lower to.
#define LAZYRT_IR_OPS(X)   \
  X(DeviceData, kLeaf)     \
  X(Constant, kLeaf)       \
  X(Iota, kLeaf)           \
  X(RngUniform, kOther)    \
  X(RngNormal, kOther)     \
  X(Neg, kUnary)           \
  X(Abs, kUnary)           \
  X(Relu, kUnary)          \
  X(Gelu, kUnary)          \
  X(Sign, kUnary)          \
  X(Not, kUnary)           \
  X(Convert, kUnary)       \
  X(Add, kBinary)          \
  X(Sub, kBinary)          \
  X(Mul, kBinary)          \
  X(Div, kBinary)          \
  X(Pow, kBinary)          \
  X(Maximum, kBinary)      \
  X(Minimum, kBinary)      \
  X(Eq, kBinary)           \
  X(Ne, kBinary)           \
  X(Lt, kBinary)           \
  X(Le, kBinary)           \
  X(Gt, kBinary)           \
  X(Ge, kBinary)           \
  X(And, kBinary)          \
  X(Or, kBinary)           \
  X(Select, kTernary)      \
  X(Reshape, kOther)       \
  X(Permute, kOther)       \
  X(Expand, kOther)        \
  X(Slice, kOther)         \
  X(Concat, kOther)        \
  X(IndexSelect, kOther)   \
  X(Gather, kOther)        \
  X(OneHot, kOther)        \
  X(ReduceMean, kOther)    \
  X(Argmax, kOther)        \
  X(MatMul, kOther)        \
  X(Softmax, kOther)       \
  X(LogSoftmax, kOther)    \
  X(Attention, kOther)     \
  X(AttentionGrad, kOther) \
  X(LayerNorm, kOther)     \
  X(RmsNorm, kOther)       \
  X(LayerNormGrad, kOther) \
  X(RmsNormGrad, kOther)   \
  X(Cumsum, kOther)        \
  X(Argsort, kOther)       \
  X(ScatterAdd, kOther)    \
  X(IndexAdd, kOther)      \
  X(Shard, kOther)         \
  X(AdamWMoment, kOther)   \
  X(AdamWParam, kOther)    \
  X(GeluGrad, kBinary)

// Elementwise math on floating values (integer inputs are computed in f32), category kUnary: X(Name,
// public function lazyrt::fn(x), device opcode). Its gradient is FloatUnaryGrad<OpKind::kName> in
// lazy/ops.cc, its element function the device opcode's row in pjrt_sim/opcode.h.
#define LAZYRT_IR_FLOAT_UNARY_OPS(X) \
  X(Exp, exp, Exp)                   \
  X(Log, log, Log)                   \
  X(Sqrt, sqrt, Sqrt)                \
  X(Rsqrt, rsqrt, Rsqrt)             \
  X(Tanh, tanh, Tanh)                \
  X(Sigmoid, sigmoid, Logistic)      \
  X(Erf, erf, Erf)                   \
  X(Sin, sin, Sin)                   \
  X(Cos, cos, Cos)

// Reductions over dims with a device combiner, category kOther: X(Name, device combiner). Attributes:
// kAxes (sorted), kKeepDim.
#define LAZYRT_IR_REDUCE_OPS(X) \
  X(ReduceSum, Sum)             \
  X(ReduceMax, Max)             \
  X(ReduceMin, Min)             \
  X(ReduceProd, Prod)

// Every IR op, as X(Name, category).
#define LAZYRT_IR_FLOAT_UNARY_AS_OP(name, fn, device) LAZYRT_IR_ROW(name, kUnary)
#define LAZYRT_IR_REDUCE_AS_OP(name, combiner) LAZYRT_IR_ROW(name, kOther)
#define LAZYRT_IR_ALL_OPS(X)                             \
  LAZYRT_IR_OPS(X)                                       \
  LAZYRT_IR_FLOAT_UNARY_OPS(LAZYRT_IR_FLOAT_UNARY_AS_OP) \
  LAZYRT_IR_REDUCE_OPS(LAZYRT_IR_REDUCE_AS_OP)

enum class OpKind : uint16_t {
#define LAZYRT_IR_ROW(name, category) k##name,
  LAZYRT_IR_ALL_OPS(LAZYRT_IR_ROW)
#undef LAZYRT_IR_ROW
};

enum class OpCategory : uint8_t { kLeaf, kUnary, kBinary, kTernary, kOther };

inline constexpr OpKind kAllOpKinds[] = {
#define LAZYRT_IR_ROW(name, category) OpKind::k##name,
    LAZYRT_IR_ALL_OPS(LAZYRT_IR_ROW)
#undef LAZYRT_IR_ROW
};

// A number for each op kind that does not depend on its place in the lists above: the FNV-1a hash of its
// name. Node hashes, and so the persistent cache's graph keys, take it: an op appended or moved must not give
// an existing graph another graph's key (the enum's numbers shift for every op after it).
constexpr uint64_t Fnv1a(absl::string_view text) {
  uint64_t h = 14695981039346656037ULL;
  for (char c : text) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ULL;
  }
  return h;
}
inline constexpr uint64_t kOpKindStableIds[] = {
#define LAZYRT_IR_ROW(name, category) Fnv1a(#name),
    LAZYRT_IR_ALL_OPS(LAZYRT_IR_ROW)
#undef LAZYRT_IR_ROW
};
constexpr bool StableIdsAreDistinct() {
  for (size_t i = 0; i < std::size(kOpKindStableIds); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (kOpKindStableIds[i] == kOpKindStableIds[j]) return false;
    }
  }
  return true;
}
static_assert(StableIdsAreDistinct(), "two op kinds' names hash alike: rename one");
inline uint64_t OpKindStableId(OpKind op) { return kOpKindStableIds[static_cast<size_t>(op)]; }

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
// Ops that read an index tensor and fail on an index out of range when they run: each is a numbered
// site of its graph (1, 2, ... in post order), so that the error can name the op and line that made it.
inline bool ChecksIndices(OpKind op) {
  return op == OpKind::kIndexSelect || op == OpKind::kGather || op == OpKind::kScatterAdd || op == OpKind::kIndexAdd;
}

}  // namespace lazyrt::ir
