// BLIS, OpenBLAS or Eigen for the device's GEMM? All three, single-threaded as the device runs them, on the
// shapes of the flagship MLP step (forward, and the two products of each backward), row-major f32.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <Eigen/Core>
#include <random>
#include <vector>
#include "pjrt_sim/kernels/gemm.h"  // BLIS, exactly as the device calls it

namespace {

struct Gemm {
  int m, n, k;
  bool ta, tb;  // A is [k, m] / B is [n, k] in memory
};

// The MLP 784-256-128-10 at batch 128: x W^T, g W, x^T g for each layer.
const Gemm kShapes[] = {
    {128, 256, 784, false, true},  {128, 128, 256, false, true}, {128, 10, 128, false, true},
    {128, 784, 256, false, false}, {784, 256, 128, true, false}, {256, 128, 128, true, false},
    {128, 10, 128, true, false},
};

std::vector<float> Random(size_t n) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void Counters(benchmark::State& state, const Gemm& g) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * g.m * g.n * g.k * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}

void BM_OpenBlas(benchmark::State& state) {
  openblas_set_num_threads(1);
  const Gemm g = kShapes[state.range(0)];
  std::vector<float> a = Random(static_cast<size_t>(g.m) * g.k), b = Random(static_cast<size_t>(g.k) * g.n),
                     c(static_cast<size_t>(g.m) * g.n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 1.0f,
                a.data(), g.ta ? g.m : g.k, b.data(), g.tb ? g.k : g.n, 0.0f, c.data(), g.n);
    benchmark::DoNotOptimize(c.data());
  }
  Counters(state, g);
}

void BM_Blis(benchmark::State& state) {
  const Gemm g = kShapes[state.range(0)];
  std::vector<float> a = Random(static_cast<size_t>(g.m) * g.k), b = Random(static_cast<size_t>(g.k) * g.n),
                     c(static_cast<size_t>(g.m) * g.n);
  const lazyrt::pjrt::MatrixView<const float> av{a.data(), g.ta ? 1 : g.k, g.ta ? g.m : 1},
      bv{b.data(), g.tb ? 1 : g.n, g.tb ? g.k : 1};
  for (auto _ : state) {
    lazyrt::pjrt::Gemm(lazyrt::pjrt::GemmLibrary::kBlis, g.m, g.n, g.k, av, bv,
                       lazyrt::pjrt::MatrixView<float>{c.data(), g.n, 1});
    benchmark::DoNotOptimize(c.data());
  }
  Counters(state, g);
}

void BM_Eigen(benchmark::State& state) {
  Eigen::setNbThreads(1);
  const Gemm g = kShapes[state.range(0)];
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  std::vector<float> a = Random(static_cast<size_t>(g.m) * g.k), b = Random(static_cast<size_t>(g.k) * g.n);
  Eigen::Map<const Matrix> A(a.data(), g.ta ? g.k : g.m, g.ta ? g.m : g.k);
  Eigen::Map<const Matrix> B(b.data(), g.tb ? g.n : g.k, g.tb ? g.k : g.n);
  Matrix C(g.m, g.n);
  for (auto _ : state) {
    if (g.ta) {
      C.noalias() = A.transpose() * B;
    } else if (g.tb) {
      C.noalias() = A * B.transpose();
    } else {
      C.noalias() = A * B;
    }
    benchmark::DoNotOptimize(C.data());
  }
  Counters(state, g);
}

BENCHMARK(BM_Blis)->DenseRange(0, 6);
BENCHMARK(BM_OpenBlas)->DenseRange(0, 6);
BENCHMARK(BM_Eigen)->DenseRange(0, 6);

}  // namespace

BENCHMARK_MAIN();
