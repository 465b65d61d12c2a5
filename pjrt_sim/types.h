// Element types and array shapes as the device sees them (PJRT's own vocabulary; it knows nothing of
// the lazy IR above it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

namespace lazyrt::pjrt {

enum class PrimitiveType : uint8_t { kF32, kF64, kBF16, kF16, kS32, kS64, kPred };

inline constexpr PrimitiveType kAllPrimitiveTypes[] = {PrimitiveType::kF32, PrimitiveType::kF64, PrimitiveType::kBF16,
                                                       PrimitiveType::kF16, PrimitiveType::kS32, PrimitiveType::kS64,
                                                       PrimitiveType::kPred};

int64_t ByteWidth(PrimitiveType type);
// bf16 and f16: stored in 16 bits, computed in f32.
constexpr bool Is16BitFloat(PrimitiveType type) { return type == PrimitiveType::kBF16 || type == PrimitiveType::kF16; }
absl::string_view PrimitiveTypeName(PrimitiveType type);

struct ArrayShape {
  PrimitiveType type = PrimitiveType::kF32;
  std::vector<int64_t> dims;

  int64_t numel() const;
  int64_t byte_size() const { return numel() * ByteWidth(type); }
  std::string ToString() const;  // "f32[2,3]"
  friend bool operator==(const ArrayShape&, const ArrayShape&) = default;
};

}  // namespace lazyrt::pjrt
