// Tensor::to(Device): values, asynchrony, memory accounting, gradients and errors (issue 19).
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lazy/devices.h"
#include "lazy/metrics.h"
#include "tests/lazy/device_test_util.h"

namespace lazyrt {
namespace device_transfer_test {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::SettleAllDevices;
using testing::StreamGate;

std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> bits;
  for (float v : values) bits.push_back(std::bit_cast<uint32_t>(v));
  return bits;
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DeviceTransfer, SameDeviceIsTheTensorItself) {
  Tensor x = Tensor::FromData({1, 2, 3}, {3});
  Tensor y = x.to(Device{0});
  EXPECT_EQ(y.impl(), x.impl());
}

TEST(DeviceTransfer, UnknownDeviceNamesTheValidRange) {
  Tensor x = Tensor::FromData({1, 2, 3}, {3});
  const int n = device_count();
  const std::string past_end = ErrorOf([&] { x.to(Device{n}); });
  EXPECT_THAT(past_end, AllOf(HasSubstr(Device{n}.ToString()), HasSubstr("does not exist"),
                              HasSubstr(absl::StrCat("lazy:0 to lazy:", n - 1)), HasSubstr("LAZYRT_DEVICES"),
                              HasSubstr("device_transfer_test.cc")));
  EXPECT_THAT(ErrorOf([&] { x.to(Device{-1}); }), AllOf(HasSubstr("lazy:-1"), HasSubstr("does not exist")));
  EXPECT_THAT(ErrorOf([] { Tensor().to(Device{0}); }), HasSubstr("to: use of an undefined tensor"));
}

TEST(DeviceTransfer, RoundTripsEveryDTypeExactly) {
  LAZYRT_NEEDS_DEVICES(2);
  // f32 with the values a conversion would change: -0, NaN, infinities, a denormal, the extremes.
  const std::vector<float> f32 = {-0.0F,
                                  std::numeric_limits<float>::quiet_NaN(),
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::denorm_min(),
                                  std::numeric_limits<float>::max(),
                                  std::numeric_limits<float>::lowest(),
                                  1.0F / 3.0F};
  Tensor x = Tensor::FromData(std::span<const float>(f32), {2, 4});
  Tensor there = x.to(Device{1});
  EXPECT_EQ(there.device(), Device{1});
  EXPECT_EQ(there.shape(), x.shape());
  EXPECT_EQ(Bits(there.to_vector<float>()), Bits(f32));
  EXPECT_EQ(Bits(there.to(Device{0}).to_vector<float>()), Bits(f32));

  // s64 beyond double's 53 bits: read back without a detour through double.
  const std::vector<int64_t> s64 = {std::numeric_limits<int64_t>::min(), (int64_t{1} << 62) + 1, -7,
                                    std::numeric_limits<int64_t>::max()};
  Tensor i = Tensor::FromData(std::span<const int64_t>(s64), {4});
  EXPECT_EQ(i.to(Device{2}).to(Device{1}).to_vector<int64_t>(), s64);

  // bf16 and pred, computed on device 0 (the source is pending: to() computes it first).
  Tensor bf16 = cast(x * 3.0, DType::kBF16);
  const std::vector<float> bf16_here = bf16.to_vector<float>();
  Tensor bf16_there = cast(x * 3.0, DType::kBF16).to(Device{1});
  EXPECT_EQ(bf16_there.dtype(), DType::kBF16);
  EXPECT_EQ(Bits(bf16_there.to_vector<float>()), Bits(bf16_here));

  Tensor pred = gt(x, Tensor::FromData({0.0F}, {}));
  Tensor pred_there = pred.to(Device{2});
  EXPECT_EQ(pred_there.dtype(), DType::kBool);
  EXPECT_EQ(pred_there.to_vector<uint8_t>(), (std::vector<uint8_t>{0, 0, 1, 0, 1, 1, 0, 1}));
  EXPECT_EQ(pred_there.to_vector<uint8_t>(), pred.to_vector<uint8_t>());
}

TEST(DeviceTransfer, ResultComputesOnTheDestination) {
  LAZYRT_NEEDS_DEVICES(2);
  Tensor a = Tensor::FromData({1, 2, 3, 4}, {2, 2}, Device{0});
  Tensor b = Tensor::FromData({10, 20, 30, 40}, {2, 2}, Device{1});
  Tensor sum = a.to(Device{1}) + b;
  EXPECT_EQ(sum.device(), Device{1});
  EXPECT_EQ(sum.to_vector<float>(), (std::vector<float>{11, 22, 33, 44}));
  // Without the move, the error says how to make one.
  EXPECT_THAT(ErrorOf([&] { (void)(a + b); }), AllOf(HasSubstr("different devices, lazy:0 and lazy:1"),
                                                     HasSubstr(".to(Device{0})"), HasSubstr(".to(Device{1})")));
}

// The copy is queued behind the producer on the source's stream: with that stream held busy, to()
// returns with the result not yet ready; once the stream runs, the values arrive.
TEST(DeviceTransfer, IsAsynchronousAndOrderedAfterTheProducer) {
  LAZYRT_NEEDS_DEVICES(2);
  const int64_t syncs_before = CounterValue("sync_to_device");
  const int64_t transfers_before = CounterValue("transfers_between_devices");
  Tensor x = Tensor::FromData({1, 2, 3, 4}, {4}, Device{0});
  wait_device(Device{0});
  StreamGate gate(Device{0});
  Tensor pending = x * 2.0 + 1.0;  // computed by the graph the copy must follow
  Tensor moved = pending.to(Device{1});
  EXPECT_EQ(CounterValue("sync_to_device"), syncs_before + 1);
  EXPECT_EQ(CounterValue("transfers_between_devices"), transfers_before + 1);
  EXPECT_FALSE(pending.is_pending());  // its graph was launched (queued behind the gate)
  EXPECT_FALSE(pending.impl()->buffer->ready()->IsReady());
  EXPECT_FALSE(moved.impl()->buffer->ready()->IsReady());
  // A consumer on the destination is queued too and waits for the copy.
  Tensor consumer = moved * 10.0;
  sync(Device{1});
  EXPECT_FALSE(consumer.impl()->buffer->ready()->IsReady());
  gate.Open();
  EXPECT_EQ(consumer.to_vector<float>(), (std::vector<float>{30, 50, 70, 90}));
  EXPECT_EQ(moved.to_vector<float>(), (std::vector<float>{3, 5, 7, 9}));
}

// A large copy does not run on the host: to() returns before it is done (the source is ready, but
// the stream that copies it is busy).
TEST(DeviceTransfer, LargeCopyDoesNotBlockTheHost) {
  LAZYRT_NEEDS_DEVICES(2);
  std::vector<float> values(1 << 22);  // 16 MiB
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000) - 500.0F;
  Tensor x = Tensor::FromData(std::span<const float>(values), {1 << 11, 1 << 11}, Device{0});
  wait_device(Device{0});
  StreamGate gate(Device{0});
  Tensor moved = x.to(Device{1});
  EXPECT_FALSE(moved.impl()->buffer->ready()->IsReady());
  gate.Open();
  EXPECT_EQ(moved.to_vector<float>(), values);
}

