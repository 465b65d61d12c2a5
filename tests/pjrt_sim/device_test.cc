#include "pjrt_sim/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "pjrt_sim/client.h"
#include "pjrt_sim/stream.h"

namespace lazyrt::pjrt {
namespace device_test {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(Client, DevicesAndPlatform) {
  auto client = Client::Create({.num_devices = 8, .device_memory_bytes = 1 << 20});
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->devices().size(), 8u);
  EXPECT_EQ((*client)->platform_name(), "lazyrt-sim");
  EXPECT_EQ((*client)->device(7)->DebugString(), "SIM:7");
  EXPECT_EQ((*client)->device(8), nullptr);
  EXPECT_FALSE(Client::Create({.num_devices = 0}).ok());
}

TEST(Device, MemoryAccountingAndOutOfMemory) {
  Device d(0, 1000);
  {
    absl::StatusOr<DeviceMemory> a = d.Allocate(600);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(d.memory_stats().bytes_in_use, 600);
    absl::StatusOr<DeviceMemory> b = d.Allocate(500);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(b.status().message(), AllOf(HasSubstr("500 B"), HasSubstr("600 B in use"), HasSubstr("1000 B limit")));
    // The device stays usable.
    absl::StatusOr<DeviceMemory> c = d.Allocate(400);
    ASSERT_TRUE(c.ok());
    MemoryStats s = d.memory_stats();
    EXPECT_EQ(s.bytes_in_use, 1000);
    EXPECT_EQ(s.peak_bytes_in_use, 1000);
    EXPECT_EQ(s.largest_alloc_size, 600);
    EXPECT_EQ(s.live_allocations, 2);
  }
  EXPECT_EQ(d.memory_stats().bytes_in_use, 0);
  EXPECT_EQ(d.memory_stats().num_allocs, 2);
}

// An arena counts at once and takes memory only when bound; the arenas reserved and not yet released count
// as the largest of them (the stream binds one at a time); freed blocks are reused last in, first out.
TEST(Device, ArenasCountAsTheLargestAndBindTheLastFreedBlock) {
  Device d(0, 1000);
  absl::StatusOr<DeviceMemory> r = d.ReserveArena(600);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data(), nullptr);
  EXPECT_EQ(d.memory_stats().bytes_in_use, 600);
  absl::StatusOr<DeviceMemory> queued = d.ReserveArena(500);  // queued behind the first: no more bytes
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(d.memory_stats().bytes_in_use, 600);
  EXPECT_EQ(d.memory_stats().arena_bytes, 600);
  absl::StatusOr<DeviceMemory> larger = d.ReserveArena(800);  // 200 bytes more than the largest
  ASSERT_TRUE(larger.ok());
  EXPECT_EQ(d.memory_stats().bytes_in_use, 800);
  absl::StatusOr<DeviceMemory> over = d.Allocate(300);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), AllOf(HasSubstr("300 B"), HasSubstr("800 B in use")));
  absl::StatusOr<DeviceMemory> too_large = d.ReserveArena(1200);
  ASSERT_FALSE(too_large.ok());
  EXPECT_THAT(too_large.status().message(),
              AllOf(HasSubstr("1200 bytes"), HasSubstr("count as the largest"), HasSubstr("800 B now")));
  absl::StatusOr<DeviceMemory> same = d.ReserveArena(600);  // a size queued twice
  ASSERT_TRUE(same.ok());
  { DeviceMemory released = *std::move(same); }  // not the largest: nothing changes
  EXPECT_EQ(d.memory_stats().bytes_in_use, 800);
  { DeviceMemory released = *std::move(larger); }  // back to the largest of the others, never bound
  EXPECT_EQ(d.memory_stats().bytes_in_use, 600);
  EXPECT_EQ(d.memory_stats().peak_bytes_in_use, 800);
  { DeviceMemory released = *std::move(r); }
  EXPECT_EQ(d.memory_stats().bytes_in_use, 500);
  { DeviceMemory released = *std::move(queued); }
  MemoryStats s = d.memory_stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.arena_bytes, 0);
  EXPECT_EQ(s.live_allocations, 0);
  EXPECT_EQ(s.bytes_cached, 0);  // none was bound

  void* first = nullptr;
  {
    absl::StatusOr<DeviceMemory> a = d.ReserveArena(300);
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(a->Bind().ok());
    first = a->data();
    ASSERT_NE(first, nullptr);
    ASSERT_TRUE(a->Bind().ok());  // bound already: the same memory
    EXPECT_EQ(a->data(), first);
  }
  EXPECT_EQ(d.memory_stats().bytes_cached, 320);  // 300 rounded up to 64-byte lines
  absl::StatusOr<DeviceMemory> b = d.ReserveArena(300);
  absl::StatusOr<DeviceMemory> c = d.ReserveArena(300);
  ASSERT_TRUE(b.ok() && c.ok());
  ASSERT_TRUE(c->Bind().ok());  // bound first, it gets the freed block
  EXPECT_EQ(c->data(), first);
  EXPECT_EQ(d.memory_stats().bytes_cached, 0);
  EXPECT_EQ(d.memory_stats().bytes_in_use, 300);
  // What lets them count as one: a second arena cannot be bound while one is.
  const absl::Status second = b->Bind();
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.message(), HasSubstr("while another is"));
  { DeviceMemory released = *std::move(c); }
  ASSERT_TRUE(b->Bind().ok());
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(DeviceMemory().Bind().code(), absl::StatusCode::kFailedPrecondition);  // memory of no device
}

