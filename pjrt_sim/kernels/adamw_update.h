// AdamW's update as the fusion pass leaves it: one LOOP kernel whose program is the parameter's new value
// p d - (m s) / (sqrt(v) / c + e) (d the decoupled decay, if any) with the moments it computes as its other
// results (m = m0 k1 + g k2, v = v0 k3 + (g g) k4; a moment computed by another kernel is read instead).
// The interpreter (FusedProgram) runs such a program a step at a time over blocks of points, each step
// reading and writing a block in the core's L1: ~4.5 cycles a point on a Zen 4, three times what the same
// operations take with a point's values in registers (benchmarks/RESULTS.md, 2026-12-01). Recognized at
// load time, the loop runs here with the interpreter's operations in its order, each rounded to f32
// (IEEE add and multiply commute, so operand order within them does not matter): the same bits.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "pjrt_sim/kernels/fused_program.h"
#include "pjrt_sim/kernels/kernels.h"

namespace lazyrt::pjrt {

// A moment: computed by the loop as a k1 + (b c) k2 (c absent: a k1 + b k2), stored as result `result`;
// or, with result -1, read from input `a`. a, b, c: inputs read contiguously over the iteration space;
// k1, k2: steps with the same value at every point (constants, scalars, what is computed from them).
struct AdamWMoment {
  int64_t result = -1;
  int64_t a = -1, b = -1, c = -1;
  int32_t k1 = -1, k2 = -1;
};

// The update: input `param` is p, the rest steps of the same value at every point (decay -1: none).
struct AdamWUpdateLoop {
  int64_t param = -1;
  int32_t decay = -1;
  AdamWMoment m, v;
  int32_t step_size = -1, correction = -1, eps = -1;
};

// The update a LOOP kernel's program computes, if it is one (read as FusedProgram::Build prepared it: each
// load's access checked against its input, the uniform steps known).
std::optional<AdamWUpdateLoop> MatchAdamWUpdate(const FusedProgram& program);

// Runs `loop` over `numel` points in chunks of `grain` (as a LOOP kernel splits over the pool), its uniform
// values computed by `program`.
std::unique_ptr<Kernel> MakeAdamWUpdateKernel(const AdamWUpdateLoop& loop, FusedProgram program, int64_t numel,
                                              int64_t grain);

}  // namespace lazyrt::pjrt
