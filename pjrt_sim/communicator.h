// Collectives behind one interface, modelled on XLA's CPU collectives (xla/backends/cpu/collectives:
// a Communicator with AllReduce, AllGather, ReduceScatter and AllToAll over contiguous buffers of a
// clique's ranks). The collective kernels arrange their operands into the contiguous pieces these
// calls take; a Communicator only moves and combines bytes. InProcessCommunicator does it across the
// simulated devices of one process; a cross-process one (Gloo or MPI) implements the same calls.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "pjrt_sim/device.h"
#include "pjrt_sim/opcode.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

// One member's side of one collective. Every member of the group makes the call with the same
// run_id, kernel and group; calls that differ in any of them never meet, so concurrent executions (and
// the several groups of one collective) cannot mix.
struct CollectiveCall {
  uint64_t run_id = 0;             // one execution of an executable, on all its partitions
  int64_t kernel = 0;              // which kernel of that execution (its index in the schedule)
  std::span<const int64_t> group;  // the partitions taking part, in group order
  int64_t rank = 0;                // this member's position in `group`
  // Every partition's device, by partition: where each member's buffers live, and whom to name.
  std::span<Device* const> devices;
  std::string what;  // the collective, for errors and the trace: "all_reduce 'all_reduce(dot)' (kernel 3)"

  // The calling member's device.
  Device* own_device() const { return devices[static_cast<size_t>(group[static_cast<size_t>(rank)])]; }
};

// acc[i] = combine(acc[i], value[i]) for i < count, in the element type's own storage (bf16 and f16
// are combined in f32 and rounded back, as a kernel storing each partial result would). Every
// Communicator combines members' pieces with it, in member order, so that all compute the same bits.
void CombineInto(PrimitiveType type, Combiner combiner, void* acc, const void* value, int64_t count);

// Buffers are device memory of the calling member's device; a call's send and recv never overlap,
// and both stay valid until the call returns (peers read them meanwhile).
class Communicator {
 public:
  virtual ~Communicator() = default;

  // recv (count elements) = the members' sends (count elements each) combined element by element, in
  // member order (so that every member computes the same bits).
  virtual absl::Status AllReduce(const CollectiveCall& call, PrimitiveType type, Combiner combiner, int64_t count,
                                 const void* send, void* recv) = 0;
  // recv (group size * count elements) = member r's send (count elements) at element r * count.
  virtual absl::Status AllGather(const CollectiveCall& call, PrimitiveType type, int64_t count, const void* send,
                                 void* recv) = 0;
  // send: group size pieces of count elements. recv (count elements) = piece `rank` of the members'
  // sends, combined element by element in member order.
  virtual absl::Status ReduceScatter(const CollectiveCall& call, PrimitiveType type, Combiner combiner, int64_t count,
                                     const void* send, void* recv) = 0;
  // send: group size pieces of count elements, piece j for member j. recv: group size pieces of count
  // elements, piece j from member j.
  virtual absl::Status AllToAll(const CollectiveCall& call, PrimitiveType type, int64_t count, const void* send,
                                void* recv) = 0;

  // One partition of execution `run_id` failed with `why` and will reach no further collective: every
  // member of that execution waiting, or arriving later, fails at once with `why` instead of waiting
  // out the timeout.
  virtual void AbortExecution(uint64_t run_id, const absl::Status& why) = 0;
};

// Across the simulated devices of this process. Members rendezvous (each partition calls from its own
// device's stream thread); then each copies what it needs from the other members' device memory into
// its own device's memory (temporary receive buffers allocated from, and counted on, the receiving
// device: MemoryStats::collective_bytes_received), computes its result, and waits until every member
// has finished reading before returning, so that no send buffer is overwritten while a peer reads it.
// Waits are bounded by the timeout; when it expires the error names the partitions (and devices) that
// did not arrive and the collective the caller was at. (A member that gives up returns while a peer
// may, in principle, still be copying from its buffers; no copy takes anywhere near a timeout.)
class InProcessCommunicator final : public Communicator {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{60'000};
  explicit InProcessCommunicator(std::chrono::milliseconds timeout = kDefaultTimeout) : timeout_(timeout) {}
  // The one every partitioned execution uses unless given another.
  static InProcessCommunicator& Default();

  void set_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const;

  absl::Status AllReduce(const CollectiveCall& call, PrimitiveType type, Combiner combiner, int64_t count,
                         const void* send, void* recv) override;
  absl::Status AllGather(const CollectiveCall& call, PrimitiveType type, int64_t count, const void* send,
                         void* recv) override;
  absl::Status ReduceScatter(const CollectiveCall& call, PrimitiveType type, Combiner combiner, int64_t count,
                             const void* send, void* recv) override;
  absl::Status AllToAll(const CollectiveCall& call, PrimitiveType type, int64_t count, const void* send,
                        void* recv) override;
  void AbortExecution(uint64_t run_id, const absl::Status& why) override;

  // Rendezvous in progress (members arrived and not all gone): 0 once every collective has completed.
  int64_t pending_rendezvous() const;

 private:
  struct Rendezvous;
  // Every member's buffers, by rank.
  struct Buffers {
    std::vector<const void*> sends;
    std::vector<void*> recvs;
  };
  // Once all members have arrived, each runs the phases in order, and no member starts phase k + 1 (or
  // returns) before every member has finished phase k: a phase may read any member's buffers as the
  // previous phases left them.
  using Phase = std::function<absl::Status(const Buffers& all)>;
  absl::Status Meet(const CollectiveCall& call, const void* send, void* recv, std::span<const Phase> phases);

  mutable std::mutex mu_;
  std::condition_variable changed_;  // a member arrived or finished, or an execution was aborted
  std::chrono::milliseconds timeout_;
  // By (run, kernel, first partition of the group).
  std::map<std::tuple<uint64_t, int64_t, int64_t>, std::shared_ptr<Rendezvous>> rendezvous_;
  std::map<uint64_t, absl::Status> aborted_;  // by run
  // Where each partition of the newest executions last was: the collective it last arrived at, by run
  // and partition (a timeout names where the missing ones are).
  static constexpr size_t kRunsRemembered = 256;
  std::map<uint64_t, std::map<int64_t, std::string>> last_seen_;
};

}  // namespace lazyrt::pjrt
