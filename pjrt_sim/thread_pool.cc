#include "pjrt_sim/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

namespace lazyrt::pjrt {
namespace {

// How long a worker that ran out of tasks watches for the next job before it sleeps. Waking a sleeping
// thread costs 10-60 us on a 2-core VM (a parallel loop of 11 us took 35), and the serial stretches of a
// training step (the loss's small kernels, the step's end and the next one's start) run 70-150 us: with
// a 50 us watch the worker slept through each and started its task of the next parallel kernel 40-60 us
// after the caller. 200 us spans them (the MLP peer's step 1.10 -> 1.00 ms, 4 runs each of 50, 100, 200
// and 400 us; 1 and 3 ms were no better). Bounded, and yielding, so that an idle device still leaves its
// core to the host.
constexpr std::chrono::microseconds kSpin{200};

// Watches for `done()` for up to kSpin with `lock` released, before the caller sleeps on a condition
// variable: the waits of a step are mostly shorter than a sleeping thread's wake. Yielding, not pausing:
// the host thread tracing the next step is often waiting for this core, and a thread that spins in place
// holds it for its time slice (the MLP step ran 6% faster, 1.08 -> 1.02 ms, median of 6 runs of one
// cached executable each way); with nothing else runnable, yield returns at once.
template <typename Done>
void WatchFor(std::unique_lock<std::mutex>& lock, Done done) {
  lock.unlock();
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  lock.lock();
}

}  // namespace

int UsableCpus() {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) return std::max(1, CPU_COUNT(&allowed));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));  // a mask beyond CPU_SETSIZE
}

ThreadPool& ThreadPool::Get() {
  static ThreadPool* pool = new ThreadPool(UsableCpus());
  return *pool;
}

ThreadPool::ThreadPool(int threads)
    : next_(static_cast<size_t>(std::max(1, threads))), end_(static_cast<size_t>(std::max(1, threads))) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { Work(i); });
}

int64_t ThreadPool::Claim(int thread) {
  const size_t own = static_cast<size_t>(thread);
  if (next_[own] < end_[own]) return next_[own]++;
  // From the back of the range with the most left: its owner keeps taking its front in order.
  size_t victim = own;
  for (size_t p = 0; p < next_.size(); ++p) {
    if (end_[p] - next_[p] > end_[victim] - next_[victim]) victim = p;
  }
  return next_[victim] < end_[victim] ? --end_[victim] : -1;
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::ParallelFor(int64_t tasks, const std::function<void(int64_t)>& fn) {
  if (tasks <= 0) return;
  if (tasks == 1 || workers_.empty()) {
    for (int64_t t = 0; t < tasks; ++t) fn(t);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  const int64_t threads = size();
  for (int64_t p = 0; p < threads; ++p) {
    next_[static_cast<size_t>(p)] = tasks * p / threads;
    end_[static_cast<size_t>(p)] = tasks * (p + 1) / threads;
  }
  running_ = 0;
  ++generation_;
  wake_.notify_all();
  for (int64_t t; (t = Claim(0)) >= 0;) {
    ++running_;
    lock.unlock();
    fn(t);
    lock.lock();
    --running_;
  }
  // Tasks still running on workers: a caller asleep here woke 10-30 us after the last one ended, once
  // per parallel kernel (MLP step 1.04 -> 0.86 ms with the watch).
  if (running_ > 0) WatchFor(lock, [this] { return running_.load(std::memory_order_acquire) == 0; });
  done_.wait(lock, [this] { return running_ == 0; });
  job_ = nullptr;
}

void ThreadPool::Work(int thread) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (generation_.load(std::memory_order_relaxed) == seen && !stopping_.load(std::memory_order_relaxed)) {
      WatchFor(lock, [&] {
        return generation_.load(std::memory_order_acquire) != seen || stopping_.load(std::memory_order_acquire);
      });
    }
    wake_.wait(lock, [&] { return stopping_ || (generation_ != seen && job_ != nullptr); });
    if (stopping_) return;
    seen = generation_;
    for (int64_t t; job_ != nullptr && (t = Claim(thread)) >= 0;) {
      ++running_;
      const std::function<void(int64_t)>* job = job_;
      lock.unlock();
      (*job)(t);
      lock.lock();
      if (--running_ == 0) done_.notify_all();  // the caller waits for it once no task is left to take
    }
  }
}

}  // namespace lazyrt::pjrt
