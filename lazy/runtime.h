// Process-wide state behind the tensor API: the resolved options, the device client, and per device
// the registry of live tensors and the random-number state. Internal to lazy/.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "ir/node.h"
#include "lazy/options.h"
#include "lazy/sharded_data.h"
#include "lazy/spin_mutex.h"
#include "lazy/tensor.h"
#include "pjrt_sim/buffer.h"
#include "pjrt_sim/client.h"

namespace lazyrt {

// Sets the options of the runtime. Must be called before the first tensor is created; afterwards
// the runtime is fixed and this throws. Without it the runtime uses Options::FromEnvironment().
void configure(const Options& options);
// The options in force (initializing the runtime if needed).
const Options& options();

namespace detail {

// A materialized device array behind a DeviceData leaf.
struct BufferLeaf final : ir::LeafData {
  explicit BufferLeaf(std::shared_ptr<pjrt::Buffer> b, std::shared_ptr<const ShardedData> s = nullptr)
      : buffer(std::move(b)), sharded(std::move(s)) {}
  std::shared_ptr<pjrt::Buffer> buffer;
  std::shared_ptr<const ShardedData> sharded;  // instead of `buffer`: the array's pieces over a mesh
};

// A host scalar waiting to be uploaded as a graph parameter at the next sync.
struct ScalarLeaf final : ir::LeafData {
  ScalarLeaf(double v) : value(v) {}
  double value;
};

struct DeviceState;
struct GradFn;

// What a Tensor handle refers to. The reference count is kept here rather than in a shared_ptr's
// control block: the registry must turn its raw links into references, skipping a tensor that is
// being destroyed, which a shared_ptr allows only through enable_shared_from_this's weak count, three
// atomic operations more per tensor than the one an intrusive count needs (a make_shared and release:
// 31.8 ns with it, 9.9 ns with a count of its own; benchmarks/RESULTS.md).
struct TensorImpl {
  TensorImpl(Shape shape, int device, SourceLocation created_at)
      : shape(std::move(shape)), device(device), created_at(created_at) {}
  ~TensorImpl();
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;

  // Tensor handles referring to this; it is deleted when the last goes.
  std::atomic<int64_t> refs{1};

  Shape shape;
  int device;
  // Where the user created the tensor: the creation site of its DeviceData leaves.
  SourceLocation created_at;
  // The pending computation, or (for a materialized tensor) a cached DeviceData leaf, so that every
  // use within one graph refers to the same parameter.
  ir::Value ir;
  std::shared_ptr<pjrt::Buffer> buffer;
  // Instead of `buffer`, after an SPMD step: the value's pieces on the mesh's devices.
  std::shared_ptr<const ShardedData> sharded;
  // mark_sharding's layout over a mesh (the attributes of the Shard nodes that annotate every use of the
  // tensor's value), or nullopt.
  std::optional<ir::Attributes> sharding;

  // Autograd: a leaf that accumulates gradients, or the function that produced this tensor.
  bool requires_grad = false;
  bool is_leaf = true;  // false once produced by an op that records a GradFn
  std::shared_ptr<GradFn> grad_fn;
  Tensor grad;

  // Intrusive links of the device's live-tensor registry (guarded by its mutex).
  TensorImpl* prev = nullptr;
  TensorImpl* next = nullptr;
  bool registered = false;
};

struct DeviceState {
  // Adds `t` to the registry (once).
  void Register(TensorImpl* t);
  void Unregister(TensorImpl* t);
  // Removes tensors that no longer have pending IR (after a sync). A tensor re-registers when it gets
  // new pending IR, so the registry lists each step's tensors in the order that step created or
  // updated them: the same order, and the same graph key, every step.
  void UnregisterSynced(const std::vector<Tensor>& synced);
  // Every registered tensor (those with pending IR), in registration order.
  std::vector<Tensor> LiveTensors();

  // The leaf holding this step's random seed (one per step, shared by every random op of the step),
  // and the stream index of the next random op.
  ir::Value SeedValue();
  int64_t NextRngStream() { return rng_stream_++; }
  // Called at every sync: the next step draws different numbers from the same graph.
  void AdvanceRng();
  void Seed(uint64_t seed);

  void Unlink(TensorImpl* t);  // with mu held

  pjrt::Device* device = nullptr;
  SpinMutex mu;  // guards the registry (head, tail and the tensors' links)
  TensorImpl* head = nullptr;
  TensorImpl* tail = nullptr;
  uint64_t rng_seed = 0;
  uint64_t rng_step = 0;
  ir::Value seed_value;
  int64_t rng_stream_ = 0;
  // Ops traced since the last sync (for Options::graph_limit).
  int64_t traced_nodes = 0;
  // The executions launched and maybe not yet finished, oldest first (see Sync): each one's completion,
  // and, for an executable with a spare-core kernel, when it starts that kernel and how long it then
  // runs on (pjrt::Executable::spare_core_kernel).
  struct InFlight {
    std::shared_ptr<pjrt::Event> done;
    std::shared_ptr<pjrt::Event> spare_core;
    int64_t after_spare_core_ns = -1;
  };
  std::deque<InFlight> in_flight;
  // When the host last resumed from waiting for a launch slot, and how long it then ran before it
  // waited again (a moving average; -1 before the first): tracing the next step, compiling, launching.
  std::chrono::steady_clock::time_point resumed_at{};
  int64_t host_run_ns = -1;
  // Synced graphs waiting to go to the releaser together, with their node count and the device bytes
  // their leaves keep alive (see Retire in graph_executor.cc; guarded by the executor's lock).
  std::vector<std::vector<ir::Value>> retired_graphs;
  int64_t retired_nodes = 0;
  int64_t retired_bytes = 0;
};

// A new tensor: the only reference to a new TensorImpl.
inline Tensor NewTensor(Shape shape, int device, SourceLocation created_at) {
  return AdoptTensor(new TensorImpl(std::move(shape), device, created_at));
}

class Runtime {
 public:
  static Runtime& Get();

  const Options& options() const { return options_; }
  pjrt::Client& client() { return *client_; }
  // The state of `device`; throws Error naming the valid devices when out of range.
  DeviceState& device_state(Device device, const SourceLocation& loc);
  int num_devices() const { return static_cast<int>(devices_.size()); }
  // Where synced graphs are torn down, off the caller's thread: freeing thousands of nodes is work
  // the next step need not wait for.
  pjrt::Stream& releaser() { return releaser_; }

 private:
  explicit Runtime(Options options);
  friend void lazyrt::configure(const Options&);
  static void AtExit();

  Options options_;
  const pid_t creator_pid_ = getpid();  // a fork()ed child has none of this runtime's threads
  std::unique_ptr<pjrt::Client> client_;
  std::vector<std::unique_ptr<DeviceState>> devices_;
  pjrt::Stream releaser_;
};

}  // namespace detail
}  // namespace lazyrt
