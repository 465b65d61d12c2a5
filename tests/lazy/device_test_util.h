// Helpers of the multi-device tests: they run with LAZYRT_DEVICES=3 (a ctest entry of their own,
// tests/CMakeLists.txt) and skip in a runtime with fewer devices.
#pragma once

#include <future>

#include <gtest/gtest.h>

#include "lazy/devices.h"
#include "lazy/options.h"
#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace lazyrt::testing {

#define LAZYRT_NEEDS_DEVICES(n)       \
  if (::lazyrt::device_count() < (n)) \
  GTEST_SKIP() << "needs " << (n) << " devices (LAZYRT_DEVICES=3 runs it: ctest -R lazy_devices)"

// Holds a device's stream busy until opened (or destroyed): work queued behind it has not run, so a
// test can see that something was queued rather than done, without timing anything.
class StreamGate {
 public:
  explicit StreamGate(Device device) {
    std::shared_future<void> opened = open_.get_future().share();
    detail::Runtime::Get().device_state(device, SourceLocation::current()).device->stream().Enqueue([opened] {
      opened.wait();
    });
  }
  ~StreamGate() { Open(); }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  void Open() {
    if (!opened_) open_.set_value();
    opened_ = true;
  }

 private:
  std::promise<void> open_;
  bool opened_ = false;
};

// Waits for every device's work and for graphs being released: memory counts are then settled.
inline void SettleAllDevices() {
  for (int d = 0; d < device_count(); ++d) wait_device(Device{d});
}

}  // namespace lazyrt::testing
