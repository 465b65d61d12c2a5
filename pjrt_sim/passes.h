// The compiler's optimization passes over an HloModule. Each rewrites in place, keeps operands
// before users, and returns how many instructions it changed.
#pragma once

#include <cstdint>

#include "pjrt_sim/hlo.h"

namespace lazyrt::pjrt {

// Removes instructions no output depends on (parameters stay: they are the calling convention) and
// renumbers the rest densely.
int64_t EliminateDeadCode(HloModule& module);
// Merges instructions that compute the same thing from the same operands.
int64_t EliminateCommonSubexpressions(HloModule& module);
// Identities and strength reductions: x+0, x*1, x/1, -(-x), no-op converts, reshapes, transposes,
// broadcasts and slices; reshape/transpose chains collapsed; a transpose of the last two dims folded
// into a dot that reads it, and a dot whose only use transposes it rewritten as (A B)^T = B^T A^T; a costly
// function (IsCostlyFunction) of a broadcast computed before it, f(broadcast(v)) = broadcast(f(v)).
int64_t SimplifyAlgebra(HloModule& module);
// Evaluates instructions whose operands are all splat constants, with the kernels' own arithmetic.
int64_t FoldConstants(HloModule& module);
// Products and reductions that make a value kShrinkFactor or more times smaller than their largest
// operand (a weight's gradient x^T dY, a bias's column sums, a squared norm) move up to right after their
// latest operand, with the views they read through, instead of where the graph's order put them (a
// step's weight gradients after the whole backward, where its optimizer reads them): they read their
// operands while the caches still hold them, and the operands die there instead of living through the
// rest of the step. Returns how many instructions moved.
inline constexpr int64_t kShrinkFactor = 8;
int64_t ScheduleReductionsEarly(HloModule& module);

}  // namespace lazyrt::pjrt
