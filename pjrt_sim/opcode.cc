#include "pjrt_sim/opcode.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ostream>

#include "pjrt_sim/element_ops.h"

namespace lazyrt::pjrt {
namespace {

// "RngUniform" -> "rng_uniform".
std::string SnakeCase(absl::string_view camel) {
  std::string out;
  for (size_t i = 0; i < camel.size(); ++i) {
    const char c = camel[i];
    if (std::isupper(static_cast<unsigned char>(c))) {
      if (i > 0) out.push_back('_');
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

OpClass ClassOf(Opcode op) {
  switch (op) {
#define LAZYRT_X(name, ...) \
  case Opcode::k##name: return OpClass::kUnary;
    LAZYRT_UNARY_OPCODES(LAZYRT_X)
#undef LAZYRT_X
#define LAZYRT_X(name, ...) \
  case Opcode::k##name: return OpClass::kBinary;
    LAZYRT_BINARY_OPCODES(LAZYRT_X)
#undef LAZYRT_X
#define LAZYRT_X(name, number, op_class) \
  case Opcode::k##name: return OpClass::op_class;
    LAZYRT_OTHER_OPCODES(LAZYRT_X)
#undef LAZYRT_X
  }
  return OpClass::kParameter;  // unreachable: the switch covers every opcode
}

TypeClass TypeClassOf(Opcode op) {
  switch (op) {
#define LAZYRT_X(name, number, types, ...) \
  case Opcode::k##name: return TypeClass::types;
    LAZYRT_UNARY_OPCODES(LAZYRT_X)
    LAZYRT_BINARY_OPCODES(LAZYRT_X)
#undef LAZYRT_X
#define LAZYRT_X(name, ...) case Opcode::k##name:
    LAZYRT_OTHER_OPCODES(LAZYRT_X)
#undef LAZYRT_X
    return TypeClass::kAny;
  }
  return TypeClass::kAny;  // unreachable: the switch covers every opcode
}

bool Accepts(TypeClass types, PrimitiveType type) {
  const bool is_pred = type == PrimitiveType::kPred;
  const bool is_float = type == PrimitiveType::kF32 || type == PrimitiveType::kF64 || type == PrimitiveType::kBF16 ||
                        type == PrimitiveType::kF16;
  switch (types) {
    case TypeClass::kAny: return true;
    case TypeClass::kNumeric: return !is_pred;
    case TypeClass::kFloat: return is_float;
    case TypeClass::kPred: return is_pred;
  }
  return false;  // unreachable: the switch covers every class
}

std::optional<Opcode> OpcodeFromNumber(int64_t number) {
  for (Opcode op : kAllOpcodes) {
    if (static_cast<int64_t>(op) == number) return op;
  }
  return std::nullopt;
}

const std::string& OpcodeName(Opcode op) {
  static const auto* names = [] {
    auto* n = new std::array<std::string, 128>;
#define LAZYRT_X(name, number, ...) (*n)[number] = SnakeCase(#name);
    LAZYRT_UNARY_OPCODES(LAZYRT_X)
    LAZYRT_BINARY_OPCODES(LAZYRT_X)
    LAZYRT_OTHER_OPCODES(LAZYRT_X)
#undef LAZYRT_X
    return n;
  }();
  static_assert(std::ranges::all_of(kAllOpcodes, [](Opcode op) { return static_cast<int32_t>(op) < 128; }),
                "opcode numbers index the name table");
  return (*names)[static_cast<size_t>(op)];
}

bool IsElementwise(Opcode op) {
  switch (ClassOf(op)) {
    case OpClass::kUnary:
    case OpClass::kBinary:
    case OpClass::kConvert:
    case OpClass::kCompare:
    case OpClass::kSelect: return true;
    case OpClass::kParameter:
    case OpClass::kGenerator:
    case OpClass::kView:
    case OpClass::kReshape:
    case OpClass::kDataMovement:
    case OpClass::kReduce:
    case OpClass::kArgmax:
    case OpClass::kDot:
    case OpClass::kAttention:
    case OpClass::kNormalize:
    case OpClass::kAlongAxis:
    case OpClass::kScatter:
    case OpClass::kCollective: return false;
  }
  return false;  // unreachable: the switch covers every class
}

std::optional<CompareDirection> CompareDirectionFromNumber(int64_t number) {
  switch (number) {
#define LAZYRT_X(name, n, ...) \
  case n: return CompareDirection::k##name;
    LAZYRT_COMPARE_DIRECTIONS(LAZYRT_X)
#undef LAZYRT_X
  }
  return std::nullopt;
}

std::string CompareDirectionName(CompareDirection direction) {
  switch (direction) {
#define LAZYRT_X(name, n, ...) \
  case CompareDirection::k##name: return SnakeCase(#name);
    LAZYRT_COMPARE_DIRECTIONS(LAZYRT_X)
#undef LAZYRT_X
  }
  return "?";  // unreachable: the switch covers every direction
}

std::optional<Combiner> CombinerFromNumber(int64_t number) {
  for (Combiner c : kAllCombiners) {
    if (static_cast<int64_t>(c) == number) return c;
  }
  return std::nullopt;
}

TypeClass TypeClassOf(Combiner combiner) {
  switch (combiner) {
#define LAZYRT_X(name, number, types, ...) \
  case Combiner::k##name: return TypeClass::types;
    LAZYRT_REDUCE_COMBINERS(LAZYRT_X)
#undef LAZYRT_X
  }
  return TypeClass::kAny;  // unreachable: the switch covers every combiner
}

std::string CombinerName(Combiner combiner) {
  switch (combiner) {
#define LAZYRT_X(name, number, ...) \
  case Combiner::k##name: return SnakeCase(#name);
    LAZYRT_REDUCE_COMBINERS(LAZYRT_X)
#undef LAZYRT_X
  }
  return "?";  // unreachable: the switch covers every combiner
}

std::ostream& operator<<(std::ostream& os, Opcode op) { return os << OpcodeName(op); }
std::ostream& operator<<(std::ostream& os, CompareDirection direction) { return os << CompareDirectionName(direction); }
std::ostream& operator<<(std::ostream& os, Combiner combiner) { return os << CombinerName(combiner); }

void OpcodeUnreachable(const char* what, int32_t code) {
  std::fprintf(stderr, "lazyrt: internal error: %s reached with code %d, which its table does not allow\n", what, code);
  std::abort();
}

}  // namespace lazyrt::pjrt
