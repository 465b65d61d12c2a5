// InProcessCommunicator: bytes really move between the devices' memories (and are counted there),
// concurrent collectives never mix, and every wait is bounded and names who did not arrive.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "pjrt_sim/collective_trace.h"
#include "pjrt_sim/communicator.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace communicator_test {

using ::testing::HasSubstr;
using testing::HostArray;
using testing::ModuleBuilder;
using Clock = std::chrono::steady_clock;

std::unique_ptr<Client> MakeClient(int devices) {
  absl::StatusOr<std::unique_ptr<Client>> c =
      Client::Create({.num_devices = devices, .device_memory_bytes = int64_t{1} << 28});
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// Runs fn(rank) on one thread per member and returns each member's status.
std::vector<absl::Status> OnThreads(int members, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> status(static_cast<size_t>(members));
  std::vector<std::thread> threads;
  for (int r = 0; r < members; ++r) threads.emplace_back([&, r] { status[static_cast<size_t>(r)] = fn(r); });
  for (std::thread& t : threads) t.join();
  return status;
}

class InProcessCommunicatorTest : public ::testing::Test {
 protected:
  static constexpr int kMembers = 4;
  std::unique_ptr<Client> client_ = MakeClient(kMembers);
  std::vector<int64_t> group_ = {0, 1, 2, 3};

  CollectiveCall Call(int rank, uint64_t run = 1, int64_t kernel = 0) const {
    return CollectiveCall{run, kernel, group_, rank, client_->devices(), "all_reduce 'test' (kernel 0)"};
  }
  // Device memory of `n` floats on member r's device, filled with fill(i).
  DeviceMemory Floats(int r, int64_t n, const std::function<float(int64_t)>& fill) {
    absl::StatusOr<DeviceMemory> m = client_->device(r)->Allocate(n * 4);
    EXPECT_TRUE(m.ok()) << m.status();
    for (int64_t i = 0; i < n; ++i) static_cast<float*>(m->data())[i] = fill(i);
    return *std::move(m);
  }
};

TEST_F(InProcessCommunicatorTest, AllGatherCopiesBetweenDevicesAndCountsTheReceivedBytes) {
  InProcessCommunicator comm;
  constexpr int64_t kCount = 1000;
  std::vector<DeviceMemory> send, recv;
  std::vector<MemoryStats> before;
  for (int r = 0; r < kMembers; ++r) {
    send.push_back(Floats(r, kCount, [r](int64_t i) { return static_cast<float>(r * 10000 + i); }));
    recv.push_back(Floats(r, kMembers * kCount, [](int64_t) { return -1.0f; }));
    before.push_back(client_->device(r)->memory_stats());
  }
  const std::vector<absl::Status> status = OnThreads(kMembers, [&](int r) {
    return comm.AllGather(Call(r), PrimitiveType::kF32, kCount, send[static_cast<size_t>(r)].data(),
                          recv[static_cast<size_t>(r)].data());
  });
  for (int r = 0; r < kMembers; ++r) {
    ASSERT_TRUE(status[static_cast<size_t>(r)].ok()) << status[static_cast<size_t>(r)];
    const auto* got = static_cast<const float*>(recv[static_cast<size_t>(r)].data());
    for (int64_t i = 0; i < kMembers * kCount; ++i) {
      ASSERT_EQ(got[i], static_cast<float>((i / kCount) * 10000 + i % kCount)) << "member " << r << " at " << i;
    }
    const MemoryStats after = client_->device(r)->memory_stats();
    // Three peers' 4000 bytes each, copied into this device's memory.
    EXPECT_EQ(after.collective_bytes_received - before[static_cast<size_t>(r)].collective_bytes_received,
              (kMembers - 1) * kCount * 4);
  }
  EXPECT_EQ(comm.pending_rendezvous(), 0);
}

TEST_F(InProcessCommunicatorTest, AllReduceReceivesIntoMemoryAllocatedOnTheReceivingDevice) {
  InProcessCommunicator comm;
  constexpr int64_t kCount = 4096;
  std::vector<DeviceMemory> send, recv;
  std::vector<MemoryStats> before;
  for (int r = 0; r < kMembers; ++r) {
    send.push_back(Floats(r, kCount, [r](int64_t i) { return static_cast<float>(r + i); }));
    recv.push_back(Floats(r, kCount, [](int64_t) { return 0.0f; }));
    before.push_back(client_->device(r)->memory_stats());
  }
  const std::vector<absl::Status> status = OnThreads(kMembers, [&](int r) {
    return comm.AllReduce(Call(r), PrimitiveType::kF32, Combiner::kSum, kCount, send[static_cast<size_t>(r)].data(),
                          recv[static_cast<size_t>(r)].data());
  });
  for (int r = 0; r < kMembers; ++r) {
    ASSERT_TRUE(status[static_cast<size_t>(r)].ok()) << status[static_cast<size_t>(r)];
    const auto* got = static_cast<const float*>(recv[static_cast<size_t>(r)].data());
    for (int64_t i = 0; i < kCount; ++i) ASSERT_EQ(got[i], static_cast<float>(6 + 4 * i)) << "member " << r;
    const MemoryStats after = client_->device(r)->memory_stats();
    const MemoryStats& was = before[static_cast<size_t>(r)];
    // A reduce-scatter then an all-gather: three peers' quarters of the array to combine, then the
    // three quarters they combined.
    EXPECT_EQ(after.collective_bytes_received - was.collective_bytes_received, 2 * 3 * (kCount / 4) * 4);
    // The receive buffer was the device's: one more allocation, at least its size at the peak, and
    // given back.
    EXPECT_EQ(after.num_allocs, was.num_allocs + 1);
    EXPECT_GE(after.peak_bytes_in_use, was.bytes_in_use + kCount / 4 * 4);
    EXPECT_EQ(after.bytes_in_use, was.bytes_in_use);
  }
}

// Two executions of the same collective at once (same kernel and group, different runs) each combine
// their own members' data.
TEST_F(InProcessCommunicatorTest, ConcurrentRunsNeverMix) {
  InProcessCommunicator comm;
  constexpr int kRounds = 50;
  const std::vector<absl::Status> status = OnThreads(2 * kMembers, [&](int t) -> absl::Status {
    const int rank = t % kMembers;
    const uint64_t run_base = t < kMembers ? 1000 : 2000;
    const float scale = t < kMembers ? 1.0f : 100.0f;
    for (int round = 0; round < kRounds; ++round) {
      float send = scale * static_cast<float>(rank + round), recv = 0;
      const CollectiveCall call = Call(rank, run_base + static_cast<uint64_t>(round));
      RETURN_IF_ERROR(comm.AllReduce(call, PrimitiveType::kF32, Combiner::kSum, 1, &send, &recv));
      if (recv != scale * static_cast<float>(6 + 4 * round)) {
        return absl::InternalError(absl::StrCat("round ", round, " member ", t, " got ", recv));
      }
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : status) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(comm.pending_rendezvous(), 0);
}

TEST_F(InProcessCommunicatorTest, AMemberThatNeverArrivesIsNamedWithinTheTimeout) {
  InProcessCommunicator comm(std::chrono::milliseconds(200));
  const Clock::time_point start = Clock::now();
  const std::vector<absl::Status> status = OnThreads(kMembers - 1, [&](int r) {
    float send = 1, recv = 0;
    return comm.AllReduce(Call(r), PrimitiveType::kF32, Combiner::kSum, 1, &send, &recv);
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  for (const absl::Status& s : status) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("all_reduce 'test' (kernel 0)"));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("partition(s) 3 (SIM:3, at no collective of this execution yet) of replica group "
                          "{0,1,2,3} did not arrive"));
  }
  EXPECT_EQ(comm.pending_rendezvous(), 0);
  // The late member finds the execution given up instead of waiting again.
  float send = 1, recv = 0;
  const Clock::time_point late = Clock::now();
  EXPECT_TRUE(absl::IsDeadlineExceeded(comm.AllReduce(Call(3), PrimitiveType::kF32, Combiner::kSum, 1, &send, &recv)));
  EXPECT_LT(Clock::now() - late, std::chrono::milliseconds(150));
}

// The error says where a missing member last was: here partition 3 went on to another collective.
TEST_F(InProcessCommunicatorTest, ATimeoutSaysWhereTheMissingMemberLastWas) {
  InProcessCommunicator comm(std::chrono::milliseconds(100));
  float send = 1, recv = 0;
  const std::vector<int64_t> alone = {3};
  ASSERT_TRUE(comm.AllGather(CollectiveCall{7, 0, alone, 0, client_->devices(), "all_gather 'elsewhere' (kernel 0)"},
                             PrimitiveType::kF32, 1, &send, &recv)
                  .ok());
  const std::vector<absl::Status> status = OnThreads(kMembers - 1, [&](int r) {
    float s = 1, out = 0;
    return comm.AllReduce(Call(r, 7, 1), PrimitiveType::kF32, Combiner::kSum, 1, &s, &out);
  });
  for (const absl::Status& s : status) {
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("partition(s) 3 (SIM:3, last at all_gather 'elsewhere' (kernel 0)) of replica group"));
  }
}

proto::Module AllReduceModule(int partitions, const testing::Dims& dims) {
  ModuleBuilder b("all_reduce");
  b.mutable_module().set_num_partitions(partitions);
  const int64_t x = b.Parameter(0, proto::F32, dims);
  b.Output(b.Op(Opcode::kAllReduce, {b.Unary(Opcode::kExp, x)}, proto::F32, dims));
  return b.module();
}

// Partition 3's argument is never ready: the other partitions give up at the collective after the
// communicator's timeout, naming partition 3 and its device; partition 3, once its argument is ready,
// fails at once.
TEST(PartitionedExecutionTest, APartitionThatNeverArrivesGivesABoundedError) {
  std::unique_ptr<Client> client = MakeClient(4);
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(AllReduceModule(4, {8}), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  std::vector<std::vector<std::shared_ptr<Buffer>>> args(4);
  const std::vector<float> data(8, 1.0f);
  auto never_ready = std::make_shared<Event>();
  for (int p = 0; p < 4; ++p) {
    if (p == 3) {
      absl::StatusOr<DeviceMemory> m = client->device(p)->Allocate(32);
      ASSERT_TRUE(m.ok());
      args[3].push_back(std::make_shared<Buffer>(client->device(p), ArrayShape{PrimitiveType::kF32, {8}},
                                                 std::make_shared<DeviceMemory>(*std::move(m)), never_ready));
    } else {
      absl::StatusOr<std::shared_ptr<Buffer>> b =
          client->BufferFromHost(data.data(), {PrimitiveType::kF32, {8}}, client->device(p));
      ASSERT_TRUE(b.ok());
      args[static_cast<size_t>(p)].push_back(*b);
    }
  }
  InProcessCommunicator comm(std::chrono::milliseconds(300));
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::vector<std::vector<std::shared_ptr<Buffer>>>> results =
      (*exe)->ExecutePartitioned(args, client->devices(), &comm);
  ASSERT_TRUE(results.ok()) << results.status();
  for (int p = 0; p < 3; ++p) {
    const absl::Status s = (*results)[static_cast<size_t>(p)][0]->AwaitReady();
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("partition(s) 3 (SIM:3, at no collective of this execution yet)"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("all_reduce 'all_reduce(exp)'"));
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  never_ready->Set(absl::OkStatus());
  EXPECT_TRUE(absl::IsDeadlineExceeded((*results)[3][0]->AwaitReady()));
  EXPECT_EQ(comm.pending_rendezvous(), 0);
}

// A partition that fails before a collective aborts the execution: the others fail at once with its
// error, long before the (default, 60 s) timeout.
TEST(PartitionedExecutionTest, AFailedPartitionAbortsTheOthers) {
  std::unique_ptr<Client> client = MakeClient(2);
  ModuleBuilder b("gather_then_reduce");
  b.mutable_module().set_num_partitions(2);
  const int64_t x = b.Parameter(0, proto::F32, {4});
  const int64_t index = b.Parameter(1, proto::S64, {2});
  b.Output(b.Op(Opcode::kAllReduce, {b.IndexSelect(x, index, 0)}, proto::F32, {2}));
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(b.module(), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  const std::vector<float> xs = {1, 2, 3, 4};
  const std::vector<std::vector<int64_t>> indices = {{0, 1}, {2, 9}};  // 9 is out of range
  std::vector<std::vector<std::shared_ptr<Buffer>>> args(2);
  for (int p = 0; p < 2; ++p) {
    auto xb = client->BufferFromHost(xs.data(), {PrimitiveType::kF32, {4}}, client->device(p));
    auto ib =
        client->BufferFromHost(indices[static_cast<size_t>(p)].data(), {PrimitiveType::kS64, {2}}, client->device(p));
    ASSERT_TRUE(xb.ok() && ib.ok());
    args[static_cast<size_t>(p)] = {*xb, *ib};
  }
  const Clock::time_point start = Clock::now();
  auto results = (*exe)->ExecutePartitioned(args, client->devices());
  ASSERT_TRUE(results.ok()) << results.status();
  const absl::Status s0 = (*results)[0][0]->AwaitReady();
  const absl::Status s1 = (*results)[1][0]->AwaitReady();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(absl::IsOutOfRange(s1)) << s1;
  EXPECT_THAT(std::string(s0.message()), HasSubstr("partition 1 on SIM:1 failed: index_select"));
}

// Two threads run partitioned executions on the same two devices in opposite partition orders: each
// execution's partitions are enqueued together, so the devices' streams agree on the order and
// neither execution waits for the other's partition behind its own.
TEST(PartitionedExecutionTest, ConcurrentExecutionsOnSharedDevicesDoNotDeadlock) {
  std::unique_ptr<Client> client = MakeClient(2);
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(AllReduceModule(2, {16}), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  InProcessCommunicator comm(std::chrono::milliseconds(2000));
  const std::vector<float> data(16, 0.0f);
  auto run = [&](std::vector<Device*> devices) -> absl::Status {
    std::vector<std::vector<std::shared_ptr<Buffer>>> args(2);
    for (size_t p = 0; p < 2; ++p) {
      ASSIGN_OR_RETURN(std::shared_ptr<Buffer> b,
                       client->BufferFromHost(data.data(), {PrimitiveType::kF32, {16}}, devices[p]));
      args[p] = {b};
    }
    for (int i = 0; i < 100; ++i) {
      ASSIGN_OR_RETURN(auto results, (*exe)->ExecutePartitioned(args, devices, &comm));
      for (const auto& r : results) RETURN_IF_ERROR(r[0]->AwaitReady());
    }
    return absl::OkStatus();
  };
  absl::Status forward, backward;
  std::thread a([&] { forward = run({client->device(0), client->device(1)}); });
  std::thread b([&] { backward = run({client->device(1), client->device(0)}); });
  a.join();
  b.join();
  EXPECT_TRUE(forward.ok()) << forward;
  EXPECT_TRUE(backward.ok()) << backward;
}

// Each partition's collective is a span on its device's track of the trace.
TEST(PartitionedExecutionTest, CollectivesAreSpansOnEveryDevice) {
  std::unique_ptr<Client> client = MakeClient(2);
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(AllReduceModule(2, {3}), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  const std::vector<float> data = {1, 2, 3};
  std::vector<std::vector<std::shared_ptr<Buffer>>> args(2);
  for (int p = 0; p < 2; ++p) {
    auto buffer = client->BufferFromHost(data.data(), {PrimitiveType::kF32, {3}}, client->device(p));
    ASSERT_TRUE(buffer.ok());
    args[static_cast<size_t>(p)] = {*buffer};
  }
  const Clock::time_point start = Clock::now();
  auto results = (*exe)->ExecutePartitioned(args, client->devices());
  ASSERT_TRUE(results.ok()) << results.status();
  std::vector<float> got(3);
  ASSERT_TRUE((*results)[1][0]->ToHost(got.data(), 12).ok());
  EXPECT_FLOAT_EQ(got[2], 2 * std::exp(3.0f));
  ASSERT_TRUE((*results)[0][0]->AwaitReady().ok());
  std::vector<bool> seen(2, false);
  for (const CollectiveSpanRecord& span : CollectiveSpans()) {
    if (span.start < start || span.what.find("all_reduce 'all_reduce(exp)'") != 0) continue;
    EXPECT_LE(span.start, span.end);
    seen[static_cast<size_t>(span.device)] = true;
  }
  EXPECT_TRUE(seen[0] && seen[1]);
}

}  // namespace communicator_test
}  // namespace lazyrt::pjrt
