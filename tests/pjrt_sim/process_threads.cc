// The device owns the process's compute threads.
// 1. No library it links may start threads of its own when it is loaded. OpenBLAS's pthread build did (a server thread
// per extra core, started before main, each spinning for ~0.1 s), and the first compiles were autotuned with one of two
// cores taken: a product split over the device's two threads ran no faster than whole, and was kept serial (x W^T on
// 128x784x256 ran 266 us a call for the rest of the process instead of 137). This program counts its threads before it
// does anything, then runs a product through each GEMM library, so that each is linked and loaded.
// 2. Its pool has a thread per CPU the process may use, not per CPU of the machine: the program then
// allows itself one CPU, before the pool exists, and expects a pool of one.
#include <dirent.h>
#include <sched.h>

#include <cstdio>
#include <string>
#include <vector>

#include "pjrt_sim/kernels/gemm.h"
#include "pjrt_sim/thread_pool.h"

namespace {

int ThreadsOfThisProcess() {
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = readdir(tasks)) count += entry->d_name[0] != '.';
  closedir(tasks);
  return count;
}

}  // namespace

int main() {
  const int threads = ThreadsOfThisProcess();
  if (threads != 1) {
    std::fprintf(stderr,
                 "process_threads: %d threads before main ran anything (want 1: a linked library "
                 "starts threads when it is loaded)\n",
                 threads);
    return 1;
  }
  // A 2x2 product through each library: [1 2; 3 4] [5 6; 7 8] = [19 22; 43 50].
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  for (lazyrt::pjrt::GemmLibrary library : lazyrt::pjrt::kGemmLibraries) {
    std::vector<float> c(4);
    lazyrt::pjrt::Gemm(library, 2, 2, 2, {a.data(), 2, 1}, {b.data(), 2, 1}, {c.data(), 2, 1});
    if (c != std::vector<float>{19, 22, 43, 50}) {
      std::fprintf(stderr, "process_threads: %s computed a wrong product\n",
                   std::string(lazyrt::pjrt::GemmLibraryName(library)).c_str());
      return 1;
    }
  }
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    std::perror("process_threads: sched_getaffinity");
    return 1;
  }
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  if (sched_setaffinity(0, sizeof(one), &one) != 0) {
    std::perror("process_threads: sched_setaffinity");
    return 1;
  }
  if (lazyrt::pjrt::UsableCpus() != 1 || lazyrt::pjrt::ThreadPool::Get().size() != 1) {
    std::fprintf(stderr, "process_threads: allowed one CPU, the pool has %d threads (UsableCpus %d)\n",
                 lazyrt::pjrt::ThreadPool::Get().size(), lazyrt::pjrt::UsableCpus());
    return 1;
  }
  std::printf("process_threads: 1 thread at start; BLIS, OpenBLAS and oneDNN linked; a pool of 1 on 1 CPU\n");
  return 0;
}