TEST(DeviceTransfer, BytesCountOnBothDevices) {
  LAZYRT_NEEDS_DEVICES(2);
  constexpr int64_t kElements = 1 << 16;
  constexpr int64_t kBytes = kElements * 4;
  std::vector<float> values(kElements, 1.5F);
  SettleAllDevices();
  const MemoryInfo src_before = memory_info(Device{0});
  const MemoryInfo dst_before = memory_info(Device{1});
  {
    Tensor x = Tensor::FromData(std::span<const float>(values), {kElements}, Device{0});
    EXPECT_EQ(memory_info(Device{0}).bytes_in_use, src_before.bytes_in_use + kBytes);
    Tensor moved;
    {
      StreamGate gate(Device{0});
      moved = x.to(Device{1});
      // The destination's bytes count from the call on, before the copy has run.
      EXPECT_EQ(memory_info(Device{1}).bytes_in_use, dst_before.bytes_in_use + kBytes);
      EXPECT_GE(memory_info(Device{1}).peak_bytes, dst_before.bytes_in_use + kBytes);
      EXPECT_EQ(memory_info(Device{0}).bytes_in_use, src_before.bytes_in_use + kBytes);
      // Dropping the source while the copy waits keeps its bytes until the copy has read them.
      x = Tensor();
      wait_device(Device{1});  // not device 0: its stream is held
      EXPECT_EQ(memory_info(Device{0}).bytes_in_use, src_before.bytes_in_use + kBytes);
    }
    wait_device(Device{0});
    EXPECT_EQ(memory_info(Device{0}).bytes_in_use, src_before.bytes_in_use);
    EXPECT_EQ(moved.to_vector<float>(), values);
    EXPECT_EQ(memory_info(Device{1}).bytes_in_use, dst_before.bytes_in_use + kBytes);
  }
  SettleAllDevices();
  EXPECT_EQ(memory_info(Device{1}).bytes_in_use, dst_before.bytes_in_use);
  EXPECT_EQ(memory_info(Device{0}).bytes_in_use, src_before.bytes_in_use);
}

