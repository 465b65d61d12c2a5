// Intra-kernel parallelism: a fixed pool of workers, one per core, that the calling thread joins.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lazyrt::pjrt {

class ThreadPool {
 public:
  // The process-wide pool, sized to the machine's cores.
  static ThreadPool& Get();
  explicit ThreadPool(int threads);
  ~ThreadPool();

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs fn(task) for task in [0, tasks), spread over the pool and the caller; returns when all are
  // done. Which thread runs a task never changes its result (tasks own disjoint outputs).
  void ParallelFor(int64_t tasks, const std::function<void(int64_t)>& fn);

 private:
  void Work();

  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t next_ = 0, tasks_ = 0;
  // Written under mu_; read without it by workers spinning for the next job, and by the caller spinning
  // for the last tasks to end.
  std::atomic<int64_t> running_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
  std::mutex call_mu_;  // one ParallelFor at a time
  std::vector<std::thread> workers_;
};

}  // namespace lazyrt::pjrt
