// The runtime's devices: how many there are, and how much memory each holds at any time in a running
// program (PyTorch's torch.cuda.device_count and memory_stats, torch_xla's xm.get_memory_info).
#pragma once

#include <cstdint>
#include <vector>

#include "lazy/sharding.h"
#include "lazy/tensor.h"

namespace lazyrt {

// The devices lazy:0 to lazy:device_count() - 1 (LAZYRT_DEVICES or Options::devices).
int device_count();

// The memory of one physical device. Buffers count from when they are allocated (a graph's results
// and its arena at launch, a transfer's destination at to()) until the last tensor, graph or work in
// flight holding them lets go (wait_device() waits for the device and for graphs being released). The
// arenas of the graphs queued on a device count as the largest of them: it runs one at a time.
struct MemoryInfo {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes = 0;   // the most bytes in use at once since the device was created or the last reset
  int64_t limit_bytes = 0;  // the capacity (LAZYRT_DEVICE_MEMORY or Options::device_memory_bytes)
  int64_t live_allocations = 0;
};

// The memory of `device`; an unknown device is an error naming the valid ones.
MemoryInfo memory_info(Device device = {}, LAZYRT_HERE);
// The memory of each physical device of `mesh` in this process, in the mesh's device order: under SPMD every device
// holds its own shards and arenas, so a job sees each chip's limit, not one virtual device's.
std::vector<MemoryInfo> memory_info(const Mesh& mesh, LAZYRT_HERE);
// The time one physical device spent inside collectives (all-reduce, all-gather, ...) since it was created:
// each call from its start to its return, moving and combining bytes and waiting at the rendezvous for
// the mesh's other devices (a partition that arrives first sleeps there, leaving its core to the others).
// Sampled before and after some steps, the difference per step is the collective share of a step.
struct CollectiveInfo {
  int64_t calls = 0;
  double ms = 0;
  double wait_ms = 0;  // of which waiting at the rendezvous for the other devices to arrive
};
CollectiveInfo collective_info(Device device = {}, LAZYRT_HERE);
// The same for each physical device of `mesh` in this process, in the mesh's device order.
std::vector<CollectiveInfo> collective_info(const Mesh& mesh, LAZYRT_HERE);

// Starts a new peak on `device`: peak_bytes becomes bytes_in_use, to measure one phase of a program.
void reset_peak_memory(Device device = {}, LAZYRT_HERE);

}  // namespace lazyrt
