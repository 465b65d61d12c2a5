// The arithmetic of one element, per element type, shared by the kernels and by constant folding so
// that a folded constant is bit-identical to what the kernel would have computed. Integer ops wrap
// and never divide by zero or convert out of range (no undefined behaviour on any input).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "pjrt_sim/opcode.h"
#include "pjrt_sim/types.h"
#include "pjrt_sim/vector_math.h"

namespace lazyrt::pjrt {

// bf16 and f16 are stored in 16 bits and computed in f32.
inline float Bf16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// Round to nearest even; every NaN becomes the quiet NaN 0x7fc0. Branch-free (the NaN test is an integer
// compare of the magnitude's bits), so loops of it vectorize.
inline uint16_t FloatToBf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = bits + 0x7fff + ((bits >> 16) & 1);
  const bool nan = static_cast<int32_t>(bits & 0x7fffffff) > 0x7f800000;
  return static_cast<uint16_t>((nan ? 0x7fc00000u : rounded) >> 16);
}
inline float HalfToFloat(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
inline uint16_t FloatToHalf(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }

// To pred: nonzero (and NaN) is true. Float to integer: saturating; NaN becomes 0.
template <typename To, typename From>
To SaturatingCast(From v) {
  // Pred (uint8_t) is integral too, so it must be decided first: -2.5 and 0.5 are true, not 0.
  if constexpr (std::is_same_v<To, uint8_t>) {
    return v != From{0} ? 1 : 0;
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if (std::isnan(v)) return 0;
    if (v <= static_cast<From>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (v >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

// `v` stored as one element of `type` at dst (rounded and saturated as a kernel's store would be).
inline void StoreElement(double v, PrimitiveType type, void* dst) {
  switch (type) {
    case PrimitiveType::kF32: {
      const float x = static_cast<float>(v);
      std::memcpy(dst, &x, 4);
      return;
    }
    case PrimitiveType::kF64: std::memcpy(dst, &v, 8); return;
    case PrimitiveType::kBF16: {
      const uint16_t x = FloatToBf16(static_cast<float>(v));
      std::memcpy(dst, &x, 2);
      return;
    }
    case PrimitiveType::kF16: {
      const uint16_t x = FloatToHalf(static_cast<float>(v));
      std::memcpy(dst, &x, 2);
      return;
    }
    case PrimitiveType::kS32: {
      const int32_t x = SaturatingCast<int32_t>(v);
      std::memcpy(dst, &x, 4);
      return;
    }
    case PrimitiveType::kS64: {
      const int64_t x = SaturatingCast<int64_t>(v);
      std::memcpy(dst, &x, 8);
      return;
    }
    case PrimitiveType::kPred: {
      const uint8_t x = v != 0;
      std::memcpy(dst, &x, 1);
      return;
    }
  }
}

// Element `i` of an array of `type`, as a double (exact for every type but s64 beyond 2^53).
inline double LoadElement(const void* base, PrimitiveType type, int64_t i) {
  const auto* bytes = static_cast<const unsigned char*>(base);
  switch (type) {
    case PrimitiveType::kF32: {
      float x;
      std::memcpy(&x, bytes + i * 4, 4);
      return x;
    }
    case PrimitiveType::kF64: {
      double x;
      std::memcpy(&x, bytes + i * 8, 8);
      return x;
    }
    case PrimitiveType::kBF16: {
      uint16_t x;
      std::memcpy(&x, bytes + i * 2, 2);
      return Bf16ToFloat(x);
    }
    case PrimitiveType::kF16: {
      uint16_t x;
      std::memcpy(&x, bytes + i * 2, 2);
      return HalfToFloat(x);
    }
    case PrimitiveType::kS32: {
      int32_t x;
      std::memcpy(&x, bytes + i * 4, 4);
      return x;
    }
    case PrimitiveType::kS64: {
      int64_t x;
      std::memcpy(&x, bytes + i * 8, 8);
      return static_cast<double>(x);
    }
    case PrimitiveType::kPred: return bytes[i];
  }
  return 0;  // unreachable: the switch covers every type
}

template <typename T>
T Wrap(uint64_t v) {
  return static_cast<T>(static_cast<std::make_unsigned_t<T>>(v));
}

// The element functions the opcode table (opcode.h) names, for every compute type they accept.

template <typename T>
T Negate(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return -x;
  } else {
    return Wrap<T>(std::make_unsigned_t<T>{0} - static_cast<std::make_unsigned_t<T>>(x));
  }
}
template <typename T>
T Abs(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::fabs(x);
  } else {
    return x < 0 ? Negate(x) : x;
  }
}
// sign(NaN) is 0, as PyTorch's (both comparisons are false).
template <typename T>
T Sign(T x) {
  return static_cast<T>((x > T{0}) - (x < T{0}));
}
template <typename T>
T Add(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a + b;
  } else {
    using U = std::make_unsigned_t<T>;
    return Wrap<T>(static_cast<U>(a) + static_cast<U>(b));
  }
}
template <typename T>
T Subtract(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a - b;
  } else {
    using U = std::make_unsigned_t<T>;
    return Wrap<T>(static_cast<U>(a) - static_cast<U>(b));
  }
}
template <typename T>
T Multiply(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a * b;
  } else {
    using U = std::make_unsigned_t<T>;
    return Wrap<T>(static_cast<U>(a) * static_cast<U>(b));
  }
}
template <typename T>
T Divide(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a / b;
  } else {
    // XLA's convention: x / 0 = -1; the one overflowing quotient wraps.
    if (b == 0) return T{-1};
    if (a == std::numeric_limits<T>::min() && b == -1) return a;
    return a / b;
  }
}
template <typename T>
T Power(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::pow(a, b);
  } else {
    if (b < 0) return a == 1 ? T{1} : (a == -1 ? ((b & 1) ? T{-1} : T{1}) : T{0});
    using U = std::make_unsigned_t<T>;
    U result = 1, base = static_cast<U>(a);
    for (T e = b; e > 0; e >>= 1) {
      if (e & 1) result *= base;
      base *= base;
    }
    return Wrap<T>(result);
  }
}
// The transcendental functions: f32 (and bf16/f16, computed in f32) by the vectorizable ones of
// vector_math.h, f64 by the C library's.
template <typename T>
T Exp(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return VectorExp(x);
  } else {
    return std::exp(x);
  }
}
template <typename T>
T Log(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return VectorLog(x);
  } else {
    return std::log(x);
  }
}
template <typename T>
T Tanh(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return VectorTanh(x);
  } else {
    return std::tanh(x);
  }
}
template <typename T>
T Logistic(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return VectorLogistic(x);
  } else {
    return T{1} / (T{1} + std::exp(-x));
  }
}
template <typename T>
T Erf(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return VectorErf(x);
  } else {
    return std::erf(x);
  }
}
// GELU (approximate="none") and its derivative: f32 by vector_math's vectorizable functions, f64 by the
// same formulas (GeluOfParts, GeluDerivativeOfParts) on the C library's erf and exp.
template <typename T>
T Gelu(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return VectorGelu(x);
  } else {
    return GeluOfParts(x, Erf(x * static_cast<T>(kGeluErfScale)));
  }
}
template <typename T>
T GeluDerivative(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return VectorGeluDerivative(x);
  } else {
    return GeluDerivativeOfParts(x, Erf(x * static_cast<T>(kGeluErfScale)), Exp(x * x * T{-0.5}));
  }
}
// NaN-propagating, as XLA's max/min. `|`, not `||`: no branch, so loops of it vectorize (a != a is the
// NaN test).
template <typename T>
T Maximum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return ((a != a) | (a > b)) ? a : b;  // NOLINT(misc-redundant-expression): the NaN test
  } else {
    return a > b ? a : b;
  }
}
template <typename T>
T Minimum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return ((a != a) | (a < b)) ? a : b;  // NOLINT(misc-redundant-expression): the NaN test
  } else {
    return a < b ? a : b;
  }
}
// The identities of max and min.
template <typename T>
T Lowest() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::lowest();
}
template <typename T>
T Highest() {
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::max();
}

