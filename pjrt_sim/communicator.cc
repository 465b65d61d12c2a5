#include "pjrt_sim/communicator.h"

#include <condition_variable>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "pjrt_sim/compute_type.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/status_macros.h"

namespace lazyrt::pjrt {
namespace {

// acc[i] = combine(acc[i], value[i]) for i < count, in the element type's own storage (bf16 and f16
// are combined in f32 and rounded back, as a kernel storing each partial result would).
void CombineInto(PrimitiveType type, Combiner combiner, void* acc, const void* value, int64_t count) {
  if (type == PrimitiveType::kBF16 || type == PrimitiveType::kF16) {
    const bool bf16 = type == PrimitiveType::kBF16;
    auto* a = static_cast<uint16_t*>(acc);
    const auto* v = static_cast<const uint16_t*>(value);
    for (int64_t i = 0; i < count; ++i) {
      const float x = bf16 ? Bf16ToFloat(a[i]) : HalfToFloat(a[i]);
      const float y = bf16 ? Bf16ToFloat(v[i]) : HalfToFloat(v[i]);
      const float r = Combine<float>(combiner, x, y);
      a[i] = bf16 ? FloatToBf16(r) : FloatToHalf(r);
    }
    return;
  }
  DispatchComputeType(type, [&]<typename T>() {
    auto* a = static_cast<T*>(acc);
    const auto* v = static_cast<const T*>(value);
    for (int64_t i = 0; i < count; ++i) a[i] = Combine<T>(combiner, a[i], v[i]);
  });
}

Device* OwnDevice(const CollectiveCall& call) {
  return call.devices[static_cast<size_t>(call.group[static_cast<size_t>(call.rank)])];
}

// Copies `bytes` of a peer's memory into this member's device memory, counting them there.
void Receive(const CollectiveCall& call, void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  std::memcpy(dst, src, static_cast<size_t>(bytes));
  OwnDevice(call)->RecordReceived(bytes);
}

// recv = the members' pieces (each `count` elements at `offset` bytes into their send) combined in
// member order, peers' pieces received into a buffer on this member's device first.
absl::Status CombinePieces(const CollectiveCall& call, PrimitiveType type, Combiner combiner, int64_t count,
                           int64_t offset, std::span<const void* const> sends, void* recv) {
  const int64_t bytes = count * ByteWidth(type);
  ASSIGN_OR_RETURN(DeviceMemory received, OwnDevice(call)->Allocate(bytes));
  for (size_t r = 0; r < sends.size(); ++r) {
    const void* piece = static_cast<const char*>(sends[r]) + offset;
    if (static_cast<int64_t>(r) != call.rank) {
      Receive(call, received.data(), piece, bytes);
      piece = received.data();
    }
    if (r == 0) {
      if (bytes > 0) std::memcpy(recv, piece, static_cast<size_t>(bytes));
    } else {
      CombineInto(type, combiner, recv, piece, count);
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct InProcessCommunicator::Rendezvous {
  explicit Rendezvous(size_t members) : sends(members, nullptr), arrived(members, false), done(members, false) {}
  std::vector<const void*> sends;
  std::vector<bool> arrived, done;
  int64_t num_arrived = 0, num_done = 0, num_left = 0;
};

InProcessCommunicator& InProcessCommunicator::Default() {
  static auto* communicator = new InProcessCommunicator();
  return *communicator;
}

void InProcessCommunicator::set_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  timeout_ = timeout;
}

std::chrono::milliseconds InProcessCommunicator::timeout() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timeout_;
}

int64_t InProcessCommunicator::pending_rendezvous() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(rendezvous_.size());
}

void InProcessCommunicator::AbortExecution(uint64_t run_id, const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_.emplace(run_id, why);  // the first reason stays
  }
  changed_.notify_all();
}

absl::Status InProcessCommunicator::Meet(const CollectiveCall& call, const void* send, const Exchange& exchange) {
  const size_t members = call.group.size();
  if (members == 0 || call.rank < 0 || call.rank >= static_cast<int64_t>(members)) {
    return absl::InvalidArgumentError(absl::StrCat(call.what, ": rank ", call.rank, " of a group of ", members));
  }
  const auto key = std::make_tuple(call.run_id, call.kernel, call.group[0]);
  const size_t me = static_cast<size_t>(call.rank);
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  const double timeout_s = std::chrono::duration<double>(timeout_).count();
  std::shared_ptr<Rendezvous>& slot = rendezvous_[key];
  if (slot == nullptr) slot = std::make_shared<Rendezvous>(members);
  const std::shared_ptr<Rendezvous> rv = slot;
  if (rv->arrived[me]) {
    return absl::InternalError(
        absl::StrCat(call.what, ": partition ", call.group[me], " arrived twice in execution ", call.run_id));
  }
  rv->arrived[me] = true;
  rv->sends[me] = send;
  ++rv->num_arrived;
  changed_.notify_all();

  // Leaves the rendezvous; the last member to leave removes it.
  auto leave = [&] {
    if (++rv->num_left == rv->num_arrived &&
        (rv->num_arrived == static_cast<int64_t>(members) || aborted_.contains(call.run_id))) {
      rendezvous_.erase(key);
    }
  };
  // Waits until `ready`, the deadline or an abort of this execution. On expiry it aborts the execution
  // (its other partitions cannot complete it either) with an error naming who is missing.
  auto wait = [&](const std::vector<bool>& flags, int64_t& count, const char* missing_what) -> absl::Status {
    const bool ready = changed_.wait_until(
        lock, deadline, [&] { return count == static_cast<int64_t>(members) || aborted_.contains(call.run_id); });
    if (auto it = aborted_.find(call.run_id); it != aborted_.end()) return it->second;
    if (ready) return absl::OkStatus();
    std::vector<std::string> missing, present;
    for (size_t r = 0; r < members; ++r) {
      const int64_t p = call.group[r];
      const Device* d =
          p >= 0 && p < static_cast<int64_t>(call.devices.size()) ? call.devices[static_cast<size_t>(p)] : nullptr;
      (flags[r] ? present : missing)
          .push_back(absl::StrCat(p, d != nullptr ? absl::StrCat(" (", d->DebugString(), ")") : ""));
    }
    absl::Status status = absl::DeadlineExceededError(absl::StrFormat(
        "%s of execution %d: partition(s) %s of replica group {%s} %s within %.3g s; partition %d on %s waited "
        "(present: %s)",
        call.what, call.run_id, absl::StrJoin(missing, ", "), absl::StrJoin(call.group, ","), missing_what, timeout_s,
        call.group[me], OwnDevice(call)->DebugString(), absl::StrJoin(present, ", ")));
    aborted_.emplace(call.run_id, status);
    changed_.notify_all();
    return status;
  };

  absl::Status status = wait(rv->arrived, rv->num_arrived, "did not arrive");
  if (status.ok()) {
    const std::vector<const void*> sends = rv->sends;
    lock.unlock();
    status = exchange(sends);
    lock.lock();
    // Even after a failed exchange, peers may still be reading this member's send: wait for them.
    rv->done[me] = true;
    ++rv->num_done;
    changed_.notify_all();
    if (absl::Status done = wait(rv->done, rv->num_done, "did not finish reading"); status.ok()) status = done;
  }
  leave();
  return status;
}

absl::Status InProcessCommunicator::AllReduce(const CollectiveCall& call, PrimitiveType type, Combiner combiner,
                                              int64_t count, const void* send, void* recv) {
  return Meet(call, send, [&](std::span<const void* const> sends) {
    return CombinePieces(call, type, combiner, count, 0, sends, recv);
  });
}

absl::Status InProcessCommunicator::ReduceScatter(const CollectiveCall& call, PrimitiveType type, Combiner combiner,
                                                  int64_t count, const void* send, void* recv) {
  return Meet(call, send, [&](std::span<const void* const> sends) {
    return CombinePieces(call, type, combiner, count, call.rank * count * ByteWidth(type), sends, recv);
  });
}

absl::Status InProcessCommunicator::AllGather(const CollectiveCall& call, PrimitiveType type, int64_t count,
                                              const void* send, void* recv) {
  return Meet(call, send, [&](std::span<const void* const> sends) {
    const int64_t bytes = count * ByteWidth(type);
    for (size_t r = 0; r < sends.size(); ++r) {
      void* dst = static_cast<char*>(recv) + static_cast<int64_t>(r) * bytes;
      if (static_cast<int64_t>(r) == call.rank) {
        if (bytes > 0) std::memcpy(dst, sends[r], static_cast<size_t>(bytes));
      } else {
        Receive(call, dst, sends[r], bytes);
      }
    }
    return absl::OkStatus();
  });
}

absl::Status InProcessCommunicator::AllToAll(const CollectiveCall& call, PrimitiveType type, int64_t count,
                                             const void* send, void* recv) {
  return Meet(call, send, [&](std::span<const void* const> sends) {
    const int64_t bytes = count * ByteWidth(type);
    for (size_t j = 0; j < sends.size(); ++j) {
      void* dst = static_cast<char*>(recv) + static_cast<int64_t>(j) * bytes;
      const void* src = static_cast<const char*>(sends[j]) + call.rank * bytes;
      if (static_cast<int64_t>(j) == call.rank) {
        if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
      } else {
        Receive(call, dst, src, bytes);
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace lazyrt::pjrt
