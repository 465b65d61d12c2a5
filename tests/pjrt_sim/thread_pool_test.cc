#include "pjrt_sim/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace lazyrt::pjrt {
namespace {

TEST(ThreadPoolTest, EveryTaskRunsOnceWhateverTheCountsOfTasksAndThreads) {
  for (int threads = 1; threads <= 4; ++threads) {
    ThreadPool pool(threads);
    for (int64_t tasks = 0; tasks <= 70; ++tasks) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
      pool.ParallelFor(tasks, [&](int64_t t) { runs[static_cast<size_t>(t)].fetch_add(1); });
      for (int64_t t = 0; t < tasks; ++t) {
        ASSERT_EQ(runs[static_cast<size_t>(t)].load(), 1)
            << "task " << t << " of " << tasks << ", " << threads << " threads";
      }
    }
  }
}

TEST(ThreadPoolTest, EachThreadStartsAtTheFrontOfItsOwnRange) {
  // The caller takes the first half in order, the worker the second: kernels over the same rows give each
  // thread the same rows. The caller's first task waits for the worker's first (at most 30 s), so the
  // caller cannot have taken any of the worker's range before it.
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mu;
  std::vector<std::pair<int64_t, bool>> order;  // (task, run by the caller)
  std::atomic<bool> worker_started{false};
  pool.ParallelFor(16, [&](int64_t t) {
    const bool by_caller = std::this_thread::get_id() == caller;
    {
      std::lock_guard<std::mutex> lock(mu);
      order.emplace_back(t, by_caller);
    }
    if (!by_caller) worker_started = true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (t == 0 && !worker_started && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  });
  ASSERT_EQ(order.size(), 16u);
  // Which thread records first is a race (the worker may start task 8 before the caller records task 0);
  // who ran which task is not.
  const auto first = std::find_if(order.begin(), order.end(), [](const auto& entry) { return entry.first == 0; });
  ASSERT_NE(first, order.end());
  EXPECT_TRUE(first->second) << "the caller takes the first task";
  std::vector<int64_t> callers_own, workers;
  for (const auto& [t, by_caller] : order) {
    if (by_caller && t < 8) callers_own.push_back(t);
    if (!by_caller) workers.push_back(t);
  }
  ASSERT_FALSE(workers.empty()) << "the worker never ran";
  EXPECT_EQ(workers.front(), 8) << "the worker's range starts at task 8";
  EXPECT_TRUE(std::is_sorted(callers_own.begin(), callers_own.end())) << "the caller takes its range in order";
}

// The CPUs this thread may run on, and a mask of one of them.
cpu_set_t AllowedCpus() {
  cpu_set_t allowed;
  EXPECT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  return allowed;
}
cpu_set_t OnlyCpu(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return one;
}
int FirstCpu(const cpu_set_t& set) {
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) return cpu;
  }
  return -1;
}

TEST(ThreadPoolTest, ThreadsAllowedOneCpuAreFoundSharingIt) {
  // Two threads confined to one CPU (the worker inherits its creator's mask) cannot be apart: the answer
  // is no, within the patience.
  const cpu_set_t allowed = AllowedCpus();
  const cpu_set_t one = OnlyCpu(FirstCpu(allowed));
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  {
    ThreadPool pool(2);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(pool.AwaitSeparateCpus(std::chrono::milliseconds(5)));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "it waited far past its patience";
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(allowed), &allowed), 0);
}

TEST(ThreadPoolTest, AWorkerOnItsCallersCpuIsMovedToAnother) {
  // The worker and the caller put on one CPU, each then allowed every CPU again (the state of a new
  // worker started on its creator's CPU): the pool finds them apart, the worker moved off (the scheduler
  // alone kept such a pair together for 20 ms and more).
  const cpu_set_t allowed = AllowedCpus();
  if (CPU_COUNT(&allowed) < 2) GTEST_SKIP() << "needs two CPUs";
  const cpu_set_t one = OnlyCpu(FirstCpu(allowed));
  ThreadPool pool(2);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  std::atomic<int> worker_cpu{-1};
  // Task 1 is the worker's: the caller's task 0 waits for it to start (at most 30 s), and so cannot take it.
  pool.ParallelFor(2, [&](int64_t t) {
    if (t == 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (worker_cpu.load() < 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      return;
    }
    cpu_set_t pin = one;
    sched_setaffinity(0, sizeof(pin), &pin);
    worker_cpu = sched_getcpu();
    cpu_set_t all = allowed;
    sched_setaffinity(0, sizeof(all), &all);
  });
  ASSERT_EQ(sched_setaffinity(0, sizeof(allowed), &allowed), 0);
  EXPECT_EQ(worker_cpu.load(), FirstCpu(allowed));
  EXPECT_TRUE(pool.AwaitSeparateCpus(std::chrono::seconds(10)));
  // The move narrowed the worker's affinity only for a moment: it may run on every CPU again.
  std::atomic<bool> checked{false}, worker_allowed_everywhere{false};
  pool.ParallelFor(2, [&](int64_t t) {
    if (t == 0) {  // waits for the worker's task, as above
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!checked && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      return;
    }
    cpu_set_t mask;
    worker_allowed_everywhere = sched_getaffinity(0, sizeof(mask), &mask) == 0 && CPU_EQUAL(&mask, &allowed);
    checked = true;
  });
  EXPECT_TRUE(worker_allowed_everywhere.load()) << "the worker was left confined";
}

}  // namespace
}  // namespace lazyrt::pjrt
