// Memory in the diagnostics (issue 19): the run report's per-device memory and per-graph peaks, and the
// Chrome trace's per-device memory counters.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lazy/devices.h"
#include "lazy/diagnostics.h"
#include "tests/lazy/device_test_util.h"

namespace lazyrt {
namespace memory_diagnostics_test {

using nlohmann::json;
using testing::SettleAllDevices;

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  json parsed = json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::remove(path.c_str());
  return parsed;
}

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/", name, "_", getpid(), ".json");
}

TEST(MemoryDiagnostics, ReportHasEveryDevicesMemory) {
  const std::vector<float> values(1000, 1.0F);
  Tensor kept = Tensor::FromData(std::span<const float>(values), {1000}, Device{device_count() - 1});
  Tensor result = sum(kept * 2.0);
  EXPECT_EQ(result.item(), 2000.0);
  SettleAllDevices();
  const std::string path = TempPath("memory_report");
  write_report(path);
  const json report = ReadJson(path);
  ASSERT_TRUE(report.is_object());
  ASSERT_TRUE(report.contains("devices"));
  const json& devices = report["devices"];
  ASSERT_EQ(devices.size(), static_cast<size_t>(device_count()));
  for (int d = 0; d < device_count(); ++d) {
    const json& entry = devices[static_cast<size_t>(d)];
    const MemoryInfo now = memory_info(Device{d});  // nothing runs meanwhile: the same numbers
    EXPECT_EQ(entry["device"], Device{d}.ToString());
    EXPECT_EQ(entry["bytes_in_use"].get<int64_t>(), now.bytes_in_use);
    EXPECT_EQ(entry["peak_bytes"].get<int64_t>(), now.peak_bytes);
    EXPECT_EQ(entry["limit_bytes"].get<int64_t>(), options().device_memory_bytes);
    EXPECT_GE(entry["peak_bytes"].get<int64_t>(), entry["bytes_in_use"].get<int64_t>());
  }
  EXPECT_GE(devices.back()["bytes_in_use"].get<int64_t>(), 1000 * 4);  // `kept` lives there

  // The last sync is the item() above: on the last device, with the input and result in its peak.
  const json& event = report["sync_events"].back();
  EXPECT_EQ(event["cause"], "item");
  EXPECT_EQ(event["device"].get<int>(), device_count() - 1);
  EXPECT_GE(event["arena_bytes"].get<int64_t>(), 0);
  EXPECT_GE(event["peak_bytes"].get<int64_t>(), event["arena_bytes"].get<int64_t>() + 1000 * 4 + 4);
}

TEST(MemoryDiagnostics, TraceHasMemoryCountersPerDevice) {
  LAZYRT_NEEDS_DEVICES(2);
  constexpr int64_t kBytes = 4096 * 4;
  const std::vector<float> values(4096, 3.0F);
  SettleAllDevices();  // nothing on device 1 changes between the transfer's sample and now
  Tensor x = Tensor::FromData(std::span<const float>(values), {4096}, Device{0});
  Tensor moved = (x + 1.0).to(Device{1});  // an execution on device 0, a transfer to device 1
  SettleAllDevices();
  const int64_t moved_in_use = memory_info(Device{1}).bytes_in_use;
  const std::string path = TempPath("memory_trace");
  write_trace(path);
  const json trace = ReadJson(path);
  ASSERT_TRUE(trace.is_object());
  std::set<std::string> counters;
  bool saw_moved = false;
  double last_ts = -1;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "C") continue;
    counters.insert(e["name"].get<std::string>());
    ASSERT_TRUE(e["args"].contains("bytes_in_use")) << e.dump();
    EXPECT_GE(e["args"]["bytes_in_use"].get<int64_t>(), 0);
    EXPECT_GE(e["ts"].get<double>(), 0);
    if (e["name"] == "memory lazy:1") {
      last_ts = std::max(last_ts, e["ts"].get<double>());
      saw_moved = saw_moved || e["args"]["bytes_in_use"].get<int64_t>() == moved_in_use;
    }
  }
  EXPECT_TRUE(counters.count("memory lazy:0")) << "no counter for lazy:0";
  EXPECT_TRUE(counters.count("memory lazy:1")) << "no counter for lazy:1";
  EXPECT_TRUE(saw_moved) << "no lazy:1 sample holds the " << kBytes << " moved bytes (" << moved_in_use << " in use)";
  EXPECT_GT(last_ts, 0);
}

}  // namespace memory_diagnostics_test
}  // namespace lazyrt
