// The device owns the process's compute threads: no library it links may start threads of its own when
// it is loaded. OpenBLAS's pthread build did (a server thread per extra core, started before main, each
// spinning for ~0.1 s), and the first compiles were autotuned with one of two cores taken: a product split
// over the device's two threads ran no faster than whole, and was kept serial (x W^T on 128x784x256 ran
// 266 us a call for the rest of the process instead of 137). This program counts its threads before it
// does anything, then runs a product through each GEMM library, so that each is linked and loaded.
#include <dirent.h>

#include <cstdio>
#include <string>
#include <vector>

#include "pjrt_sim/kernels/gemm.h"

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
                 "no_threads_before_main: %d threads before main ran anything (want 1: a linked library "
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
      std::fprintf(stderr, "no_threads_before_main: %s computed a wrong product\n",
                   std::string(lazyrt::pjrt::GemmLibraryName(library)).c_str());
      return 1;
    }
  }
  std::printf("no_threads_before_main: 1 thread at start; BLIS, OpenBLAS and oneDNN linked\n");
  return 0;
}
