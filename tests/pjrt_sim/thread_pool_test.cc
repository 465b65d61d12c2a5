#include "pjrt_sim/thread_pool.h"

#include <gtest/gtest.h>

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
  EXPECT_EQ(order[0], std::make_pair(int64_t{0}, true)) << "the caller takes the first task";
  std::vector<int64_t> callers_own, workers;
  for (const auto& [t, by_caller] : order) {
    if (by_caller && t < 8) callers_own.push_back(t);
    if (!by_caller) workers.push_back(t);
  }
  ASSERT_FALSE(workers.empty()) << "the worker never ran";
  EXPECT_EQ(workers.front(), 8) << "the worker's range starts at task 8";
  EXPECT_TRUE(std::is_sorted(callers_own.begin(), callers_own.end())) << "the caller takes its range in order";
}

}  // namespace
}  // namespace lazyrt::pjrt
