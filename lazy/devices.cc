#include "lazy/devices.h"

#include "lazy/distributed_internal.h"
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

namespace {

// `info` of each device of `mesh` in this process, in the mesh's device order (another process's are skipped).
template <typename Info>
std::vector<Info> OfLocalDevices(const Mesh& mesh, Info (*info)(Device, SourceLocation), SourceLocation loc) {
  std::vector<Info> infos;
  infos.reserve(mesh.device_ids().size());
  detail::Runtime& rt = detail::Runtime::Get();
  for (int64_t id : mesh.device_ids()) {
    if (const pjrt::Device* device = detail::LocalDevice(rt, id)) infos.push_back(info(Device{device->id()}, loc));
  }
  return infos;
}

}  // namespace

std::vector<MemoryInfo> memory_info(const Mesh& mesh, SourceLocation loc) {
  return OfLocalDevices<MemoryInfo>(mesh, &memory_info, loc);
}

CollectiveInfo collective_info(Device device, SourceLocation loc) {
  const pjrt::CollectiveStats stats = detail::Runtime::Get().device_state(device, loc).device->collective_stats();
  return CollectiveInfo{.calls = stats.calls,
                        .ms = static_cast<double>(stats.nanoseconds) / 1e6,
                        .wait_ms = static_cast<double>(stats.wait_nanoseconds) / 1e6};
}

std::vector<CollectiveInfo> collective_info(const Mesh& mesh, SourceLocation loc) {
  return OfLocalDevices<CollectiveInfo>(mesh, &collective_info, loc);
}

void reset_peak_memory(Device device, SourceLocation loc) {
  detail::Runtime::Get().device_state(device, loc).device->ResetPeakMemory();
}

}  // namespace lazyrt
