// Client::BufferFromHostInPlace: host bytes an execution reads where they are (PJRT's zero-copy host
// buffers), held alive by their owner until the last reader is done, never written, never counted as the
// device's memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <vector>

#include "pjrt_sim/buffer.h"
#include "pjrt_sim/client.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace buffer_in_place_test {

using ::testing::HasSubstr;
using testing::ModuleBuilder;

const ArrayShape kShape{PrimitiveType::kF32, {2, 3}};

std::vector<float> Download(const Buffer& buffer) {
  std::vector<float> values(static_cast<size_t>(buffer.shape().byte_size()) / sizeof(float));
  EXPECT_TRUE(buffer.ToHost(values.data(), values.size() * sizeof(float)).ok());
  return values;
}

// x * 2 and x itself (a parameter result, which an execution copies).
std::shared_ptr<Executable> DoubleAndSame(Client& client) {
  ModuleBuilder b("double_and_same");
  const int64_t x = b.Parameter(0, proto::F32, {2, 3});
  b.Output(b.Binary(Opcode::kMultiply, x, b.Constant(2.0, proto::F32, {2, 3})));
  b.Output(x);
  absl::StatusOr<std::shared_ptr<Executable>> exe = client.Compile(b.module(), {});
  EXPECT_TRUE(exe.ok()) << exe.status();
  return exe.ok() ? *exe : nullptr;
}

TEST(BufferInPlace, ReadsTheHostBytesWhereTheyAreAndCountsNoDeviceMemory) {
  auto client = testing::MakeClient();
  auto host = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  absl::StatusOr<std::shared_ptr<Buffer>> buffer =
      client->BufferFromHostInPlace(host->data(), kShape, client->device(0), host);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ((*(*buffer)->memory())->data(), host->data());
  EXPECT_EQ(client->device(0)->memory_stats().bytes_in_use, 0);
  EXPECT_EQ(client->device(0)->memory_stats().num_allocs, 0);
  EXPECT_EQ(Download(**buffer), *host);
}

TEST(BufferInPlace, AnExecutionReadsThemAndWritesItsResultsElsewhere) {
  auto client = testing::MakeClient();
  std::shared_ptr<Executable> exe = DoubleAndSame(*client);
  ASSERT_NE(exe, nullptr);
  auto host = std::make_shared<std::vector<float>>(std::vector<float>{1, -2, 3, -4, 5, -6});
  std::shared_ptr<Buffer> x = *client->BufferFromHostInPlace(host->data(), kShape, client->device(0), host);
  absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> results =
      exe->Execute(std::vector<std::shared_ptr<Buffer>>{x}, client->device(0));
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ(Download(*(*results)[0]), (std::vector<float>{2, -4, 6, -8, 10, -12}));
  EXPECT_EQ(Download(*(*results)[1]), *host);
  EXPECT_NE((*(*results)[1]->memory())->data(), host->data());  // the parameter result is a copy
  EXPECT_EQ(*host, (std::vector<float>{1, -2, 3, -4, 5, -6}));
}

// The owner outlives the buffer for as long as a queued execution still has to read the bytes.
TEST(BufferInPlace, TheOwnerIsHeldUntilTheLastExecutionReadingItEnds) {
  auto client = testing::MakeClient();
  std::shared_ptr<Executable> exe = DoubleAndSame(*client);
  ASSERT_NE(exe, nullptr);
  auto host = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  const std::weak_ptr<std::vector<float>> watch = host;
  std::shared_ptr<Buffer> x = *client->BufferFromHostInPlace(host->data(), kShape, client->device(0), host);
  host.reset();
  std::promise<void> open;
  client->device(0)->stream().Enqueue([opened = open.get_future().share()] { opened.wait(); });
  absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> results =
      exe->Execute(std::vector<std::shared_ptr<Buffer>>{x}, client->device(0));
  ASSERT_TRUE(results.ok()) << results.status();
  x->Delete();
  x.reset();
  EXPECT_FALSE(watch.expired()) << "the queued execution has not read the bytes yet";
  open.set_value();
  EXPECT_EQ(Download(*(*results)[0]), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  client->device(0)->stream().Synchronize();
  EXPECT_TRUE(watch.expired());
}

TEST(BufferInPlace, RefusesNoOwnerNoBytesNoDeviceAndMisalignedElements) {
  auto client = testing::MakeClient();
  auto host = std::make_shared<std::vector<float>>(6);
  absl::StatusOr<std::shared_ptr<Buffer>> unowned =
      client->BufferFromHostInPlace(host->data(), kShape, client->device(0), nullptr);
  EXPECT_EQ(unowned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unowned.status().message(), HasSubstr("owner"));
  absl::StatusOr<std::shared_ptr<Buffer>> no_bytes =
      client->BufferFromHostInPlace(nullptr, kShape, client->device(0), host);
  EXPECT_EQ(no_bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_bytes.status().message(), HasSubstr("f32[2,3]"));
  absl::StatusOr<std::shared_ptr<Buffer>> no_device =
      client->BufferFromHostInPlace(host->data(), kShape, nullptr, host);
  EXPECT_EQ(no_device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_device.status().message(), HasSubstr("f32[2,3]"));
  const char* bytes = reinterpret_cast<const char*>(host->data());
  absl::StatusOr<std::shared_ptr<Buffer>> misaligned =
      client->BufferFromHostInPlace(bytes + 2, {PrimitiveType::kF32, {2}}, client->device(0), host);
  EXPECT_EQ(misaligned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(misaligned.status().message(), HasSubstr("not aligned to its 4-byte elements"));
}

}  // namespace buffer_in_place_test
}  // namespace lazyrt::pjrt
