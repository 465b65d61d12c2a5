// memory_info(Device) and reset_peak_memory(Device) (issue 19).
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lazy/devices.h"
#include "tests/lazy/device_test_util.h"

namespace lazyrt {
namespace memory_info_test {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::SettleAllDevices;

// Every device: its capacity, and exactly the bytes of a tensor created there while it lives.
TEST(MemoryInfo, CountsEachDeviceOnItsOwn) {
  constexpr int64_t kElements = 3000;
  const std::vector<double> values(kElements, 2.0);
  for (int d = 0; d < device_count(); ++d) {
    SettleAllDevices();
    std::vector<MemoryInfo> before;
    for (int e = 0; e < device_count(); ++e) before.push_back(memory_info(Device{e}));
    EXPECT_EQ(before[static_cast<size_t>(d)].limit_bytes, options().device_memory_bytes);
    EXPECT_GE(before[static_cast<size_t>(d)].peak_bytes, before[static_cast<size_t>(d)].bytes_in_use);
    {
      Tensor t = Tensor::FromData(std::span<const double>(values), {kElements}, Device{d});
      for (int e = 0; e < device_count(); ++e) {
        const MemoryInfo now = memory_info(Device{e});
        const int64_t added = e == d ? kElements * 8 : 0;
        EXPECT_EQ(now.bytes_in_use, before[static_cast<size_t>(e)].bytes_in_use + added) << "lazy:" << e;
        EXPECT_EQ(now.live_allocations, before[static_cast<size_t>(e)].live_allocations + (e == d ? 1 : 0));
        EXPECT_GE(now.peak_bytes, now.bytes_in_use);
      }
    }
    SettleAllDevices();
    EXPECT_EQ(memory_info(Device{d}).bytes_in_use, before[static_cast<size_t>(d)].bytes_in_use);
  }
}

// A graph's arena and results count while it runs: the peak shows them after they are gone.
TEST(MemoryInfo, PeakRemembersAGraphsMemoryAndResets) {
  SettleAllDevices();
  reset_peak_memory();
  const MemoryInfo start = memory_info();
  EXPECT_EQ(start.peak_bytes, start.bytes_in_use);
  constexpr int64_t kN = 256;
  {
    Tensor a = ones({kN, kN});
    Tensor b = matmul(a, a) + 1.0;
    EXPECT_EQ(b.to_vector<float>()[0], static_cast<float>(kN + 1));
  }
  SettleAllDevices();
  const MemoryInfo after = memory_info();
  EXPECT_EQ(after.bytes_in_use, start.bytes_in_use);
  EXPECT_GE(after.peak_bytes, start.bytes_in_use + kN * kN * 4);  // at least the result
  reset_peak_memory();
  EXPECT_EQ(memory_info().peak_bytes, after.bytes_in_use);
}

TEST(MemoryInfo, DeviceCountIsTheConfiguredOne) {
  EXPECT_EQ(device_count(), options().devices);
  EXPECT_GE(device_count(), 1);
}

TEST(MemoryInfo, UnknownDeviceNamesTheValidRange) {
  const int n = device_count();
  try {
    memory_info(Device{n});
    FAIL() << "memory_info accepted lazy:" << n;
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(Device{n}.ToString()), HasSubstr("does not exist"),
                                HasSubstr(absl::StrCat("lazy:0 to lazy:", n - 1)), HasSubstr("memory_info_test.cc")));
  }
  EXPECT_THROW(reset_peak_memory(Device{-1}), Error);
}

}  // namespace memory_info_test
}  // namespace lazyrt
