// The one dispatch from an element type to the C++ type it is computed in. The kernels and constant
// folding both go through it, which is what keeps a folded constant bit-identical to the kernel's result.
#pragma once

#include <cstdint>

#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

// bf16 and f16 are computed in f32; pred in uint8_t (0 or 1).
enum class ComputeType : uint8_t { kF32, kF64, kS32, kS64, kPred };

constexpr ComputeType ComputeTypeOf(PrimitiveType type) {
  switch (type) {
    case PrimitiveType::kF32:
    case PrimitiveType::kBF16:
    case PrimitiveType::kF16: return ComputeType::kF32;
    case PrimitiveType::kF64: return ComputeType::kF64;
    case PrimitiveType::kS32: return ComputeType::kS32;
    case PrimitiveType::kS64: return ComputeType::kS64;
    case PrimitiveType::kPred: return ComputeType::kPred;
  }
  return ComputeType::kF32;  // unreachable: the switch covers every type
}

// Calls f.template operator()<T>() with T the C++ type of compute type `t`.
template <typename F>
decltype(auto) DispatchComputeType(ComputeType t, F&& f) {
  switch (t) {
    case ComputeType::kF64: return f.template operator()<double>();
    case ComputeType::kS32: return f.template operator()<int32_t>();
    case ComputeType::kS64: return f.template operator()<int64_t>();
    case ComputeType::kPred: return f.template operator()<uint8_t>();
    case ComputeType::kF32: break;
  }
  return f.template operator()<float>();
}
template <typename F>
decltype(auto) DispatchComputeType(PrimitiveType type, F&& f) {
  return DispatchComputeType(ComputeTypeOf(type), static_cast<F&&>(f));
}

}  // namespace lazyrt::pjrt
