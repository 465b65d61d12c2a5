// How the simulated devices share the host's cores (issue 19): each device runs its work in order on one
// stream thread of its own, every kernel's parallel loops run on one process-wide pool sized to the cores,
// and a partition that reaches a collective first sleeps there. So a mesh of 8 devices on a 2-core machine
// adds 8 mostly sleeping threads, not 8 pools. Runs with LAZYRT_DEVICES=8 (ctest -R lazy_eight_devices) and
// skips with fewer devices.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "lazy/devices.h"
#include "lazy/sharding.h"
#include "pjrt_sim/thread_pool.h"
#include "tests/lazy/data_parallel_mlp.h"
#include "tests/lazy/device_test_util.h"

namespace lazyrt {
namespace device_threads_test {

using testing::TrainMlp;

// The "Threads:" line of /proc/self/status: the threads of this process now.
int ThreadsNow() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST(DeviceThreads, EightDevicesRunOnAStreamEachAndOneSharedKernelPool) {
  LAZYRT_NEEDS_DEVICES(8);
  // The threads before this test: the main thread (and a sanitizer's own, or those of earlier tests).
  const int before = ThreadsNow();
  const std::vector<double> one_device = TrainMlp(nullptr, 3);
  const Mesh mesh({8}, {"data"});
  const std::vector<double> data_parallel = TrainMlp(&mesh, 3);
  ASSERT_EQ(data_parallel.size(), one_device.size());
  // Equal up to the order of the f32 sums (8 partial sums all-reduced instead of one sum).
  for (size_t s = 0; s < one_device.size(); ++s) EXPECT_NEAR(data_parallel[s], one_device[s], 1e-5 * one_device[0]);
  for (int64_t d : mesh.device_ids()) EXPECT_GT(collective_info(Device{static_cast<int>(d)}).calls, 0) << d;

  // At most one stream per device, the kernel pool's workers (the calling stream thread is its last member)
  // and the runtime's releaser of finished graphs besides those: nothing grows with the mesh but the streams.
  const int cores = pjrt::UsableCpus();
  const int bound = before + device_count() + (cores - 1) + 1;
  const int threads = ThreadsNow();
  RecordProperty("threads", threads);
  RecordProperty("thread_bound", bound);
  EXPECT_GT(threads, device_count());  // the streams did start
  EXPECT_LE(threads, bound) << "devices " << device_count() << ", cores " << cores;
}

}  // namespace device_threads_test
}  // namespace lazyrt