// Whether compute type T can hold a value of type class C (pred is uint8_t; floats are float or double).
template <typename T>
constexpr bool kComputes(TypeClass c) {
  switch (c) {
    case TypeClass::kAny: return true;
    case TypeClass::kNumeric: return !std::is_same_v<T, uint8_t>;
    case TypeClass::kFloat: return std::is_floating_point_v<T>;
    case TypeClass::kPred: return std::is_same_v<T, uint8_t>;
  }
  return false;
}

// Unary opcode `op` applied to x.
template <typename T>
T ApplyUnary(Opcode op, T x) {
  switch (op) {
#define LAZYRT_X(name, number, types, fn)                                    \
  case Opcode::k##name:                                                      \
    if constexpr (kComputes<T>(TypeClass::types)) return static_cast<T>(fn); \
    break;
    LAZYRT_UNARY_OPCODES(LAZYRT_X)
#undef LAZYRT_X
#define LAZYRT_X(name, ...) case Opcode::k##name:
    LAZYRT_BINARY_OPCODES(LAZYRT_X)
    LAZYRT_OTHER_OPCODES(LAZYRT_X)
#undef LAZYRT_X
    break;
  }
  OpcodeUnreachable("ApplyUnary", static_cast<int32_t>(op));
}

// Binary opcode `op` applied to a and b.
template <typename T>
T ApplyBinary(Opcode op, T a, T b) {
  switch (op) {
#define LAZYRT_X(name, number, types, fn)                                    \
  case Opcode::k##name:                                                      \
    if constexpr (kComputes<T>(TypeClass::types)) return static_cast<T>(fn); \
    break;
    LAZYRT_BINARY_OPCODES(LAZYRT_X)
#undef LAZYRT_X
#define LAZYRT_X(name, ...) case Opcode::k##name:
    LAZYRT_UNARY_OPCODES(LAZYRT_X)
    LAZYRT_OTHER_OPCODES(LAZYRT_X)
#undef LAZYRT_X
    break;
  }
  OpcodeUnreachable("ApplyBinary", static_cast<int32_t>(op));
}

