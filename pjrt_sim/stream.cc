#include "pjrt_sim/stream.h"

#include <chrono>
#include <utility>

namespace lazyrt::pjrt {

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Stream::Enqueue(std::function<void()> work) { Submit(/*inline_if_idle=*/false, std::move(work)); }

void Stream::Submit(bool inline_if_idle, std::function<void()> work) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!inline_if_idle || running_work_ || !queue_.empty()) {
    queue_.push_back(std::move(work));
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    const bool wakes = std::exchange(sleeping_, false);  // a second hand-off before it runs wakes nothing
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    work_ready_.notify_one();
    if (wakes) {
      RecordWake(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
    }
    return;
  }
  running_work_ = true;  // the stream thread leaves the queue alone meanwhile
  lock.unlock();
  work();
  work = nullptr;  // release captured buffers before reporting idle
  lock.lock();
  running_work_ = false;
  if (!queue_.empty() || stopping_) work_ready_.notify_one();
  if (queue_.empty()) idle_.notify_all();
}

void Stream::RecordWake(int64_t ns) {
  if (ns < 0 || ns > kMaxWakeNs) return;
  // The update may race with another submitter's and lose a sample, which an average can afford.
  const int64_t old = wake_ns_.load(std::memory_order_relaxed);
  wake_ns_.store((7 * old + ns) / 8, std::memory_order_relaxed);
}

void Stream::Synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && !running_work_; });
}

void Stream::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    sleeping_ = true;
    work_ready_.wait(lock, [this] { return !running_work_ && (stopping_ || !queue_.empty()); });
    sleeping_ = false;
    if (queue_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    running_work_ = true;
    lock.unlock();
    work();
    work = nullptr;  // release captured buffers before reporting idle
    lock.lock();
    running_work_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace lazyrt::pjrt
