// An in-order work queue served by one thread, like a device stream: work enqueued from the host
// runs later, in order, while the host goes on tracing.
#pragma once

#include <condition_variable>
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

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable work_ready_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> queue_;
  bool running_work_ = false;  // by the stream thread or inline on a caller's
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace lazyrt::pjrt
