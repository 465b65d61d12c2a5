// Autotuning: the compiler's choice among kernel variants (GEMM panels, loop grains), made by timing
// them on the device, and stored in the executable so that loading it never measures again.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "pjrt_sim/device.h"
#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/gemm_tuning.h"

namespace lazyrt::pjrt {

// Measures the candidate configurations of every kernel worth tuning on probe data in `device`'s memory,
// and keeps the fastest whose output is bit-identical to its reference's (a loop's serial run, a DOT's
// whole product on its GEMM library), so tuning never changes a result. Records every candidate's time
// in `exe.autotune`. With `gemm_tuning`, a DOT whose shape the machine's record lacks first has every
// GEMM library timed (each in its fastest variant that computes its whole product's bits); the fastest is recorded, the
// CPU's preferred one unless another beats it by kGemmLibraryMargin, and the DOT runs on whichever the record then
// names.
absl::Status Autotune(proto::Executable& exe, Device* device, const GemmTuningRecord* gemm_tuning = nullptr);

// One variant of a DOT run on one GEMM library: its best time, and the bits it computed.
struct TimedVariant {
  double us;
  std::string bits;
};

// The time a GEMM library is recorded by for a DOT: its fastest variant among those computing the bits of the
// first (the whole product), for the DOT's tuning keeps only those. Nothing when there are no variants.
std::optional<double> LibraryTimeUs(std::span<const TimedVariant> variants);

// Which way to split a product over `threads` (kDotRowPanels or kDotColumnPanels), once timing has chosen
// to split it: the panels that bring the fewest bytes into each thread's caches. A row panel reads its
// rows of A and all of B; a column panel all of A and its columns of B, and writes columns of C that the
// next kernel (splitting arrays into contiguous ranges, as parallel loops and row panels do) reads
// (threads - 1) / threads of from the other threads. Timing cannot tell the two apart: the tuner's
// repeated runs find every operand in each core's caches, where a step's come from the kernels before it.
// The MLP's x W1^T ([128x784]x[784x256], W1 twice x's bytes) took row panels by timing; in column panels
// each thread reads the rows of W1 its half of AdamW wrote (benchmarks/RESULTS.md, 2026-11-29). With two
// threads its weight gradient [256x128]x[128x784] stays in row panels, which AdamW's halves read where
// they were written (with four, it would go to columns). A tie goes to rows.
int64_t DotSplitVariant(const proto::Kernel& dot, int64_t operand_bytes, int64_t output_bytes, int threads);

// How much faster than the preferred library another must measure to be recorded instead: more than
// the noise of a shared machine, so that the record does not flip on it.
inline constexpr double kGemmLibraryMargin = 0.10;

}  // namespace lazyrt::pjrt
