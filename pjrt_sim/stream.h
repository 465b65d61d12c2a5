// An in-order work queue served by one thread, like a device stream: work enqueued from the host
// runs later, in order, while the host goes on tracing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace lazyrt::pjrt {

class Stream {
 public:
  Stream() = default;
  // Runs the work already enqueued, then stops the thread.
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Queues `work`; the stream thread starts on first use.
  void Enqueue(std::function<void()> work);
  // With `inline_if_idle` and nothing queued or running, runs `work` on the calling thread before
  // returning (work enqueued meanwhile waits for it); otherwise queues it like Enqueue.
  void Submit(bool inline_if_idle, std::function<void()> work);
  // Blocks until everything enqueued so far has run.
  void Synchronize();
  // What handing work to the sleeping stream thread costs the caller, in nanoseconds: measured on every
  // such hand-off (a moving average). A wake-up is a system call and, under a hypervisor, an
  // inter-processor interrupt: ~2 us on bare metal, 6-15 us on the project's 2-core VMs. Work cheaper
  // than this is better run inline (Submit).
  int64_t wake_ns() const { return wake_ns_.load(std::memory_order_relaxed); }
  // A longer hand-off is not counted: its caller was descheduled midway, or (with every core busy) waited
  // while the woken thread ran the work on its core. Work estimated above this never runs inline.
  static constexpr int64_t kMaxWakeNs = 50'000;

 private:
  void Loop();
  void RecordWake(int64_t ns);

  std::mutex mu_;
  std::condition_variable work_ready_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> queue_;
  bool running_work_ = false;  // by the stream thread or inline on a caller's
  bool stopping_ = false;
  bool sleeping_ = false;  // the stream thread waits for work: queuing some wakes it
  std::thread thread_;
  // Until measured: a bare-metal wake-up.
  std::atomic<int64_t> wake_ns_{2000};
};

}  // namespace lazyrt::pjrt
