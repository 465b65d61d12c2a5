#include "pjrt_sim/compiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "pjrt_sim/autotune.h"
#include "pjrt_sim/buffer_assignment.h"
#include "pjrt_sim/cpu_isa.h"
#include "pjrt_sim/elapsed.h"
#include "pjrt_sim/fusion.h"
#include "pjrt_sim/gemm_tuning.h"
#include "pjrt_sim/hlo.h"
#include "pjrt_sim/kernels/gemm.h"
#include "pjrt_sim/module_verifier.h"
#include "pjrt_sim/passes.h"
#include "pjrt_sim/spmd_partitioner.h"
#include "pjrt_sim/status_macros.h"
#include "pjrt_sim/version.h"

namespace lazyrt::pjrt {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int64_t> g_passes_run{0};

// Runs one pass, recording its time and changes (summed over repeated runs of the same pass).
int64_t RunPass(proto::Executable& exe, const std::string& name, const std::function<int64_t()>& pass) {
  g_passes_run.fetch_add(1, std::memory_order_relaxed);
  const Clock::time_point start = Clock::now();
  const int64_t changes = pass();
  const double ms = MsSince(start);
  for (proto::PassTiming& t : *exe.mutable_pass_timings()) {
    if (t.pass() == name) {
      t.set_ms(t.ms() + ms);
      t.set_changes(t.changes() + changes);
      return changes;
    }
  }
  proto::PassTiming* t = exe.add_pass_timings();
  t->set_pass(name);
  t->set_ms(ms);
  t->set_changes(changes);
  return changes;
}

}  // namespace

std::string CompileOptions::Fingerprint() const {
  return absl::StrCat("fusion=", fusion, ";autotune=", autotune, ";max_fusion_steps=", max_fusion_steps,
                      ";all_reduce_combine_bytes=", all_reduce_combine_bytes);
}

int64_t CompilerPassesRun() { return g_passes_run.load(std::memory_order_relaxed); }

absl::StatusOr<std::shared_ptr<Executable>> Compile(const proto::Module& global, const CompileOptions& options,
                                                    Device* device) {
  const Clock::time_point start = Clock::now();
  // A module over a mesh is first split into its partitions' program; the rest compiles that.
  std::optional<SpmdPartitioned> spmd;
  if (!global.mesh().shape().empty() && global.num_partitions() <= 1) {
    RETURN_IF_ERROR(VerifyModule(global));
    ASSIGN_OR_RETURN(spmd, PartitionSpmd(global));
  }
  const proto::Module& module = spmd ? spmd->module : global;
  proto::Executable exe;
  exe.set_compiler_version(std::string(kCompilerVersion));
  exe.set_device_kind(std::string(Device::kKind));
  exe.set_cpu_isa(HostIsa());
  exe.set_module_name(module.name());
  exe.set_module_instructions(module.instructions_size());
  exe.set_num_partitions(std::max<int64_t>(module.num_partitions(), 1));
  if (spmd) {
    *exe.mutable_mesh() = module.mesh();
    for (const proto::Sharding& s : spmd->parameter_shardings) *exe.add_parameter_shardings() = s;
    for (const proto::Sharding& s : spmd->output_shardings) *exe.add_output_shardings() = s;
    exe.set_replicated_fallbacks(spmd->replicated_fallbacks);
    for (proto::Resharding& r : spmd->reshardings) *exe.add_reshardings() = std::move(r);
  }

  absl::Status verified;
  RunPass(exe, "verify", [&] {
    verified = VerifyModule(module);
    return int64_t{0};
  });
  RETURN_IF_ERROR(verified);
  for (const proto::Instruction& inst : module.instructions()) {
    (*exe.mutable_op_histogram())[OpcodeName(static_cast<Opcode>(inst.opcode()))]++;
  }
  std::optional<HloModule> hlo = FromVerifiedProto(module);
  RunPass(exe, "dce", [&] { return EliminateDeadCode(*hlo); });
  for (int round = 0; round < 4; ++round) {
    int64_t changes = 0;
    changes += RunPass(exe, "algebraic_simplifier", [&] { return SimplifyAlgebra(*hlo); });
    changes += RunPass(exe, "constant_folding", [&] { return FoldConstants(*hlo); });
    changes += RunPass(exe, "cse", [&] { return EliminateCommonSubexpressions(*hlo); });
    changes += RunPass(exe, "dce", [&] { return EliminateDeadCode(*hlo); });
    if (changes == 0) break;
  }
  // After the simplifications (which may remove all-reduces or make two the same), before fusion (which
  // fuses the pieces' slices into their readers). One partition's all-reduces only copy: not combined.
  if (hlo->num_partitions > 1 && RunPass(exe, "all_reduce_combiner", [&] {
                                   return CombineAllReduces(*hlo, options.all_reduce_combine_bytes);
                                 }) > 0) {
    RunPass(exe, "dce", [&] { return EliminateDeadCode(*hlo); });
  }
  RunPass(exe, "schedule_reductions_early", [&] { return ScheduleReductionsEarly(*hlo); });
  absl::Status emitted = absl::OkStatus();
  RunPass(exe, "fusion", [&]() -> int64_t {
    absl::StatusOr<int64_t> fused =
        EmitKernels(*hlo, FusionOptions{.enabled = options.fusion, .max_program_steps = options.max_fusion_steps}, exe);
    emitted = fused.status();
    return fused.ok() ? *fused : 0;
  });
  if (!emitted.ok()) return emitted;
  // Every DOT and attention kernel on the GEMM library the machine's record names for its product, else
  // on the one this CPU runs fastest: either way a function of the machine, so that every compile of a
  // graph on it computes the same bits (autotuning may add a shape to the record, never change one).
  const std::optional<GemmTuningRecord> tuning =
      options.gemm_tuning_file.empty() ? std::nullopt : std::optional<GemmTuningRecord>(options.gemm_tuning_file);
  for (proto::Kernel& kernel : *exe.mutable_kernels()) {
    const std::optional<GemmShape> shape = TunedGemmShape(exe, kernel);
    if (!shape) continue;
    const std::optional<GemmLibrary> recorded = tuning ? tuning->Lookup(*shape) : std::nullopt;
    kernel.set_gemm_library(static_cast<int32_t>(recorded.value_or(PreferredGemmLibrary())));
  }
  RunPass(exe, "buffer_assignment", [&] { return AssignBuffers(exe); });
  if (options.autotune) {
    absl::Status tuned = absl::OkStatus();
    RunPass(exe, "autotune", [&] {
      tuned = Autotune(exe, device, tuning ? &*tuning : nullptr);
      return static_cast<int64_t>(exe.autotune_size());
    });
    // Probe buffers that do not fit beside what the device already holds cost only the tuning: the
    // kernels as emitted are correct, so a graph that would run must not fail to compile for it.
    if (absl::IsResourceExhausted(tuned)) tuned = absl::OkStatus();
    if (!tuned.ok()) return tuned;
  }
  exe.set_compile_ms(MsSince(start));
  return Executable::Load(std::move(exe));
}

}  // namespace lazyrt::pjrt
