// A loaded executable: the compiled artifact (see executable.proto) with its kernels built. Loading —
// from the compiler or from serialized bytes — validates every index and size and builds kernels; it
// never runs a compiler pass.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pjrt_sim/buffer.h"
#include "pjrt_sim/event.h"
#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/kernels/kernels.h"
#include "pjrt_sim/version.h"

namespace lazyrt::pjrt {

class Executable : public std::enable_shared_from_this<Executable> {
 public:
  // Checks `proto` (versions, slots, arena bounds, kernels, programs) and builds its kernels.
  static absl::StatusOr<std::shared_ptr<Executable>> Load(proto::Executable proto);
  // Parses bytes made by Serialize(): a header (magic, format version, length), then the proto.
  static absl::StatusOr<proto::Executable> Parse(absl::string_view bytes);

  const proto::Executable& proto() const { return proto_; }
  // The compiled artifact as bytes, for the persistent cache.
  std::string Serialize() const;

  // Runs on `device`'s stream with `args` as parameters; returns the results at once, each ready when
  // the stream has computed it (or failed: the error is then reported by the buffer). Fails
  // immediately on a wrong argument or when the device cannot hold the arena and results (the arena is
  // reserved here and bound as the run starts: Device::ReserveArena; a host that cannot then provide its memory
  // fails the run, reported by the results, and aborts its other partitions). An executable
  // cheaper than a hand-off (inline_ns()) on an idle stream runs on the calling thread before this returns.
  // An index out of range is reported as "<op>: index ..." where <op> is name_site(the instruction's
  // site) (the caller's op and line), or the opcode's name without a namer or for site 0.
  // An executable of several partitions runs with ExecutePartitioned only.
  // `spare_core`, if given, is set when the stream starts spare_core_kernel(), or when the execution ends
  // (or fails) without having started it; not if Execute itself returns an error.
  using SiteNamer = std::function<std::string(int64_t site)>;
  absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> Execute(std::span<const std::shared_ptr<Buffer>> args,
                                                               Device* device, SiteNamer name_site = nullptr,
                                                               std::shared_ptr<Event> spare_core = nullptr) const;

  // Runs the program once per partition, partition p on devices[p] with args[p] (buffers on that
  // device) as its parameters, all partitions at once, meeting at the collectives through
  // `communicator` (InProcessCommunicator::Default() if null). Returns each partition's results at
  // once, as Execute does; a partition that fails aborts the execution on the communicator, so the
  // others fail at their next collective instead of waiting out its timeout. Needs num_partitions()
  // distinct devices: a device's stream runs one partition at a time, and two partitions on one
  // stream would wait for each other. A null device (with a communicator reaching other processes)
  // is a partition another process runs: it gets no arguments here and no results.
  //
  // How devices share the host's cores: each partition runs on its own device's stream thread, and
  // every kernel's intra-op parallelism goes through the one process-wide ThreadPool (a worker per
  // core, one ParallelFor at a time), so N devices add N mostly-sleeping stream threads, not N pools.
  // A partition waiting at a collective sleeps on a condition variable (no core used), and a rendezvous
  // never waits inside a ParallelFor, so partitions sharing the pool cannot deadlock it: the pool's
  // tasks never wait on another partition.
  // `spare_core`: as Execute's with one partition; with several (whose kernels all share the pool), set at
  // once.
  absl::StatusOr<std::vector<std::vector<std::shared_ptr<Buffer>>>> ExecutePartitioned(
      std::span<const std::vector<std::shared_ptr<Buffer>>> args, std::span<Device* const> devices,
      Communicator* communicator = nullptr, SiteNamer name_site = nullptr,
      std::shared_ptr<Event> spare_core = nullptr) const;
  int64_t num_partitions() const { return std::max<int64_t>(proto_.num_partitions(), 1); }

  // Runs the kernels in order on memory the caller provides: one pointer per slot (aliases and arena
  // slots resolved by the caller through SlotPointers). Used by Execute and by autotuning. With `profile`
  // on, each kernel's time is added to kernel_times(); with kTimesAndReruns, kernels also run a second time
  // (KernelProfiling says which), timed apart. `where`: the partition of an execution it runs as (none:
  // partition 0 without a communicator, where collectives of groups of one work). `spare_core`, if given,
  // is set as spare_core_kernel() starts.
  absl::Status RunKernels(std::span<void* const> slot_ptrs, KernelProfiling profile = KernelProfiling::kOff,
                          const SiteNamer& name_site = nullptr, const PartitionContext* where = nullptr,
                          Event* spare_core = nullptr) const;

