// A fused elementwise program, ready to run: evaluates one value per point of an iteration space,
// a block of consecutive points at a time, each step a tight loop over the block. Built from the
// executable's Steps at load time, after checking every reference and view bound.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

// How a step's values are held while computing: bf16/f16 compute as f32, pred as one byte.
enum class ComputeType : uint8_t { kF32, kF64, kS32, kS64, kPred };
ComputeType ComputeTypeOf(PrimitiveType type);

class FusedProgram {
 public:
  static constexpr int64_t kBlock = 256;

  // Checks `steps` against the kernel's inputs and iteration space: argument indices, types, and that
  // every load stays inside its input for every point of the space.
  static absl::StatusOr<FusedProgram> Build(const google::protobuf::RepeatedPtrField<proto::Step>& steps,
                                            std::span<const ArrayShape> inputs, const ArrayShape& space);

  PrimitiveType result_type() const { return result_type_; }
  // Scratch bytes Evaluate needs.
  size_t scratch_bytes() const { return steps_.size() * kBlock * 8; }

  // Evaluates points [begin, begin + n) (n <= kBlock). Returns the result block, held in `scratch` in
  // the result's compute type.
  const void* Evaluate(std::span<const void* const> inputs, int64_t begin, int64_t n, void* scratch) const;

  struct CompiledStep {
    bool load = false;
    proto::Opcode opcode = proto::OPCODE_INVALID;
    PrimitiveType type = PrimitiveType::kF32;      // result element type
    PrimitiveType arg_type = PrimitiveType::kF32;  // first argument's (CONVERT, COMPARE)
    int32_t args[3] = {0, 0, 0};
    int32_t input = 0;
    int64_t offset = 0;
    std::vector<int64_t> strides;
    enum class Access : uint8_t { kContiguous, kScalar, kStrided } access = Access::kStrided;
    double value = 0;
    int32_t axis = -1;  // IOTA: the iteration dim it counts along (-1: constant)
    int64_t start = 0, step = 0;
    proto::CompareDirection direction = proto::EQ;
    uint64_t stream = 0;
  };

 private:
  std::vector<CompiledStep> steps_;
  std::vector<int64_t> space_dims_;
  PrimitiveType result_type_ = PrimitiveType::kF32;
};

// Stores a block in compute type `from` as elements of `to` (rounding to bf16/f16 as needed).
void StoreBlock(const void* block, ComputeType from, PrimitiveType to, void* dst, int64_t n);

}  // namespace lazyrt::pjrt
