// Buffer::CopyToDevice: ordering on the source's stream, accounting on both devices, errors (issue 19).
#include <future>
#include <memory>
#include <numeric>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pjrt_sim/buffer.h"
#include "pjrt_sim/client.h"

namespace lazyrt::pjrt {
namespace buffer_copy_test {

using ::testing::HasSubstr;

std::shared_ptr<Buffer> Upload(Client& client, const std::vector<float>& values, int device) {
  absl::StatusOr<std::shared_ptr<Buffer>> buffer = client.BufferFromHost(
      values.data(), {PrimitiveType::kF32, {static_cast<int64_t>(values.size())}}, client.device(device));
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  return *std::move(buffer);
}

std::vector<float> Download(const Buffer& buffer) {
  std::vector<float> values(static_cast<size_t>(buffer.shape().byte_size()) / sizeof(float));
  EXPECT_TRUE(buffer.ToHost(values.data(), values.size() * sizeof(float)).ok());
  return values;
}

// The copy waits behind the source stream's earlier work: a producer still writing the source (here:
// a stream item that fills it) is finished before the copy reads it.
TEST(BufferCopy, RunsAfterTheProducerOnTheSourceStream) {
  auto client = *Client::Create({.num_devices = 2});
  std::vector<float> zeros(1000, 0.0F);
  std::shared_ptr<Buffer> src = Upload(*client, zeros, 0);
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  void* src_data = (*src->memory())->data();
  client->device(0)->stream().Enqueue([opened, src_data] {
    opened.wait();
    auto* values = static_cast<float*>(src_data);
    std::iota(values, values + 1000, 1.0F);
  });
  const MemoryStats dst_before = client->device(1)->memory_stats();
  absl::StatusOr<std::shared_ptr<Buffer>> copy = src->CopyToDevice(client->device(1));
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ((*copy)->device(), client->device(1));
  EXPECT_EQ((*copy)->shape(), src->shape());
  EXPECT_FALSE((*copy)->ready()->IsReady());
  EXPECT_EQ(client->device(1)->memory_stats().bytes_in_use, dst_before.bytes_in_use + 4000);
  open.set_value();
  std::vector<float> expected(1000);
  std::iota(expected.begin(), expected.end(), 1.0F);
  EXPECT_EQ(Download(**copy), expected);
}

TEST(BufferCopy, CarriesTheProducersError) {
  auto client = *Client::Create({.num_devices = 2});
  Device* d0 = client->device(0);
  auto memory = std::make_shared<DeviceMemory>(*d0->Allocate(16));
  auto failed = std::make_shared<Buffer>(d0, ArrayShape{PrimitiveType::kF32, {4}}, memory,
                                         Event::Ready(absl::InternalError("the kernel failed")));
  absl::StatusOr<std::shared_ptr<Buffer>> copy = failed->CopyToDevice(client->device(1));
  ASSERT_TRUE(copy.ok());
  absl::Status status = (*copy)->AwaitReady();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("the kernel failed"));
}

TEST(BufferCopy, RefusesADeletedSourceAndAFullDestination) {
  auto client = *Client::Create({.num_devices = 2, .device_memory_bytes = 6000});
  std::shared_ptr<Buffer> src = Upload(*client, std::vector<float>(1000, 1.0F), 0);
  std::shared_ptr<Buffer> filler = Upload(*client, std::vector<float>(1000, 2.0F), 1);
  absl::StatusOr<std::shared_ptr<Buffer>> full = src->CopyToDevice(client->device(1));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.status().message(), HasSubstr("SIM:1 is out of memory"));
  EXPECT_EQ(client->device(1)->memory_stats().bytes_in_use, 4000);  // nothing left allocated
  src->Delete();
  absl::StatusOr<std::shared_ptr<Buffer>> deleted = src->CopyToDevice(client->device(1));
  ASSERT_FALSE(deleted.ok());
  EXPECT_EQ(deleted.status().code(), absl::StatusCode::kFailedPrecondition);
}

// Deleting the source while the copy waits gives its memory back only once the copy has read it.
TEST(BufferCopy, KeepsTheSourceAliveUntilRead) {
  auto client = *Client::Create({.num_devices = 2});
  std::vector<float> values(5000);
  std::iota(values.begin(), values.end(), -10.0F);
  std::shared_ptr<Buffer> src = Upload(*client, values, 0);
  std::promise<void> open;
  client->device(0)->stream().Enqueue([opened = open.get_future().share()] { opened.wait(); });
  absl::StatusOr<std::shared_ptr<Buffer>> copy = src->CopyToDevice(client->device(1));
  ASSERT_TRUE(copy.ok());
  src->Delete();
  src.reset();
  EXPECT_EQ(client->device(0)->memory_stats().bytes_in_use, 20000);
  open.set_value();
  EXPECT_EQ(Download(**copy), values);
  client->device(0)->stream().Synchronize();
  EXPECT_EQ(client->device(0)->memory_stats().bytes_in_use, 0);
}

}  // namespace buffer_copy_test
}  // namespace lazyrt::pjrt
