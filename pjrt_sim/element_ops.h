// The arithmetic of one element, per element type, shared by the kernels and by constant folding so
// that a folded constant is bit-identical to what the kernel would have computed. Integer ops wrap
// and never divide by zero or convert out of range (no undefined behaviour on any input).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "pjrt_sim/module.pb.h"

namespace lazyrt::pjrt {

// bf16 and f16 are stored in 16 bits and computed in f32.
inline float Bf16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
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

template <typename T>
T Wrap(uint64_t v) {
  return static_cast<T>(static_cast<std::make_unsigned_t<T>>(v));
}

template <typename T>
T ApplyUnary(proto::Opcode op, T x) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case proto::NEGATE: return -x;
      case proto::ABS: return std::fabs(x);
      case proto::EXP: return std::exp(x);
      case proto::LOG: return std::log(x);
      case proto::SQRT: return std::sqrt(x);
      case proto::RSQRT: return T{1} / std::sqrt(x);
      case proto::TANH: return std::tanh(x);
      case proto::LOGISTIC: return T{1} / (T{1} + std::exp(-x));
      // sign(NaN) is 0, as PyTorch's (both comparisons are false).
      case proto::SIGN: return static_cast<T>((x > 0) - (x < 0));
      default: return x;
    }
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    return op == proto::NOT ? static_cast<T>(!x) : x;
  } else {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case proto::NEGATE: return Wrap<T>(U{0} - static_cast<U>(x));
      case proto::ABS: return x < 0 ? Wrap<T>(U{0} - static_cast<U>(x)) : x;
      case proto::SIGN: return static_cast<T>((x > 0) - (x < 0));
      default: return x;
    }
  }
}

template <typename T>
T ApplyBinary(proto::Opcode op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case proto::ADD: return a + b;
      case proto::SUBTRACT: return a - b;
      case proto::MULTIPLY: return a * b;
      case proto::DIVIDE: return a / b;
      case proto::POWER: return std::pow(a, b);
      // NaN-propagating, as XLA's max/min. `|`, not `||`: no branch, so loops of it vectorize
      // (a != a is the NaN test).
      case proto::MAXIMUM: return ((a != a) | (a > b)) ? a : b;
      case proto::MINIMUM: return ((a != a) | (a < b)) ? a : b;
      default: return a;
    }
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    switch (op) {
      case proto::AND: return a && b;
      case proto::OR: return a || b;
      case proto::MAXIMUM: return a > b ? a : b;
      case proto::MINIMUM: return a < b ? a : b;
      default: return a;
    }
  } else {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case proto::ADD: return Wrap<T>(static_cast<U>(a) + static_cast<U>(b));
      case proto::SUBTRACT: return Wrap<T>(static_cast<U>(a) - static_cast<U>(b));
      case proto::MULTIPLY: return Wrap<T>(static_cast<U>(a) * static_cast<U>(b));
      case proto::DIVIDE:
        // XLA's convention: x / 0 = -1; the one overflowing quotient wraps.
        if (b == 0) return T{-1};
        if (a == std::numeric_limits<T>::min() && b == -1) return a;
        return a / b;
      case proto::POWER: {
        if (b < 0) return a == 1 ? T{1} : (a == -1 ? ((b & 1) ? T{-1} : T{1}) : T{0});
        U result = 1, base = static_cast<U>(a);
        for (T e = b; e > 0; e >>= 1) {
          if (e & 1) result *= base;
          base *= base;
        }
        return Wrap<T>(result);
      }
      case proto::MAXIMUM: return a > b ? a : b;
      case proto::MINIMUM: return a < b ? a : b;
      default: return a;
    }
  }
}

template <typename T>
uint8_t ApplyCompare(proto::CompareDirection dir, T a, T b) {
  switch (dir) {
    case proto::EQ: return a == b;
    case proto::NE: return a != b;
    case proto::LT: return a < b;
    case proto::LE: return a <= b;
    case proto::GT: return a > b;
    case proto::GE: return a >= b;
    default: return 0;
  }
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
