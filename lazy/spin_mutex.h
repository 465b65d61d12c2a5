// A mutex for critical sections of a few instructions that are almost never contended: the live-tensor
// registry, which every traced op enters twice (once to register its result, once when that tensor dies).
// An uncontended std::mutex costs ~13 ns a lock/unlock pair on the machines of benchmarks/RESULTS.md (a
// call into libc and two atomic read-modify-writes); this costs one exchange and one release store, ~6 ns.
// A waiter yields instead of sleeping in the kernel, so it is wrong for long critical sections.
#pragma once

#include <atomic>
#include <thread>

namespace lazyrt::detail {

class SpinMutex {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      // Wait on a plain load (no cache-line ping-pong from repeated exchanges); give the holder the core.
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace lazyrt::detail
