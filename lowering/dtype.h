// The one mapping between the lazy IR's dtypes and the device's element types, used by lowering, the
// executor and the tensors.
#pragma once

#include "ir/dtype.h"
#include "pjrt_sim/types.h"

namespace lazyrt::lowering {

constexpr pjrt::PrimitiveType DeviceType(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32: return pjrt::PrimitiveType::kF32;
    case ir::DType::kF64: return pjrt::PrimitiveType::kF64;
    case ir::DType::kBF16: return pjrt::PrimitiveType::kBF16;
    case ir::DType::kF16: return pjrt::PrimitiveType::kF16;
    case ir::DType::kI32: return pjrt::PrimitiveType::kS32;
    case ir::DType::kI64: return pjrt::PrimitiveType::kS64;
    case ir::DType::kBool: return pjrt::PrimitiveType::kPred;
  }
  return pjrt::PrimitiveType::kF32;  // unreachable: the switch covers every dtype
}

}  // namespace lazyrt::lowering
