// Intra-kernel parallelism: a fixed pool of workers, one per core, that the calling thread joins.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lazyrt::pjrt {

// The CPUs this process may run on (its affinity mask: taskset, a container's cpuset, a job scheduler's
// binding), not the machine's count, which std::thread::hardware_concurrency reports. A pool sized to
// the machine puts a thread per core of a 64-core host on the 4 CPUs a job was given, and splits every
// kernel 64 ways; on the 2-core benchmark machine under `taskset -c 0` the MLP step's mean went
// 0.819-0.825 -> 0.802-0.807 ms with a pool of one (3 runs each). The machine's count if the mask cannot
// be read.
int UsableCpus();

class ThreadPool {
 public:
  // The process-wide pool, one thread per usable CPU (UsableCpus).
  static ThreadPool& Get();
  explicit ThreadPool(int threads);
  ~ThreadPool();

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs fn(task) for task in [0, tasks), spread over the pool and the caller; returns when all are
  // done. Which thread runs a task never changes its result (tasks own disjoint outputs).
  // Each thread takes its own contiguous range of the tasks in order (the caller the first), then the last
  // tasks of the others' ranges: kernels over the same rows (a product's row panels, a loop's halves, a
  // layer norm's 32 blocks of rows, attention's batch elements) give each thread the same rows, which its
  // core's caches then hold. Taken from one shared counter, the rows went to whichever thread asked first:
  // where the two vCPUs sit on two core complexes, the GPT's f32 step took 76-78 ms instead of 81-83, its
  // bf16 step 60-61 instead of 65-69 (benchmarks/RESULTS.md); on one complex, the same.
  void ParallelFor(int64_t tasks, const std::function<void(int64_t)>& fn);

  // Whether every thread of the pool runs at once, each on a CPU of its own, trying for up to `patience`:
  // a task per thread that waits for all the others to start. A newly made worker can start on its
  // creator's CPU, and the scheduler moves it only once both are busy a while; another process (or a
  // library's spinning thread) can hold the other CPU. Then a kernel split over the pool runs no faster
  // than whole, and timing it says so. Autotuning asks before it times anything.
  bool AwaitSeparateCpus(std::chrono::microseconds patience);

  // How many ParallelFor calls so far handed tasks to the workers (more than one task, with workers).
  uint64_t jobs() const { return generation_.load(std::memory_order_relaxed); }

 private:
  void Work(int thread);
  // The next task for `thread` (0: the caller), or -1 when every task is taken. Under mu_.
  int64_t Claim(int thread);

  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t)>* job_ = nullptr;
  // The tasks of each thread's range not yet taken: [next_[p], end_[p]).
  std::vector<int64_t> next_, end_;
  // Written under mu_; read without it by workers spinning for the next job, and by the caller spinning
  // for the last tasks to end.
  std::atomic<int64_t> running_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
  std::mutex call_mu_;  // one ParallelFor at a time
  std::vector<std::thread> workers_;
};

}  // namespace lazyrt::pjrt