template <typename T>
uint8_t ApplyCompare(CompareDirection direction, T a, T b) {
  switch (direction) {
#define LAZYRT_X(name, number, fn) \
  case CompareDirection::k##name: return fn;
    LAZYRT_COMPARE_DIRECTIONS(LAZYRT_X)
#undef LAZYRT_X
  }
  OpcodeUnreachable("ApplyCompare", static_cast<int32_t>(direction));
}

// The result of reducing nothing with `combiner`.
template <typename T>
T ReduceIdentity(Combiner combiner) {
  switch (combiner) {
#define LAZYRT_X(name, number, types, identity, fn)                                \
  case Combiner::k##name:                                                          \
    if constexpr (kComputes<T>(TypeClass::types)) return static_cast<T>(identity); \
    break;
    LAZYRT_REDUCE_COMBINERS(LAZYRT_X)
#undef LAZYRT_X
  }
  OpcodeUnreachable("ReduceIdentity", static_cast<int32_t>(combiner));
}

// Accumulator a combined with value b.
template <typename T>
T Combine(Combiner combiner, T a, T b) {
  switch (combiner) {
#define LAZYRT_X(name, number, types, identity, fn)                          \
  case Combiner::k##name:                                                    \
    if constexpr (kComputes<T>(TypeClass::types)) return static_cast<T>(fn); \
    break;
    LAZYRT_REDUCE_COMBINERS(LAZYRT_X)
#undef LAZYRT_X
  }
  OpcodeUnreachable("Combine", static_cast<int32_t>(combiner));
}

// Counter-based random bits: the same (seed, stream, index) gives the same bits on any thread in any
// order, so a random kernel is deterministic and parallel.
inline uint64_t RandomBits(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t x = seed ^ (stream * 0x9e3779b97f4a7c15ull) ^ (index * 0xd1b54a32d192ed03ull);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}
inline double UniformFromBits(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }
inline double RandomUniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return UniformFromBits(RandomBits(seed, stream, index));
}
// Box-Muller on two independent draws.
inline double RandomNormal(uint64_t seed, uint64_t stream, uint64_t index) {
  const double u1 = 1.0 - RandomUniform(seed, stream, 2 * index);  // (0, 1]: log is finite
  const double u2 = RandomUniform(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace lazyrt::pjrt
