// GlooCommunicator: members (threads, each with a communicator of its own, as processes would have)
// meet through a shared Gloo HashStore over TCP; results match reference loops and the bits of
// InProcessCommunicator, and a member that never arrives fails the others within the timeout with
// the collective, the group and the failure note in the error.
#include "pjrt_sim/gloo_communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "gloo/rendezvous/hash_store.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace gloo_communicator_test {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

class GlooCommunicatorTest : public ::testing::Test {
 protected:
  static constexpr int kMembers = 3;
  GlooCommunicatorTest() {
    absl::StatusOr<std::unique_ptr<Client>> c =
        Client::Create({.num_devices = kMembers, .device_memory_bytes = int64_t{1} << 28});
    EXPECT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }

  // One communicator per member, all on one store: what kMembers processes would have.
  std::vector<std::unique_ptr<GlooCommunicator>> Communicators(std::chrono::milliseconds timeout) {
    std::vector<std::unique_ptr<GlooCommunicator>> comms;
    for (int r = 0; r < kMembers; ++r)
      comms.push_back(std::make_unique<GlooCommunicator>(store_, "127.0.0.1", timeout));
    return comms;
  }
  CollectiveCall Call(int rank, const char* what = "all_reduce 'test' (kernel 0)") const {
    return CollectiveCall{1, 0, group_, rank, client_->devices(), what};
  }
  DeviceMemory Floats(int r, int64_t n, const std::function<float(int64_t)>& fill) {
    absl::StatusOr<DeviceMemory> m = client_->device(r)->Allocate(n * 4);
    EXPECT_TRUE(m.ok()) << m.status();
    for (int64_t i = 0; i < n; ++i) static_cast<float*>(m->data())[i] = fill(i);
    return *std::move(m);
  }
  static std::vector<absl::Status> OnThreads(int members, const std::function<absl::Status(int)>& fn) {
    std::vector<absl::Status> status(static_cast<size_t>(members));
    std::vector<std::thread> threads;
    for (int r = 0; r < members; ++r) threads.emplace_back([&, r] { status[static_cast<size_t>(r)] = fn(r); });
    for (std::thread& t : threads) t.join();
    return status;
  }

  std::unique_ptr<Client> client_;
  std::shared_ptr<::gloo::rendezvous::Store> store_ = std::make_shared<::gloo::rendezvous::HashStore>();
  std::vector<int64_t> group_ = {0, 1, 2};
};

// Values whose sum depends on the order of addition in float, so that a different order shows.
float Value(int r, int64_t i) {
  return static_cast<float>((r + 1) * 1e7) * (i % 2 == 0 ? 1.0f : -1.0f) + 0.1f * static_cast<float>(i + r);
}

TEST_F(GlooCommunicatorTest, AllReduceSumsInMemberOrderWithInProcessBits) {
  constexpr int64_t kCount = 1001;  // not a multiple of the group: shares are padded
  auto comms = Communicators(std::chrono::seconds(20));
  std::vector<DeviceMemory> send, recv, local_recv;
  for (int r = 0; r < kMembers; ++r) {
    send.push_back(Floats(r, kCount, [r](int64_t i) { return Value(r, i); }));
    recv.push_back(Floats(r, kCount, [](int64_t) { return -1.0f; }));
    local_recv.push_back(Floats(r, kCount, [](int64_t) { return -1.0f; }));
  }
  auto statuses = OnThreads(kMembers, [&](int r) {
    return comms[static_cast<size_t>(r)]->AllReduce(Call(r), PrimitiveType::kF32, Combiner::kSum, kCount,
                                                    send[static_cast<size_t>(r)].data(),
                                                    recv[static_cast<size_t>(r)].data());
  });
  for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  InProcessCommunicator in_process;
  statuses = OnThreads(kMembers, [&](int r) {
    return in_process.AllReduce(Call(r), PrimitiveType::kF32, Combiner::kSum, kCount,
                                send[static_cast<size_t>(r)].data(), local_recv[static_cast<size_t>(r)].data());
  });
  for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < kMembers; ++r) {
    const auto* got = static_cast<const float*>(recv[static_cast<size_t>(r)].data());
    const auto* in_process_got = static_cast<const float*>(local_recv[static_cast<size_t>(r)].data());
    for (int64_t i = 0; i < kCount; ++i) {
      const float expected = (Value(0, i) + Value(1, i)) + Value(2, i);
      ASSERT_EQ(got[i], expected) << "member " << r << " element " << i;
      ASSERT_EQ(std::memcmp(&got[i], &in_process_got[i], 4), 0) << "member " << r << " element " << i;
    }
  }
}

