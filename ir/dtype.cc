#include "ir/dtype.h"

namespace lazyrt::ir {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kBool: return "bool";
  }
  return "?";
}

std::optional<DType> DTypeFromName(absl::string_view name) {
  for (DType d : kAllDTypes) {
    if (DTypeName(d) == name) return d;
  }
  return std::nullopt;
}

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64: return 8;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kBool: return 1;
  }
  return 0;
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kBF16 || dtype == DType::kF16;
}

bool IsIntegral(DType dtype) { return dtype == DType::kI32 || dtype == DType::kI64; }

namespace {
// Rank in the promotion lattice; bf16 and f16 promote to f32 when mixed.
int Rank(DType d) {
  switch (d) {
    case DType::kBool: return 0;
    case DType::kI32: return 1;
    case DType::kI64: return 2;
    case DType::kBF16:
    case DType::kF16: return 3;
    case DType::kF32: return 4;
    case DType::kF64: return 5;
  }
  return 0;
}
}  // namespace

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  if ((a == DType::kBF16 && b == DType::kF16) || (a == DType::kF16 && b == DType::kBF16)) {
    return DType::kF32;
  }
  return Rank(a) >= Rank(b) ? a : b;
}

}  // namespace lazyrt::ir
