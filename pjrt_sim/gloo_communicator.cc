#include "pjrt_sim/gloo_communicator.h"

#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gloo/allgather.h"
#include "gloo/alltoall.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "pjrt_sim/device.h"
#include "pjrt_sim/status_macros.h"

namespace lazyrt::pjrt {
namespace {

using Clock = std::chrono::steady_clock;

// Gloo takes mutable pointers for what it only sends.
uint8_t* Bytes(const void* p) { return static_cast<uint8_t*>(const_cast<void*>(p)); }

// out (count elements) = the `members` pieces of `pieces` (count elements each, member order) combined.
void CombineInOrder(PrimitiveType type, Combiner combiner, int64_t count, int64_t members, const void* pieces,
                    void* out) {
  const int64_t bytes = count * ByteWidth(type);
  if (bytes > 0) std::memcpy(out, pieces, static_cast<size_t>(bytes));
  for (int64_t r = 1; r < members; ++r) {
    CombineInto(type, combiner, out, static_cast<const char*>(pieces) + r * bytes, count);
  }
}

// alltoall of `bytes` per member: piece j of `send` goes to member j; piece j of `recv` came from j.
void AllToAllBytes(const std::shared_ptr<::gloo::Context>& context, const void* send, void* recv, int64_t bytes,
                   std::chrono::milliseconds timeout) {
  const size_t total = static_cast<size_t>(bytes * context->size);
  ::gloo::AlltoallOptions opts(context);
  opts.setInput(Bytes(send), total);
  opts.setOutput(static_cast<uint8_t*>(recv), total);
  opts.setTimeout(timeout);
  ::gloo::alltoall(opts);
}

void AllGatherBytes(const std::shared_ptr<::gloo::Context>& context, const void* send, void* recv, int64_t bytes,
                    std::chrono::milliseconds timeout) {
  ::gloo::AllgatherOptions opts(context);
  opts.setInput(Bytes(send), static_cast<size_t>(bytes));
  opts.setOutput(static_cast<uint8_t*>(recv), static_cast<size_t>(bytes * context->size));
  opts.setTimeout(timeout);
  ::gloo::allgather(opts);
}

// A group of one, or nothing to move, needs no peer: the result is the member's own send. True when so
// (and the copy is made).
bool AloneOrEmpty(const CollectiveCall& call, int64_t bytes, const void* send, void* recv) {
  if (call.group.size() > 1 && bytes > 0) return false;
  if (bytes > 0) std::memcpy(recv, send, static_cast<size_t>(bytes));
  return true;
}

}  // namespace

GlooCommunicator::GlooCommunicator(std::shared_ptr<::gloo::rendezvous::Store> store, std::string hostname,
                                   std::chrono::milliseconds timeout)
    : store_(std::move(store)), timeout_(timeout) {
  ::gloo::transport::tcp::attr attr;
  attr.hostname = std::move(hostname);
  device_ = ::gloo::transport::tcp::CreateDevice(attr);
}

GlooCommunicator::~GlooCommunicator() = default;

void GlooCommunicator::set_failure_note(std::function<std::string()> note) {
  std::lock_guard<std::mutex> lock(mu_);
  failure_note_ = std::move(note);
}

void GlooCommunicator::AbortExecution(uint64_t run_id, const absl::Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_.emplace(run_id, why);
  constexpr size_t kRunsRemembered = 256;
  if (aborted_.size() > kRunsRemembered) aborted_.erase(aborted_.begin());
}

absl::StatusOr<std::shared_ptr<::gloo::Context>> GlooCommunicator::ContextFor(const CollectiveCall& call) {
  const int64_t partition = call.group[static_cast<size_t>(call.rank)];
  std::vector<int64_t> group(call.group.begin(), call.group.end());
  auto key = std::make_pair(partition, group);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = contexts_.find(key); it != contexts_.end()) return it->second;
  }
  // Outside the lock: the rendezvous waits for the group's other members, local ones included.
  auto context =
      std::make_shared<::gloo::rendezvous::Context>(static_cast<int>(call.rank), static_cast<int>(group.size()));
  context->setTimeout(timeout_);
  ::gloo::rendezvous::PrefixStore store(absl::StrCat("lazyrt/group/", absl::StrJoin(group, ",")), *store_);
  context->connectFullMesh(store, device_);
  std::lock_guard<std::mutex> lock(mu_);
  contexts_.emplace(std::move(key), context);
  return std::shared_ptr<::gloo::Context>(context);
}

