// The device's opcodes: one table, in the manner of XLA's HLO_OPCODE_LIST, that every switch over
// opcodes is generated from or checked against (no `default:` anywhere: -Wswitch finds a forgotten
// case). An elementwise opcode's row carries its element function, so adding one is one line here.
//
// Numbers are the serialized form (Module and Executable protos hold them as int32): never reuse one.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

// Which element types an opcode accepts (for elementwise and reduce ops: its operands' type).
enum class TypeClass : uint8_t {
  kAny,      // every type, pred included
  kNumeric,  // every type but pred (arithmetic is not defined on pred)
  kFloat,    // f32, f64, bf16, f16
  kPred,     // pred only
};

// Elementwise, one operand: X(Name, number, type class, element function of `x`, computed in T).
#define LAZYRT_UNARY_OPCODES(X)                    \
  X(Negate, 10, kNumeric, Negate(x))               \
  X(Abs, 11, kNumeric, Abs(x))                     \
  X(Exp, 12, kFloat, Exp(x))                       \
  X(Log, 13, kFloat, Log(x))                       \
  X(Sqrt, 14, kFloat, std::sqrt(x))                \
  X(Rsqrt, 15, kFloat, T{1} / std::sqrt(x))        \
  X(Tanh, 16, kFloat, Tanh(x))                     \
  X(Logistic, 17, kFloat, Logistic(x))             \
  X(Sign, 18, kNumeric, Sign(x))                   \
  X(Not, 19, kPred, static_cast<T>(!x))            \
  X(Erf, 21, kFloat, Erf(x))                       \
  X(Sin, 22, kFloat, std::sin(x))                  \
  X(Cos, 23, kFloat, std::cos(x))                  \
  X(GeluDerivative, 24, kFloat, GeluDerivative(x)) \
  X(Gelu, 25, kFloat, Gelu(x))

// Elementwise, two operands of one type: X(Name, number, type class, element function of `a`, `b`).
#define LAZYRT_BINARY_OPCODES(X)            \
  X(Add, 30, kNumeric, Add(a, b))           \
  X(Subtract, 31, kNumeric, Subtract(a, b)) \
  X(Multiply, 32, kNumeric, Multiply(a, b)) \
  X(Divide, 33, kNumeric, Divide(a, b))     \
  X(Power, 34, kNumeric, Power(a, b))       \
  X(Maximum, 35, kAny, Maximum(a, b))       \
  X(Minimum, 36, kAny, Minimum(a, b))       \
  X(And, 38, kPred, static_cast<T>(a && b)) \
  X(Or, 39, kPred, static_cast<T>(a || b))

// Everything else: X(Name, number, class). The classes are OpClass below.
#define LAZYRT_OTHER_OPCODES(X)     \
  X(Parameter, 1, kParameter)       \
  X(Constant, 2, kGenerator)        \
  X(Iota, 3, kGenerator)            \
  X(RngUniform, 4, kGenerator)      \
  X(RngNormal, 5, kGenerator)       \
  X(Convert, 20, kConvert)          \
  X(Compare, 37, kCompare)          \
  X(Select, 40, kSelect)            \
  X(Broadcast, 50, kView)           \
  X(Reshape, 51, kReshape)          \
  X(Transpose, 52, kView)           \
  X(Slice, 53, kView)               \
  X(Concatenate, 54, kDataMovement) \
  X(IndexSelect, 55, kDataMovement) \
  X(Gather, 56, kDataMovement)      \
  X(Reduce, 60, kReduce)            \
  X(Argmax, 62, kArgmax)            \
  X(Dot, 63, kDot)                  \
  X(Attention, 90, kAttention)      \
  X(AttentionGrad, 91, kAttention)  \
  X(LayerNorm, 70, kNormalize)      \
  X(RmsNorm, 71, kNormalize)        \
  X(LayerNormGrad, 72, kNormalize)  \
  X(RmsNormGrad, 73, kNormalize)    \
  X(Cumsum, 80, kAlongAxis)         \
  X(Argsort, 81, kAlongAxis)        \
  X(ScatterAdd, 74, kScatter)       \
  X(IndexAdd, 75, kScatter)         \
  LAZYRT_COLLECTIVE_OPCODES(X)

// The collectives, part of LAZYRT_OTHER_OPCODES (their own table so that a switch can list them at
// once: `LAZYRT_COLLECTIVE_OPCODES(LAZYRT_CASE_OF_OPCODE)`).
#define LAZYRT_COLLECTIVE_OPCODES(X) \
  X(AllReduce, 100, kCollective)     \
  X(AllGather, 101, kCollective)     \
  X(ReduceScatter, 102, kCollective) \
  X(AllToAll, 103, kCollective)      \
  X(PartitionSlice, 104, kCollective)

