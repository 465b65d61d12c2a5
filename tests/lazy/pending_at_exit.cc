// A program that leaves a traced computation pending when it ends: the runtime's exit handler must
// sync it (cause `exit`), so its work runs and is recorded like any other; the exit sync is checked in
// the run report (tests/scripts/exit_sync.cmake).
#include <cstdio>

#include "lazy/tensor.h"

namespace {
// In static storage: alive after main returns, when the exit handler runs.
lazyrt::Tensor g_pending;
}  // namespace

int main() {
  const lazyrt::Tensor x = lazyrt::Tensor::FromData(std::vector<float>{1, 2, 3}, {3});
  // Compile and run a graph on this thread first (autotuning runs kernels here), so that the kernels'
  // thread-local scratch exists, and is destroyed with this thread's other thread_locals before the
  // exit handler runs: the exit sync must not use it.
  std::printf("sum %g\n", lazyrt::sum(lazyrt::exp(x) * 3.0).item());
  g_pending = lazyrt::sum(lazyrt::tanh(x * 2.0 + 1.0));  // traced, never synced
  return 0;
}