absl::Status GlooCommunicator::Run(const CollectiveCall& call, int64_t bytes,
                                   const std::function<absl::Status(const std::shared_ptr<::gloo::Context>&)>& body) {
  const int64_t members = static_cast<int64_t>(call.group.size());
  if (members == 0 || call.rank < 0 || call.rank >= members) {
    return absl::InvalidArgumentError(absl::StrCat(call.what, ": rank ", call.rank, " of a group of ", members));
  }
  const int64_t partition = call.group[static_cast<size_t>(call.rank)];
  if (partition < 0 || partition >= static_cast<int64_t>(call.devices.size()) ||
      call.devices[static_cast<size_t>(partition)] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(call.what, ": partition ", partition, " has no device here"));
  }
  std::function<std::string()> note;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = aborted_.find(call.run_id); it != aborted_.end()) return it->second;
    note = failure_note_;
  }
  const Clock::time_point start = Clock::now();
  std::string error;
  try {
    ASSIGN_OR_RETURN(std::shared_ptr<::gloo::Context> context, ContextFor(call));
    absl::Status status = body(context);
    collective_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
    calls_.fetch_add(1);
    bytes_received_.fetch_add(bytes);
    call.own_device()->RecordReceived(bytes);
    return status;
  } catch (const ::gloo::IoException& e) {
    error = absl::StrCat("connection to a peer failed or timed out: ", e.what());
  } catch (const ::gloo::Exception& e) {
    error = absl::StrCat("gloo: ", e.what());
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double waited_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::string message = absl::StrCat(call.what, " of execution ", call.run_id, ": partition ", partition, " (rank ",
                                     call.rank, " of replica group {", absl::StrJoin(call.group, ","),
                                     "}) gave up after ", waited_s, " s (timeout ", timeout_.count(), " ms): ", error);
  if (note) absl::StrAppend(&message, "; ", note());
  return absl::UnavailableError(message);
}

// ALL_REDUCE as a reduce-scatter then an all-gather over equal shares (the array padded to a multiple
// of the group): each member receives 2 (G-1)/G of the array, and combines its share in member order.
absl::Status GlooCommunicator::AllReduce(const CollectiveCall& call, PrimitiveType type, Combiner combiner,
                                         int64_t count, const void* send, void* recv) {
  const int64_t members = static_cast<int64_t>(call.group.size());
  const int64_t width = ByteWidth(type);
  if (AloneOrEmpty(call, count * width, send, recv)) return absl::OkStatus();
  const int64_t share = (count + members - 1) / members;
  const int64_t share_bytes = share * width;
  return Run(call, 2 * (members - 1) * share_bytes,
             [&](const std::shared_ptr<::gloo::Context>& context) -> absl::Status {
               Device* device = call.own_device();
               ASSIGN_OR_RETURN(DeviceMemory padded, device->Allocate(share_bytes * members));
               ASSIGN_OR_RETURN(DeviceMemory pieces, device->Allocate(share_bytes * members));
               std::memset(padded.data(), 0, static_cast<size_t>(padded.size()));
               std::memcpy(padded.data(), send, static_cast<size_t>(count * width));
               AllToAllBytes(context, padded.data(), pieces.data(), share_bytes, timeout_);
               ASSIGN_OR_RETURN(DeviceMemory mine, device->Allocate(share_bytes));
               CombineInOrder(type, combiner, share, members, pieces.data(), mine.data());
               AllGatherBytes(context, mine.data(), padded.data(), share_bytes, timeout_);
               std::memcpy(recv, padded.data(), static_cast<size_t>(count * width));
               return absl::OkStatus();
             });
}

absl::Status GlooCommunicator::ReduceScatter(const CollectiveCall& call, PrimitiveType type, Combiner combiner,
                                             int64_t count, const void* send, void* recv) {
  const int64_t members = static_cast<int64_t>(call.group.size());
  const int64_t bytes = count * ByteWidth(type);
  if (AloneOrEmpty(call, bytes, send, recv)) return absl::OkStatus();
  return Run(call, (members - 1) * bytes, [&](const std::shared_ptr<::gloo::Context>& context) -> absl::Status {
    Device* device = call.own_device();
    ASSIGN_OR_RETURN(DeviceMemory pieces, device->Allocate(bytes * members));
    AllToAllBytes(context, send, pieces.data(), bytes, timeout_);
    CombineInOrder(type, combiner, count, members, pieces.data(), recv);
    return absl::OkStatus();
  });
}

absl::Status GlooCommunicator::AllGather(const CollectiveCall& call, PrimitiveType type, int64_t count,
                                         const void* send, void* recv) {
  return Exchange(call, type, count, send, recv, &AllGatherBytes);
}

absl::Status GlooCommunicator::AllToAll(const CollectiveCall& call, PrimitiveType type, int64_t count, const void* send,
                                        void* recv) {
  return Exchange(call, type, count, send, recv, &AllToAllBytes);
}

absl::Status GlooCommunicator::Exchange(const CollectiveCall& call, PrimitiveType type, int64_t count, const void* send,
                                        void* recv, ExchangeBytes exchange) {
  const int64_t members = static_cast<int64_t>(call.group.size());
  const int64_t bytes = count * ByteWidth(type);
  if (AloneOrEmpty(call, bytes, send, recv)) return absl::OkStatus();
  return Run(call, (members - 1) * bytes, [&](const std::shared_ptr<::gloo::Context>& context) -> absl::Status {
    exchange(context, send, recv, bytes, timeout_);
    return absl::OkStatus();
  });
}

}  // namespace lazyrt::pjrt
