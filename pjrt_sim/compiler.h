// The compiler: verifies a Module, runs the optimization passes, fuses, assigns buffers, schedules,
// autotunes kernels on the device, and loads the result.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "pjrt_sim/all_reduce_combiner.h"
#include "pjrt_sim/device.h"
#include "pjrt_sim/executable.h"
#include "pjrt_sim/module.pb.h"

namespace lazyrt::pjrt {

struct CompileOptions {
  bool fusion = true;
  // Measure candidate kernel configurations on the device and keep the fastest. Candidates that
  // would change a single bit of the result are never kept, so tuning cannot change numbers.
  bool autotune = true;
  int64_t max_fusion_steps = 48;
  // All-reduces are combined into collectives of up to this many bytes (CombineAllReduces); 0: never.
  int64_t all_reduce_combine_bytes = kDefaultAllReduceCombineBytes;
  // The machine's GEMM tuning record (gemm_tuning.h): each DOT runs on the library it names for the
  // product's shape; a shape it lacks is measured and recorded when autotuning, else runs on the CPU's
  // preferred library. Empty: no record, the preferred library always. Not in the fingerprint: one
  // machine's record gives one choice per shape, and the key's CPU features part the machines.
  std::string gemm_tuning_file{};

  // Everything here that changes the compiled result, as text (part of every cache key).
  std::string Fingerprint() const;
};

// Compiler passes this process has run (a metric; loading or running an executable runs none).
int64_t CompilerPassesRun();

// Compiles `module` for `device` (autotuning measures on it).
absl::StatusOr<std::shared_ptr<Executable>> Compile(const proto::Module& module, const CompileOptions& options,
                                                    Device* device);

}  // namespace lazyrt::pjrt
