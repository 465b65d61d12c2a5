// Runtime configuration: `lazyrt::Options` in code, or LAZYRT_* environment variables. Every setting
// is declared once, in options.cc; an unknown LAZYRT_* variable or an unparsable value is refused,
// naming the valid settings, so a typo never silently runs a different configuration.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace lazyrt {

// The most processes a job may have (LAZYRT_WORLD_SIZE and its fallbacks): more is a typo, not a job.
inline constexpr int kMaxProcesses = 4096;

struct Options {
  // Simulated devices on the host (like the chips of a v6e-8 host).
  int devices = 1;
  // Memory capacity of each device, in bytes.
  int64_t device_memory_bytes = int64_t{16} << 30;
  // Bake host scalars equal to 0 or 1 into graphs as constants (enables x*1 -> x and friends; a
  // scalar that moves between 0, 1 and other values then compiles more than one graph).
  bool special_scalars = false;
  // Seed of the device random number generator.
  uint64_t seed = 0;
  // Sync (cause graph_limit) when this many ops have been traced on a device since its
  // last sync: a bound on graph size for programs that never call sync(). 0: no bound.
  int64_t graph_limit = 0;
  // How long a partition waits at a collective for the others before the execution fails naming
  // those that did not arrive.
  double collective_timeout_ms = 60'000;
  // This process's place in a job of several (lazy/distributed.h): its rank (-1: unset), the number of
  // processes (0: unset; then torchrun's or Open MPI's variables, or 1), and where ranks meet
  // ("file:///shared/dir").
  int rank = -1;
  int world_size = 0;
  std::string coordinator;
  // A step's all-reduces with the same combiner, type and groups that do not depend on one another are
  // combined into collectives of up to this many bytes (gradient buckets: one collective's latency
  // instead of one per gradient; the bits do not change). 0: one all-reduce per value. The default is
  // pjrt::kDefaultAllReduceCombineBytes (a test checks that they agree).
  int64_t all_reduce_combine_bytes = int64_t{32} << 20;

  // The persistent cache of compiled executables. Off: every process compiles its graphs itself.
  bool persistent_cache = true;
  // Its directory; empty: $XDG_CACHE_HOME/lazyrt, else ~/.cache/lazyrt.
  std::string cache_dir;
  // Use entries, never write, touch or remove any.
  bool cache_read_only = false;
  // The machine's GEMM tuning record (pjrt_sim/gemm_tuning.h), shared by every program on the machine
  // whatever its cache_dir; empty: $XDG_CACHE_HOME/lazyrt-machine/gemm_tuning.txt, else
  // ~/.cache/lazyrt-machine/gemm_tuning.txt (gemm_tuning-asan.txt and so on for an instrumented build's).
  std::string gemm_tuning_file;
  // Keep the directory at most this big by evicting least-recently-used entries; 0: no limit.
  int64_t cache_max_bytes = 0;
  // Results that compiled faster than this are not stored.
  double cache_min_compile_ms = 0;
  // How long a process that misses a graph another process is compiling waits for that process's
  // entry before compiling the graph itself (cache/compile_lease.h). Five minutes: a hundred times the
  // longest compile of the examples here (the GPT's first step, 3.8 s cold) and in the range of the
  // largest models' XLA compiles, so a live compiler is always waited for; giving up costs one compile
  // more, never a wrong result, and a stopped or stuck compiler delays the others by no more than
  // this. A killed compiler releases its lease at once and is not waited for. 0: never wait.
  double compile_wait_ms = 300'000;

  // Diagnostics: 1 = an analysis at exit and a warning when a late step compiles a new graph;
  // 2 = also a line per sync; 3 = also the device time of every kernel, at exit. Written to debug_file,
  // or stderr.
  int debug = 0;
  std::string debug_file;
  // Time every kernel and print the `kernel_profile` longest at exit (0: off; LAZYRT_DEBUG=3 prints 30), with
  // nothing else of the debug levels: their call stacks cost the host ~2 us per input traced, and a host that
  // traces while the device runs takes a core from the kernels it then times (the MLP's first product
  // 151-182 us without them, 223-247 at level 3: benchmarks/RESULTS.md, session 33).
  int64_t kernel_profile = 0;
  // With the kernel profile (kernel_profile > 0 or debug >= 3, which it needs), run every kernel a second time right
  // after it and time that too (pjrt::KernelProfiling): the profile then shows what each kernel costs with its data
  // in its cores' caches and the pool awake, and so what the rest of its time went on. Steps take longer: a
  // diagnostic, not a way to train.
  bool kernel_profile_reruns = false;
  // Write the run report (JSON) / a Chrome trace to this file at exit.
  std::string report;
  std::string trace;

  // Defaults overridden by the LAZYRT_* variables of the environment. Error on an unknown LAZYRT_*
  // name, an unparsable value, or settings that contradict each other (Check).
  static absl::StatusOr<Options> FromEnvironment();
  // Error where settings that are valid alone contradict each other: kernel reruns without the kernel
  // profile they add to. configure() checks options set in code the same way.
  absl::Status Check() const;
  // Applies one setting by its environment name ("LAZYRT_DEVICES") and textual value.
  absl::Status Set(absl::string_view name, absl::string_view value);
  // Every setting as (LAZYRT_* name, current value), in declaration order: the run manifest.
  std::vector<std::pair<std::string, std::string>> Resolved() const;
  // The LAZYRT_* names, comma-separated.
  static std::string ValidNames();
};

// "512M", "10G", "1.5GiB", "4096" -> bytes.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

}  // namespace lazyrt