// The case labels of every elementwise opcode (unary, binary, convert, compare, select), for a switch that
// treats them alike: `LAZYRT_ELEMENTWISE_OPCODE_CASES: ...`.
#define LAZYRT_CASE_OF_OPCODE(name, ...) case ::lazyrt::pjrt::Opcode::k##name:
#define LAZYRT_ELEMENTWISE_OPCODE_CASES                                               \
  LAZYRT_UNARY_OPCODES(LAZYRT_CASE_OF_OPCODE)                                         \
  LAZYRT_BINARY_OPCODES(LAZYRT_CASE_OF_OPCODE) case ::lazyrt::pjrt::Opcode::kConvert: \
  case ::lazyrt::pjrt::Opcode::kCompare:                                              \
  case ::lazyrt::pjrt::Opcode::kSelect

enum class Opcode : int32_t {
#define LAZYRT_X(name, number, ...) k##name = number,
  LAZYRT_UNARY_OPCODES(LAZYRT_X) LAZYRT_BINARY_OPCODES(LAZYRT_X) LAZYRT_OTHER_OPCODES(LAZYRT_X)
#undef LAZYRT_X
};

inline constexpr Opcode kAllOpcodes[] = {
#define LAZYRT_X(name, ...) Opcode::k##name,
    LAZYRT_UNARY_OPCODES(LAZYRT_X) LAZYRT_BINARY_OPCODES(LAZYRT_X) LAZYRT_OTHER_OPCODES(LAZYRT_X)
#undef LAZYRT_X
};

enum class OpClass : uint8_t {
  kParameter,
  kGenerator,     // computed from the point alone: CONSTANT (a splat), IOTA, RNG_* (operand: s64[] seed)
  kUnary,         // elementwise, one operand of the result's type
  kBinary,        // elementwise, two operands of the result's type
  kConvert,       // elementwise, any type to any type
  kCompare,       // elementwise, two operands of one type, pred result; `direction`
  kSelect,        // elementwise: pred, on_true, on_false
  kView,          // BROADCAST, TRANSPOSE, SLICE: each result element is one operand element
  kReshape,       // the same bytes with other dims
  kDataMovement,  // CONCATENATE, INDEX_SELECT, GATHER
  kReduce,        // `combiner` over `dims`
  kArgmax,        // the first index of the maximum along `axis` (s64)
  kDot,           // batched GEMM
  kAttention,     // ATTENTION, ATTENTION_GRAD: softmax(q k^T * value + mask) v and its gradients (`causal`)
  // Over the trailing dims from `axis` on, per row of the leading dims, with epsilon `value`:
  // LAYER_NORM (x - mean) / sqrt(var + eps), RMS_NORM x / sqrt(mean(x^2) + eps); their *_GRAD take
  // (x, g) and give the gradient with respect to x of sum(g * norm(x)). Layer norm with its affine:
  // LAYER_NORM (x, weight, bias) gives norm(x) weight + bias, LAYER_NORM_GRAD (x, dy, weight) the gradients
  // packed by groups of rows (kernels/normalize.h).
  kNormalize,
  // Each row along `axis` computed from that row alone, a result of the operand's dims: CUMSUM (running
  // sums, in the operand's numeric type) and ARGSORT (s64 positions of the row's elements in stable
  // sorted order, NaN largest; `direction` LT ascending, GT descending).
  kAlongAxis,
  // (x, index, src) -> x plus src added at the indexed positions along `axis`, in index order:
  // SCATTER_ADD as torch.scatter_add (index and src of one shape, of x's rank), INDEX_ADD as
  // torch.index_add (a 1-D index picks src's slices along axis).
  kScatter,
  // One operand, over the partitions of each of the instruction's replica groups (a module of N > 1
  // partitions runs one copy of its program per partition, each on its own device):
  // ALL_REDUCE combines the group's operands element by element with `combiner`; ALL_GATHER concatenates
  // them along `axis` in group order; REDUCE_SCATTER combines them and keeps piece number (position in
  // the group) of the result along `axis`; ALL_TO_ALL (`dims` = [split, concat]) sends piece j of the
  // operand along the split dim to member j and concatenates what it receives along the concat dim in
  // member order; PARTITION_SLICE keeps piece number (position in the group) along `axis` of its own
  // operand, moving nothing (how a partitioner takes a shard of a replicated value).
  kCollective,
};

