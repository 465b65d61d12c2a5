#include "lazy/devices.h"

#include "lazy/runtime.h"

namespace lazyrt {

int device_count() { return detail::Runtime::Get().num_devices(); }

MemoryInfo memory_info(Device device, SourceLocation loc) {
  const pjrt::MemoryStats stats = detail::Runtime::Get().device_state(device, loc).device->memory_stats();
  return MemoryInfo{.bytes_in_use = stats.bytes_in_use,
                    .peak_bytes = stats.peak_bytes_in_use,
                    .limit_bytes = stats.bytes_limit,
                    .live_allocations = stats.live_allocations};
}

std::vector<MemoryInfo> memory_info(const Mesh& mesh, SourceLocation loc) {
  std::vector<MemoryInfo> infos;
  infos.reserve(mesh.device_ids().size());
  for (int64_t id : mesh.device_ids()) infos.push_back(memory_info(Device{static_cast<int>(id)}, loc));
  return infos;
}

CollectiveInfo collective_info(Device device, SourceLocation loc) {
  const pjrt::CollectiveStats stats = detail::Runtime::Get().device_state(device, loc).device->collective_stats();
  return CollectiveInfo{.calls = stats.calls,
                        .ms = static_cast<double>(stats.nanoseconds) / 1e6,
                        .wait_ms = static_cast<double>(stats.wait_nanoseconds) / 1e6};
}

void reset_peak_memory(Device device, SourceLocation loc) {
  detail::Runtime::Get().device_state(device, loc).device->ResetPeakMemory();
}

}  // namespace lazyrt