  // Where a host thread waiting for this executable's predecessor should resume: the first kernel that
  // runs on the stream's thread alone (Kernel::SplitsOverPool) after one that splits over the pool; -1
  // if none, or where the pool has one thread. A step's first kernels are its forward products, split over every core;
  // a host resuming then preempts one of the pool's threads mid-task while the others wait for it (the MLP's first
  // product took 150-180 us a step instead of 125), and from a serial kernel on a core of the pool is
  // idle. How long executions ran on from there, in nanoseconds (a moving average over the runs given a
  // `spare_core` event that reached it; -1 before any): whether the host has time to trace its next step
  // meanwhile.
  int64_t spare_core_kernel() const { return spare_core_kernel_; }
  int64_t after_spare_core_ns() const { return after_spare_core_ns_.load(std::memory_order_relaxed); }

  // How often each kernel (in schedule order) ran and for how long, over the executions on devices
  // with kernel profiling on: where an executable's device time goes. The first run is also kept apart:
  // it pays what later runs do not (pages of a new arena touched, a library's first call for a shape on a
  // thread), tens of milliseconds for some kernels of the GPT's step, which a mean over a short run hides
  // in every run.
  // With reruns (KernelProfiling::kTimesAndReruns), the second runs apart: `reruns` of `rerun_ns` in all, one
  // after each run but the first.
  struct KernelTime {
    int64_t runs = 0;
    int64_t total_ns = 0;
    int64_t first_ns = 0;
    int64_t reruns = 0;
    int64_t rerun_ns = 0;
  };
  std::vector<KernelTime> kernel_times() const;
  // Pointers for every slot given parameter memory, the arena and result memory.
  std::vector<void*> SlotPointers(std::span<void* const> params, void* arena, std::span<void* const> outputs) const;

  // What running the kernels on the calling thread is estimated to take, in nanoseconds: kNsPerElementStep
  // per element and program step over all kernels; kNeverInline with a GEMM or attention. Execute runs
  // the executable inline on an idle stream when this is at most what waking the stream's thread costs
  // (Stream::wake_ns(), measured).
  int64_t inline_ns() const { return inline_ns_; }
  // A program step on a one-element array takes 5.9 ns with the kernel's dispatch (a 1,083-step, 21-kernel
  // graph: 6.35 us; benchmarks/RESULTS.md), less per element on longer arrays.
  static constexpr int64_t kNsPerElementStep = 6;
  static constexpr int64_t kNeverInline = std::numeric_limits<int64_t>::max();
  // Whether a kernel checks indices (gather, scatter and the like): only then can a run fail at a site
  // that Execute's SiteNamer names.
  bool checks_indices() const { return checks_indices_; }
  // What Execute takes and gives: its signature, checked against the graph it is loaded for.
  const std::vector<ArrayShape>& parameter_shapes() const { return parameter_shapes_; }
  const std::vector<ArrayShape>& output_shapes() const { return output_shapes_; }

  static constexpr uint32_t kFormatVersion = kExecutableFormatVersion;
  // What a stored executable must have been produced by to be loadable here, as text:
  // pjrt::ProducerVersion::Current().ToString(). The producer version of every cache entry.
  static std::string ProducerVersion();

 private:
  explicit Executable(proto::Executable proto) : proto_(std::move(proto)) {}

  proto::Executable proto_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
  std::vector<ArrayShape> output_shapes_;
  std::vector<ArrayShape> parameter_shapes_;
  int64_t inline_ns_ = kNeverInline;
  bool checks_indices_ = false;
  int64_t spare_core_kernel_ = -1;
  mutable std::atomic<int64_t> after_spare_core_ns_{-1};
  struct AtomicKernelTime {
    std::atomic<int64_t> runs{0}, total_ns{0}, first_ns{0}, reruns{0}, rerun_ns{0};
  };
  std::unique_ptr<AtomicKernelTime[]> kernel_times_;
};

// What kernel `kernel` of `exe` iterates over, for people: "1 x [128x784]x[784x256]" for a GEMM (batch x
// [m x k] x [k x n]), the iteration space ("128x256", "scalar") of a kernel that has one (loops,
// reductions, scans, sorts), else the shape of what it writes (a layer norm's "4096x128", attention's
// packed result, a gather's or concatenation's result).
std::string KernelIterationText(const proto::Executable& exe, const proto::Kernel& kernel);

}  // namespace lazyrt::pjrt
