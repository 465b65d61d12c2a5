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

void CombineInto(PrimitiveType type, Combiner combiner, void* acc, const void* value, int64_t count) {
  if (Is16BitFloat(type)) {
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

namespace {

// Copies `bytes` of a peer's memory into this member's device memory, counting them there.
void Receive(const CollectiveCall& call, void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  std::memcpy(dst, src, static_cast<size_t>(bytes));
  call.own_device()->RecordReceived(bytes);
}

// dst (count elements) = the members' pieces (each `count` elements at `offset` bytes into their send)
// combined in member order, peers' pieces received into a buffer on this member's device first.
absl::Status CombinePieces(const CollectiveCall& call, PrimitiveType type, Combiner combiner, int64_t count,
                           int64_t offset, std::span<const void* const> sends, void* dst) {
  const int64_t bytes = count * ByteWidth(type);
  ASSIGN_OR_RETURN(DeviceMemory received, call.own_device()->Allocate(bytes));
  for (size_t r = 0; r < sends.size(); ++r) {
    const void* piece = static_cast<const char*>(sends[r]) + offset;
    if (static_cast<int64_t>(r) != call.rank) {
      Receive(call, received.data(), piece, bytes);
      piece = received.data();
    }
    if (r == 0) {
      if (bytes > 0) std::memcpy(dst, piece, static_cast<size_t>(bytes));
    } else {
      CombineInto(type, combiner, dst, piece, count);
    }
  }
  return absl::OkStatus();
}

// The first element of member r's share when `count` elements are split over `members`.
int64_t ShareStart(int64_t count, int64_t members, int64_t r) {
  return count / members * r + std::min(r, count % members);
}

}  // namespace

struct InProcessCommunicator::Rendezvous {
  explicit Rendezvous(size_t members) : arrived(members, false), phases_done(members, 0) {
    buffers.sends.resize(members, nullptr);
    buffers.recvs.resize(members, nullptr);
  }
  Buffers buffers;
  std::vector<bool> arrived;
  std::vector<int64_t> phases_done;  // by rank
  int64_t num_arrived = 0, num_left = 0;
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

absl::Status InProcessCommunicator::Meet(const CollectiveCall& call, const void* send, void* recv,
                                         std::span<const Phase> phases) {
  const size_t members = call.group.size();
  if (members == 0 || call.rank < 0 || call.rank >= static_cast<int64_t>(members)) {
    return absl::InvalidArgumentError(absl::StrCat(call.what, ": rank ", call.rank, " of a group of ", members));
  }
  for (int64_t p : call.group) {
    if (p < 0 || p >= static_cast<int64_t>(call.devices.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(call.what, ": partition ", p, " has no device (", call.devices.size(), " given)"));
    }
  }
  const auto key = std::make_tuple(call.run_id, call.kernel, call.group[0]);
  const size_t me = static_cast<size_t>(call.rank);
  std::unique_lock<std::mutex> lock(mu_);
  if (auto it = aborted_.find(call.run_id); it != aborted_.end()) return it->second;
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  const double timeout_s = std::chrono::duration<double>(timeout_).count();
  std::shared_ptr<Rendezvous>& slot = rendezvous_[key];
  if (slot == nullptr) slot = std::make_shared<Rendezvous>(members);
  const std::shared_ptr<Rendezvous> rv = slot;
  if (rv->arrived[me]) {
    return absl::InternalError(
        absl::StrCat(call.what, ": partition ", call.group[me], " arrived twice in execution ", call.run_id));
  }
  last_seen_[call.run_id][call.group[me]] = call.what;
  if (last_seen_.size() > kRunsRemembered) last_seen_.erase(last_seen_.begin());
  rv->arrived[me] = true;
  rv->buffers.sends[me] = send;
  rv->buffers.recvs[me] = recv;
  ++rv->num_arrived;
  changed_.notify_all();

  // Waits until every member is `there`, the deadline passes or the execution is aborted. On expiry it
  // aborts the execution (its other partitions cannot complete it either) naming who is missing.
  auto wait = [&](const std::function<bool(size_t rank)>& there, const std::string& missing_what) -> absl::Status {
    auto all_there = [&] {
      for (size_t r = 0; r < members; ++r) {
        if (!there(r)) return false;
      }
      return true;
    };
    const bool ready =
        changed_.wait_until(lock, deadline, [&] { return all_there() || aborted_.contains(call.run_id); });
    if (auto it = aborted_.find(call.run_id); it != aborted_.end()) return it->second;
    if (ready) return absl::OkStatus();
    std::vector<std::string> missing, present;
    for (size_t r = 0; r < members; ++r) {
      const int64_t p = call.group[r];
      std::string who = absl::StrCat(p, " (", call.devices[static_cast<size_t>(p)]->DebugString());
      if (!there(r)) {
        const std::map<int64_t, std::string>& seen = last_seen_[call.run_id];
        const auto at = seen.find(p);
        absl::StrAppend(&who, at == seen.end() ? ", at no collective of this execution yet"
                                               : absl::StrCat(", last at ", at->second));
      }
      (there(r) ? present : missing).push_back(absl::StrCat(who, ")"));
    }
    absl::Status status = absl::DeadlineExceededError(absl::StrFormat(
        "%s of execution %d: partition(s) %s of replica group {%s} %s within %.3g s; partition %d on %s waited "
        "(present: %s)",
        call.what, call.run_id, absl::StrJoin(missing, ", "), absl::StrJoin(call.group, ","), missing_what, timeout_s,
        call.group[me], call.own_device()->DebugString(), absl::StrJoin(present, ", ")));
    aborted_.emplace(call.run_id, status);
    changed_.notify_all();
    return status;
  };

  const auto arrived_at = std::chrono::steady_clock::now();
  absl::Status status = wait([&](size_t r) { return rv->arrived[r]; }, "did not arrive");
  call.own_device()->RecordCollectiveWait(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - arrived_at).count());
  for (size_t k = 0; status.ok() && k < phases.size(); ++k) {
    const Buffers buffers = rv->buffers;
    lock.unlock();
    status = phases[k](buffers);
    lock.lock();
    // Peers may read this member's buffers until they finish the phase too: wait for them even after
    // a failure, which aborts the execution first so that no peer goes on to a phase reading results
    // this member did not compute.
    if (!status.ok()) aborted_.emplace(call.run_id, status);
    rv->phases_done[me] = static_cast<int64_t>(k + 1);
    changed_.notify_all();
    const absl::Status finished =
        wait([&](size_t r) { return rv->phases_done[r] > static_cast<int64_t>(k); },
             phases.size() == 1 ? "did not finish" : absl::StrCat("did not finish phase ", k + 1));
    if (status.ok()) status = finished;
  }
  // The last member to leave removes the rendezvous.
  if (++rv->num_left == rv->num_arrived &&
      (rv->num_arrived == static_cast<int64_t>(members) || aborted_.contains(call.run_id))) {
    rendezvous_.erase(key);
  }
  return status;
}

// ALL_REDUCE as a reduce-scatter then an all-gather, as ring and tree all-reduces do: member r combines
// share r of everyone's sends (in member order) into its own recv, then copies the other shares from
// their owners' recvs. Each member receives 2 (G-1)/G of the array, not G-1 arrays, and every member
// holds the same bits.
absl::Status InProcessCommunicator::AllReduce(const CollectiveCall& call, PrimitiveType type, Combiner combiner,
                                              int64_t count, const void* send, void* recv) {
  const int64_t members = static_cast<int64_t>(call.group.size());
  const int64_t width = ByteWidth(type);
  auto share = [&](int64_t r) {
    return std::make_pair(ShareStart(count, members, r), ShareStart(count, members, r + 1));
  };
  const Phase phases[] = {[&](const Buffers& all) {
                            const auto [begin, end] = share(call.rank);
                            return CombinePieces(call, type, combiner, end - begin, begin * width, all.sends,
                                                 static_cast<char*>(recv) + begin * width);
                          },
                          [&](const Buffers& all) {
                            for (int64_t r = 0; r < members; ++r) {
                              if (r == call.rank) continue;
                              const auto [begin, end] = share(r);
                              Receive(call, static_cast<char*>(recv) + begin * width,
                                      static_cast<const char*>(all.recvs[static_cast<size_t>(r)]) + begin * width,
                                      (end - begin) * width);
                            }
                            return absl::OkStatus();
                          }};
  return Meet(call, send, recv, phases);
}

absl::Status InProcessCommunicator::ReduceScatter(const CollectiveCall& call, PrimitiveType type, Combiner combiner,
                                                  int64_t count, const void* send, void* recv) {
  const Phase phases[] = {[&](const Buffers& all) {
    return CombinePieces(call, type, combiner, count, call.rank * count * ByteWidth(type), all.sends, recv);
  }};
  return Meet(call, send, recv, phases);
}

absl::Status InProcessCommunicator::AllGather(const CollectiveCall& call, PrimitiveType type, int64_t count,
                                              const void* send, void* recv) {
  const Phase phases[] = {[&](const Buffers& all) {
    const int64_t bytes = count * ByteWidth(type);
    for (size_t r = 0; r < all.sends.size(); ++r) {
      void* dst = static_cast<char*>(recv) + static_cast<int64_t>(r) * bytes;
      if (static_cast<int64_t>(r) == call.rank) {
        if (bytes > 0) std::memcpy(dst, all.sends[r], static_cast<size_t>(bytes));
      } else {
        Receive(call, dst, all.sends[r], bytes);
      }
    }
    return absl::OkStatus();
  }};
  return Meet(call, send, recv, phases);
}

absl::Status InProcessCommunicator::AllToAll(const CollectiveCall& call, PrimitiveType type, int64_t count,
                                             const void* send, void* recv) {
  const Phase phases[] = {[&](const Buffers& all) {
    const int64_t bytes = count * ByteWidth(type);
    for (size_t j = 0; j < all.sends.size(); ++j) {
      void* dst = static_cast<char*>(recv) + static_cast<int64_t>(j) * bytes;
      const void* src = static_cast<const char*>(all.sends[j]) + call.rank * bytes;
      if (static_cast<int64_t>(j) == call.rank) {
        if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
      } else {
        Receive(call, dst, src, bytes);
      }
    }
    return absl::OkStatus();
  }};
  return Meet(call, send, recv, phases);
}

}  // namespace lazyrt::pjrt
