// The device's pool has a thread per CPU the process may use, not per CPU of the machine (UsableCpus):
// this program allows itself one CPU before the pool exists (the pool is made once a process, so this is
// a program of its own, not a test in a binary whose other tests made it already) and expects a pool of one.
#include <sched.h>

#include <cstdio>

#include "pjrt_sim/thread_pool.h"

int main() {
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
  std::printf("process_threads: allowed one CPU, a pool of 1\n");
  return 0;
}