OpClass ClassOf(Opcode op);
// The element types the operands of a unary, binary or reduce op may have (kAny for other classes).
TypeClass TypeClassOf(Opcode op);
bool Accepts(TypeClass types, PrimitiveType type);
// The opcode with serialized number `number`, or nullopt.
std::optional<Opcode> OpcodeFromNumber(int64_t number);
// Lowercase name: "add", "rng_uniform", "index_select".
const std::string& OpcodeName(Opcode op);

inline bool IsUnary(Opcode op) { return ClassOf(op) == OpClass::kUnary; }
inline bool IsBinary(Opcode op) { return ClassOf(op) == OpClass::kBinary; }
// Computed point by point from operands of the result's dims: unary, binary, convert, compare, select.
bool IsElementwise(Opcode op);
// Broadcast, transpose and slice: each result element is one element of the operand.
inline bool IsView(Opcode op) { return op == Opcode::kBroadcast || op == Opcode::kTranspose || op == Opcode::kSlice; }
// Values fusion computes inside the kernels that read them (elementwise work, views, generators of
// constants and iotas) instead of storing them.
inline bool IsFusable(Opcode op) {
  return IsElementwise(op) || IsView(op) || op == Opcode::kConstant || op == Opcode::kIota;
}
inline bool IsGenerator(Opcode op) { return ClassOf(op) == OpClass::kGenerator; }
// Elementwise functions that cost many times a load of their operand (transcendentals, powers): worth
// evaluating at fewer points (SimplifyAlgebra moves them before a broadcast, fusion stores them where their
// broadcasting readers would repeat them).
inline bool IsCostlyFunction(Opcode op) {
  switch (op) {
    case Opcode::kExp:
    case Opcode::kLog:
    case Opcode::kTanh:
    case Opcode::kLogistic:
    case Opcode::kErf:
    case Opcode::kSin:
    case Opcode::kCos:
    case Opcode::kGelu:
    case Opcode::kGeluDerivative:
    case Opcode::kPower: return true;
    default: return false;
  }
}

// The comparisons of COMPARE.
#define LAZYRT_COMPARE_DIRECTIONS(X) \
  X(Eq, 0, a == b)                   \
  X(Ne, 1, a != b)                   \
  X(Lt, 2, a < b)                    \
  X(Le, 3, a <= b)                   \
  X(Gt, 4, a > b)                    \
  X(Ge, 5, a >= b)

enum class CompareDirection : int32_t {
#define LAZYRT_X(name, number, ...) k##name = number,
  LAZYRT_COMPARE_DIRECTIONS(LAZYRT_X)
#undef LAZYRT_X
};
std::optional<CompareDirection> CompareDirectionFromNumber(int64_t number);
std::string CompareDirectionName(CompareDirection direction);  // "eq", "lt", ...

// The combiners of REDUCE: X(Name, number, type class, identity, combine of accumulator `a` and value
// `b`). The identity is the result over an empty set; a reduction whose identity is not a value (max,
// min) is refused over an empty dimension by the layers above.
#define LAZYRT_REDUCE_COMBINERS(X)               \
  X(Sum, 0, kNumeric, T{0}, Add(a, b))           \
  X(Max, 1, kAny, Lowest<T>(), Maximum(a, b))    \
  X(Min, 2, kAny, Highest<T>(), Minimum(a, b))   \
  X(Prod, 3, kNumeric, T{1}, Multiply(a, b))     \
  X(All, 4, kPred, T{1}, static_cast<T>(a && b)) \
  X(Any, 5, kPred, T{0}, static_cast<T>(a || b))

enum class Combiner : int32_t {
#define LAZYRT_X(name, number, ...) k##name = number,
  LAZYRT_REDUCE_COMBINERS(LAZYRT_X)
#undef LAZYRT_X
};
inline constexpr Combiner kAllCombiners[] = {
#define LAZYRT_X(name, ...) Combiner::k##name,
    LAZYRT_REDUCE_COMBINERS(LAZYRT_X)
#undef LAZYRT_X
};
std::optional<Combiner> CombinerFromNumber(int64_t number);
TypeClass TypeClassOf(Combiner combiner);
std::string CombinerName(Combiner combiner);  // "sum", "max", ...

// By name, for logs and test failures.
std::ostream& operator<<(std::ostream& os, Opcode op);
std::ostream& operator<<(std::ostream& os, CompareDirection direction);
std::ostream& operator<<(std::ostream& os, Combiner combiner);

// A code reached a place its class never reaches (an element function of another class, a type its row
// does not accept, a kernel that only reads materialized operands): the verifier and the loader rule
// these out, so it is a bug in lazyrt, never bad input. Prints what and where, and aborts.
[[noreturn]] void OpcodeUnreachable(const char* where, int32_t code);

}  // namespace lazyrt::pjrt
