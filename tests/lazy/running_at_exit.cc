// A program that ends while its device still runs a step on libxsmm's JIT kernels: the runtime's exit
// handler must wait for that work before the libraries' own exit handlers free what it runs (libxsmm's
// frees its JIT code). It exits with 0 when it does; the process crashed before PrepareGemmLibraries.
// It writes the GEMM tuning record the runtime reads (LAZYRT_GEMM_TUNING_FILE) to name libxsmm for the
// step's products, so that the device runs libxsmm's kernels whatever this machine would measure fastest.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lazy/sync.h"
#include "lazy/tensor.h"
#include "pjrt_sim/gemm_tuning.h"

int main() {
  const char* record_path = std::getenv("LAZYRT_GEMM_TUNING_FILE");
  if (record_path == nullptr) {
    std::fprintf(stderr, "set LAZYRT_GEMM_TUNING_FILE to the GEMM tuning record to write\n");
    return 2;
  }
  // Products of 64 x 64 x 64, a shape libxsmm compiles a JIT kernel for, 256 of them per matmul.
  constexpr int64_t kBatch = 256, kSide = 64, kProducts = 24;
  const lazyrt::pjrt::GemmTuningRecord record(record_path);
  if (record.Record({lazyrt::pjrt::PrimitiveType::kF32, kSide, kSide, kSide, false, false},
                    lazyrt::pjrt::GemmLibrary::kLibxsmm) != lazyrt::pjrt::GemmLibrary::kLibxsmm) {
    std::fprintf(stderr, "%s names another library for the product\n", record_path);
    return 2;
  }
  const std::vector<float> ones(static_cast<size_t>(kBatch * kSide * kSide), 1.0f / kSide);
  lazyrt::Tensor x = lazyrt::Tensor::FromData(ones, {kBatch, kSide, kSide});
  const lazyrt::Tensor w = lazyrt::Tensor::FromData(ones, {kBatch, kSide, kSide});
  // 24 dependent matmuls, 3.2 GFLOP: tens of milliseconds on the device, still running at exit.
  for (int i = 0; i < kProducts; ++i) x = lazyrt::matmul(x, w);
  lazyrt::mark_step();  // enqueued; nothing waits for it before main returns
  return 0;
}
