// A fused elementwise program, ready to run: evaluates one value per point of an iteration space,
// a block of consecutive points at a time, each step a tight loop over the block. Built from the
// executable's Steps at load time, after checking every reference and view bound.
//
// Building also prepares the run: every step gets the one loop that computes it (its opcode, types
// and operand access resolved once, not per block), steps whose value is the same at every point
// (constants, scalar loads and what is computed from them only) are computed once per run instead of
// once per block, and held as one element where their readers take one, and steps share scratch
// registers once their value is dead.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "pjrt_sim/compute_type.h"
#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/opcode.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

// How a step's values are held while computing: bf16/f16 compute as f32, pred as one byte.

class FusedProgram {
 public:
  // Points each step computes per call. A call costs ~10 ns whatever it computes, so blocks of 256
  // spent most of a simple loop's time calling (a widening add of [4096, 512]: 295 us against 185 at
  // 1024); at 1024 a register is 4 KiB of f32, and a program's few registers still fit in L1/L2
  // (2048 was no faster). Tests cover lengths around multiples of it.
  static constexpr int64_t kBlock = 1024;

  // The results the caller stores to arrays of their types (StoreBlock): a loop's all, a reduction's
  // extra ones (its value is reduced, not stored). The store rounds a 16-bit result itself, so a stored
  // result no step reads is not rounded before.
  enum class Stored { kAllResults, kExtraResults };

  // Checks `steps` against the kernel's inputs and iteration space: argument indices, types, and that
  // every load stays inside its input for every point of the space. The result is the last step's
  // value; `extra_roots` name more steps whose values are results too (multi-output fusion).
  static absl::StatusOr<FusedProgram> Build(const google::protobuf::RepeatedPtrField<proto::Step>& steps,
                                            std::span<const ArrayShape> inputs, const ArrayShape& space,
                                            std::span<const int64_t> extra_roots, Stored stored);

  // Results: 0 is the last step's, 1... the extra roots' in order.
  PrimitiveType result_type(size_t r = 0) const { return steps_[static_cast<size_t>(roots_[r])].type; }
  // After Prepare on `scratch`: where the value of uniform step `i` is, in its compute type.
  const void* UniformValue(const void* scratch, int32_t i) const { return static_cast<const void* const*>(scratch)[i]; }
  // Where result `r` of the block the last Evaluate on `scratch` computed is.
  const void* ResultBlock(const void* scratch, size_t r) const;
  // Scratch bytes Prepare and Evaluate need.
  size_t scratch_bytes() const;

  // Computes the values shared by every point into `scratch`. Call it once per run on each thread,
  // before that thread's Evaluate calls on the same scratch.
  void Prepare(std::span<const void* const> inputs, void* scratch) const;
  // Prefetches what Evaluate of points [begin, begin + n) (of the iteration space) will load from arrays
  // read in order (kernels/prefetch.h).
  void Prefetch(std::span<const void* const> inputs, int64_t begin, int64_t n) const;
  // The bytes a point loads from arrays read in order (what Prefetch asks for, per point).
  int64_t prefetched_bytes_per_point() const;
  // Evaluates points [begin, begin + n) (n <= kBlock). Returns the result block, held in `scratch` (or
  // read in place from an input) in the result's compute type. `result_dsts[r]`, where given and not
  // null, is where result r's block is stored in its compute type: the step computing it writes there
  // instead of into a register, and ResultBlock is then that address (a result read in place from an
  // input, or named twice, is still only in its register or input: the caller stores it).
  const void* Evaluate(std::span<const void* const> inputs, int64_t begin, int64_t n, void* scratch,
                       std::span<void* const> result_dsts = {}) const;

  struct Step;
  struct Context;
  // The steps as Build prepared them (each load's access, which steps are uniform), and the result steps:
  // the last, then the extra roots.
  const std::vector<Step>& steps() const { return steps_; }
  const std::vector<int32_t>& roots() const { return roots_; }
  // Computes one step over a block; returns where its values are (`out`, or an input read in place).
  using StepFn = const void* (*)(const Step& step, const void* const* values, const Context& context, void* out);

  struct Step {
    bool load = false;
    Opcode opcode = Opcode::kConstant;
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
    CompareDirection direction = CompareDirection::kEq;
    uint64_t stream = 0;
    // Prepared by Build:
    StepFn fn = nullptr;
    bool uniform = false;   // the same value at every point: computed by Prepare
    bool scalar = false;    // uniform, and held as one element (else as a block of copies)
    bool in_place = false;  // a contiguous load needing no conversion: the input is read where it is
    bool round16 = false;   // a bf16/f16 result, rounded to its type as soon as it is computed
    bool forwards = false;  // a CONVERT that changes no value (bf16 to f32, say): its values are its argument's
    int32_t reg = -1;       // scratch register (or scalar) of the values (-1: none, read in place)
    int32_t result = -1;    // the result a per-block step computes into its destination, if given
  };

 private:
  // fn, uniform, scalar, in_place, round16, forwards and registers of every step.
  void Assign(Stored stored);
  char* Registers(void* scratch) const;

  std::vector<Step> steps_;
  std::vector<int32_t> per_block_;  // the steps Evaluate computes, in order
  std::vector<int32_t> roots_;      // the steps whose values are results: the last, then extra roots
  int32_t registers_ = 0, scalars_ = 0;
  size_t register_bytes_ = 0;  // of one register: a block's 8-byte elements, or the space's where fewer
  std::vector<int64_t> space_dims_;
  int64_t space_numel_ = 0;
};

// Stores a block in compute type `from` as elements of `to` (rounding to bf16/f16 as needed).
void StoreBlock(const void* block, ComputeType from, PrimitiveType to, void* dst, int64_t n);

}  // namespace lazyrt::pjrt