TEST(Buffer, RoundTripAndDelete) {
  auto client = *Client::Create({});
  float host[4] = {1, 2, 3, 4};
  auto buf = client->BufferFromHost(host, {PrimitiveType::kF32, {2, 2}}, client->device(0));
  ASSERT_TRUE(buf.ok());
  float back[4] = {};
  ASSERT_TRUE((*buf)->ToHost(back, sizeof back).ok());
  EXPECT_EQ(back[3], 4.0f);
  EXPECT_FALSE((*buf)->ToHost(back, 3).ok());
  (*buf)->Delete();
  absl::Status s = (*buf)->ToHost(back, sizeof back);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("deleted"));
  EXPECT_EQ(client->device(0)->memory_stats().bytes_in_use, 0);
}

TEST(Stream, RunsInOrderAndSynchronizes) {
  Stream stream;
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) stream.Enqueue([&order, i] { order.push_back(i); });
  stream.Synchronize();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
}

TEST(Stream, SubmitRunsInlineOnlyWhenIdle) {
  Stream stream;
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  stream.Submit(/*inline_if_idle=*/true, [&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, caller) << "an idle stream runs small work on the caller's thread";

  // Busy: the submitted work queues behind what is running, and runs on the stream's thread, in order.
  std::mutex gate;
  gate.lock();
  std::vector<int> order;
  stream.Enqueue([&] {
    std::lock_guard<std::mutex> wait(gate);
    order.push_back(0);
  });
  stream.Submit(/*inline_if_idle=*/true, [&] {
    order.push_back(1);
    ran_on = std::this_thread::get_id();
  });
  gate.unlock();
  stream.Synchronize();
  EXPECT_EQ(order, (std::vector<int>{0, 1}));
  EXPECT_NE(ran_on, caller);
}

// Handing work to the sleeping stream thread is timed: the average moves off its starting guess and
// stays within the bound that keeps large work off the caller's thread.
TEST(Stream, MeasuresWhatWakingItsThreadCosts) {
  Stream stream;
  const int64_t guess = stream.wake_ns();
  std::set<int64_t> seen;
  for (int i = 0; i < 20; ++i) {
    stream.Enqueue([] {});
    stream.Synchronize();  // the stream thread waits for work again before Synchronize returns
    seen.insert(stream.wake_ns());
    EXPECT_GT(stream.wake_ns(), 0);
    EXPECT_LE(stream.wake_ns(), Stream::kMaxWakeNs);
  }
  EXPECT_TRUE(seen.size() > 1 || !seen.contains(guess)) << "no hand-off was measured";

  // Work queued while the thread is awake (woken for, then blocked in, the gated work) wakes nobody:
  // not a sample, even before the thread has taken its first item.
  std::mutex gate;
  gate.lock();
  stream.Enqueue([&] { std::lock_guard<std::mutex> wait(gate); });
  const int64_t before = stream.wake_ns();
  for (int i = 0; i < 20; ++i) stream.Enqueue([] {});
  EXPECT_EQ(stream.wake_ns(), before) << "a hand-off to a busy thread was timed";
  gate.unlock();
  stream.Synchronize();
}

TEST(Stream, WorkEnqueuedDuringAnInlineRunWaitsForIt) {
  Stream stream;
  std::vector<int> order;
  std::mutex order_mu;
  std::thread other;
  stream.Submit(/*inline_if_idle=*/true, [&] {
    // Another thread enqueues while this runs inline: the stream thread must not start it meanwhile.
    other = std::thread([&] {
      stream.Enqueue([&] {
        std::lock_guard<std::mutex> l(order_mu);
        order.push_back(2);
      });
    });
    other.join();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // room for a wrongly started stream thread
    std::lock_guard<std::mutex> l(order_mu);
    order.push_back(1);
  });
  stream.Synchronize();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

}  // namespace device_test
}  // namespace lazyrt::pjrt
