// Collectives across processes on Gloo (the engine of torch.distributed on CPU and of JAX's CPU client):
// the Communicator of a global mesh whose partitions live in several processes. Each process runs some
// partitions (its local devices); every partition is one Gloo rank, its global partition id. Members of
// a replica group meet in a Gloo context of that group, made on first use by a full-mesh rendezvous
// through the shared store (Gloo's FileStore, HashStore, ...).
//
// Reductions never run inside Gloo: members exchange pieces (alltoall, allgather) and each combines
// them in member order with CombineInto, as InProcessCommunicator does, so N processes compute the same
// bits as N simulated devices of one process.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "pjrt_sim/communicator.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}  // namespace rendezvous
namespace transport {
class Device;
}  // namespace transport
}  // namespace gloo

namespace lazyrt::pjrt {

class GlooCommunicator final : public Communicator {
 public:
  // `store` is shared by every process of the job (and outlives this); `hostname` is the address peers
  // reach this process at (empty: this host's name). Every wait, rendezvous included, is bounded by
  // `timeout`.
  GlooCommunicator(std::shared_ptr<::gloo::rendezvous::Store> store, std::string hostname,
                   std::chrono::milliseconds timeout);
  ~GlooCommunicator() override;

  absl::Status AllReduce(const CollectiveCall& call, PrimitiveType type, Combiner combiner, int64_t count,
                         const void* send, void* recv) override;
  absl::Status AllGather(const CollectiveCall& call, PrimitiveType type, int64_t count, const void* send,
                         void* recv) override;
  absl::Status ReduceScatter(const CollectiveCall& call, PrimitiveType type, Combiner combiner, int64_t count,
                             const void* send, void* recv) override;
  absl::Status AllToAll(const CollectiveCall& call, PrimitiveType type, int64_t count, const void* send,
                        void* recv) override;
  // Local partitions of `run_id` fail at their next call; a call already waiting in Gloo ends at its
  // timeout or when the peer's connection closes.
  void AbortExecution(uint64_t run_id, const absl::Status& why) override;

  // Appended to every error: what the caller knows of the other ranks (which died or stopped, the
  // step), so that a failure names who is to blame and not only the connection that broke.
  void set_failure_note(std::function<std::string()> note);
  // What this process's members did so far, summed: for the collective share and a cost model.
  struct Stats {
    int64_t calls = 0;
    int64_t bytes_received = 0;        // from peers, over the transport
    std::chrono::nanoseconds time{0};  // in the calls, waits for peers included
  };
  Stats stats() const {
    return {calls_.load(), bytes_received_.load(), std::chrono::nanoseconds(collective_ns_.load())};
  }

 private:
  // The Gloo context of `call`'s group for this member, made on first use.
  absl::StatusOr<std::shared_ptr<::gloo::Context>> ContextFor(const CollectiveCall& call);
  // Runs `body` (Gloo calls that receive `bytes` from peers) as `call`, turning Gloo's exceptions into
  // a status that says where.
  absl::Status Run(const CollectiveCall& call, int64_t bytes,
                   const std::function<absl::Status(const std::shared_ptr<::gloo::Context>&)>& body);

  // AllGather and AllToAll: each member receives a piece of `count` elements from every other, moved by
  // `exchange` (AllGatherBytes or AllToAllBytes).
  using ExchangeBytes = void (*)(const std::shared_ptr<::gloo::Context>&, const void* send, void* recv, int64_t bytes,
                                 std::chrono::milliseconds timeout);
  absl::Status Exchange(const CollectiveCall& call, PrimitiveType type, int64_t count, const void* send, void* recv,
                        ExchangeBytes exchange);

  std::shared_ptr<::gloo::rendezvous::Store> store_;
  std::shared_ptr<::gloo::transport::Device> device_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  // By (member's partition, group): each partition's contexts are used by its own stream only.
  std::map<std::pair<int64_t, std::vector<int64_t>>, std::shared_ptr<::gloo::Context>> contexts_;
  std::map<uint64_t, absl::Status> aborted_;  // by run, the newest few
  std::function<std::string()> failure_note_;
  std::atomic<int64_t> collective_ns_{0}, calls_{0}, bytes_received_{0};
};

}  // namespace lazyrt::pjrt
