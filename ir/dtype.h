// Element types of tensors.
#pragma once

#include <cstdint>
#include <optional>
#include "absl/strings/string_view.h"

namespace lazyrt::ir {

// Node hashes (the persistent cache's graph keys) take a dtype's number: append new dtypes, never insert
// or reorder.
enum class DType : uint8_t { kF32, kF64, kBF16, kF16, kI32, kI64, kBool };

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                       DType::kI32, DType::kI64, DType::kBool};

// Short lowercase name: "f32", "bf16", "i64", "bool".
absl::string_view DTypeName(DType dtype);
// The inverse of DTypeName; nullopt for an unknown name.
std::optional<DType> DTypeFromName(absl::string_view name);
// Bytes per element.
int64_t DTypeSize(DType dtype);
bool IsFloating(DType dtype);
bool IsIntegral(DType dtype);  // i32, i64 (not bool)
// NumPy/PyTorch-style promotion of two tensor dtypes: bool < integers < floats, wider wins.
DType PromoteTypes(DType a, DType b);

}  // namespace lazyrt::ir