// The source's graph fails on the device (an index only the device knows is out of range): the copy
// carries that error, and reading the moved tensor reports it with the op and its line.
TEST(DeviceTransfer, CarriesTheSourcesDeviceError) {
  LAZYRT_NEEDS_DEVICES(2);
  Tensor table = Tensor::FromData({1, 2, 3, 4}, {4}, Device{0});
  Tensor index = Tensor::FromData(std::span<const int64_t>(std::vector<int64_t>{1, 2}), {2}, Device{0}) * 3;
  Tensor picked = index_select(table, 0, index);  // index 6 is out of range for 4 elements
  Tensor moved = picked.to(Device{1});
  EXPECT_THAT(ErrorOf([&] { moved.to_vector<float>(); }),
              AllOf(HasSubstr("index_select"), HasSubstr("out of range"), HasSubstr("device_transfer_test.cc")));
}

TEST(DeviceTransfer, GradientGoesBackToTheSourceDevice) {
  LAZYRT_NEEDS_DEVICES(2);
  Tensor w = Tensor::FromData({0.5F, -1.0F, 2.0F}, {3}, Device{0});
  w.requires_grad_();
  Tensor c = Tensor::FromData({3.0F, 4.0F, -5.0F}, {3}, Device{1});
  // loss = sum((w * w).to(1) * c): d/dw = 2 w c, computed on device 1 and moved back.
  Tensor loss = sum((w * w).to(Device{1}) * c);
  EXPECT_EQ(loss.device(), Device{1});
  EXPECT_FLOAT_EQ(static_cast<float>(loss.item()), 0.25F * 3 + 1.0F * 4 + 4.0F * -5);
  loss.backward();
  Tensor g = w.grad();
  ASSERT_TRUE(g.defined());
  EXPECT_EQ(g.device(), Device{0});
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{2 * 0.5F * 3, 2 * -1.0F * 4, 2 * 2.0F * -5}));

  // A round trip through two devices is the identity for the gradient too.
  Tensor v = Tensor::FromData({1.0F, 2.0F}, {2}, Device{2});
  v.requires_grad_();
  Tensor weights = Tensor::FromData({7.0F, -3.0F}, {2}, Device{2});
  sum(v.to(Device{0}).to(Device{1}).to(Device{2}) * weights).backward();
  EXPECT_EQ(v.grad().device(), Device{2});
  EXPECT_EQ(v.grad().to_vector<float>(), (std::vector<float>{7, -3}));

  // Used on its own device and, moved, on another: the two gradients add up on the source device.
  Tensor u = Tensor::FromData({1.0F, -2.0F}, {2}, Device{0});
  u.requires_grad_();
  Tensor on_one = Tensor::FromData({5.0F, 6.0F}, {2}, Device{1});
  Tensor on_zero = Tensor::FromData({0.5F, 0.25F}, {2}, Device{0});
  Tensor total = sum(u.to(Device{1}) * on_one).to(Device{0}) + sum(u * on_zero);
  EXPECT_FLOAT_EQ(static_cast<float>(total.item()), 5.0F - 12.0F + 0.5F - 0.5F);
  total.backward();
  EXPECT_EQ(u.grad().device(), Device{0});
  EXPECT_EQ(u.grad().to_vector<float>(), (std::vector<float>{5.5F, 6.25F}));
}

}  // namespace device_transfer_test
}  // namespace lazyrt
