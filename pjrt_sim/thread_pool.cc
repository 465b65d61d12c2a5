#include "pjrt_sim/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

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

namespace {

// Whether this thread is one of a pool's workers (not a caller of ParallelFor).
thread_local bool t_pool_worker = false;

// Moves the calling thread off `cpu`: allowed everywhere else for a moment, then everywhere again. The
// scheduler leaves a pair of threads on one CPU while another is idle for tens of milliseconds (a thread
// that just ran is "cache hot" and not moved); this moves one at once. No privilege needed: a thread
// may narrow its own affinity within what it is allowed. False if it is allowed nowhere else.
bool MoveOffCpu(int cpu) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  cpu_set_t elsewhere = allowed;
  CPU_CLR(cpu, &elsewhere);
  if (CPU_COUNT(&elsewhere) == 0 || sched_setaffinity(0, sizeof(elsewhere), &elsewhere) != 0) return false;
  return sched_setaffinity(0, sizeof(allowed), &allowed) == 0;
}

}  // namespace

bool ThreadPool::AwaitSeparateCpus(std::chrono::microseconds patience) {
  const int64_t threads = size();
  if (threads == 1) return true;
  // A task per thread, each watching (yielding, so that threads sharing a CPU all get to run) until every
  // thread has started and all are on different CPUs at once, or patience runs out. A worker that finds
  // itself on a CPU another thread of the pool is on moves off it (MoveOffCpu); left to the scheduler,
  // the pair stayed on one CPU for all of 20 ms in 3 of 16 fresh processes here.
  const auto deadline = std::chrono::steady_clock::now() + patience;
  std::vector<std::atomic<int>> cpus(static_cast<size_t>(threads));
  for (std::atomic<int>& cpu : cpus) cpu.store(-1);
  std::atomic<bool> separate{false};
  ParallelFor(threads, [&](int64_t t) {
    std::vector<int> seen(static_cast<size_t>(threads));
    while (!separate.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline) {
      const int mine = sched_getcpu();
      cpus[static_cast<size_t>(t)].store(mine, std::memory_order_release);
      bool shared = false, all_started = true;
      for (size_t i = 0; i < seen.size(); ++i) {
        seen[i] = cpus[i].load(std::memory_order_acquire);
        all_started = all_started && seen[i] >= 0;
        shared = shared || (static_cast<int64_t>(i) != t && seen[i] == mine);
      }
      std::sort(seen.begin(), seen.end());
      if (all_started && std::adjacent_find(seen.begin(), seen.end()) == seen.end()) {
        separate.store(true, std::memory_order_release);
      } else if (shared && t_pool_worker && mine >= 0) {
        MoveOffCpu(mine);
        continue;
      }
      std::this_thread::yield();
    }
  });
  return separate.load();
}

void ThreadPool::Work(int thread) {
  t_pool_worker = true;
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