TEST_F(GlooCommunicatorTest, ReduceScatterAllGatherAndAllToAllMoveTheRightPieces) {
  constexpr int64_t kCount = 50;
  auto comms = Communicators(std::chrono::seconds(20));
  std::vector<DeviceMemory> big, scattered, gathered, exchanged;
  for (int r = 0; r < kMembers; ++r) {
    big.push_back(Floats(r, kMembers * kCount, [r](int64_t i) { return Value(r, i); }));
    scattered.push_back(Floats(r, kCount, [](int64_t) { return -1.0f; }));
    gathered.push_back(Floats(r, kMembers * kCount, [](int64_t) { return -1.0f; }));
    exchanged.push_back(Floats(r, kMembers * kCount, [](int64_t) { return -1.0f; }));
  }
  const auto statuses = OnThreads(kMembers, [&](int r) -> absl::Status {
    GlooCommunicator& c = *comms[static_cast<size_t>(r)];
    const size_t m = static_cast<size_t>(r);
    absl::Status s =
        c.ReduceScatter(Call(r), PrimitiveType::kF32, Combiner::kMax, kCount, big[m].data(), scattered[m].data());
    if (s.ok()) s = c.AllGather(Call(r), PrimitiveType::kF32, kCount, big[m].data(), gathered[m].data());
    if (s.ok()) s = c.AllToAll(Call(r), PrimitiveType::kF32, kCount, big[m].data(), exchanged[m].data());
    return s;
  });
  for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < kMembers; ++r) {
    const size_t m = static_cast<size_t>(r);
    for (int64_t i = 0; i < kCount; ++i) {
      const int64_t g = r * kCount + i;  // this member's piece of every send
      EXPECT_EQ(static_cast<const float*>(scattered[m].data())[i], std::max({Value(0, g), Value(1, g), Value(2, g)}));
      for (int j = 0; j < kMembers; ++j) {
        EXPECT_EQ(static_cast<const float*>(gathered[m].data())[j * kCount + i], Value(j, i));
        EXPECT_EQ(static_cast<const float*>(exchanged[m].data())[j * kCount + i], Value(j, g));
      }
    }
  }
}

TEST_F(GlooCommunicatorTest, AMemberThatNeverArrivesFailsTheOthersWithinTheTimeout) {
  constexpr int64_t kCount = 16;
  auto comms = Communicators(std::chrono::milliseconds(1500));
  for (auto& c : comms) c->set_failure_note([] { return "rank 2 stopped at step 7"; });
  std::vector<DeviceMemory> send, recv;
  for (int r = 0; r < kMembers; ++r) {
    send.push_back(Floats(r, kCount, [](int64_t) { return 1.0f; }));
    recv.push_back(Floats(r, kCount, [](int64_t) { return 0.0f; }));
  }
  const Clock::time_point start = Clock::now();
  const auto statuses = OnThreads(kMembers - 1, [&](int r) {
    return comms[static_cast<size_t>(r)]->AllReduce(Call(r, "all_reduce 'grad' (kernel 9)"), PrimitiveType::kF32,
                                                    Combiner::kSum, kCount, send[static_cast<size_t>(r)].data(),
                                                    recv[static_cast<size_t>(r)].data());
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  for (const absl::Status& s : statuses) {
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("all_reduce 'grad' (kernel 9)"));
    EXPECT_THAT(s.message(), HasSubstr("replica group {0,1,2}"));
    EXPECT_THAT(s.message(), HasSubstr("rank 2 stopped at step 7"));
  }
}

}  // namespace gloo_communicator_test
}  // namespace lazyrt::pjrt
