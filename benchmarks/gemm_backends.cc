// BLIS, OpenBLAS, oneDNN (BLAS interface or matmul primitive), libxsmm or Eigen for the device's GEMM? Each
// single-threaded as the device calls it, on the shapes of the flagship MLP step and of the default GPT step (forward,
// and the two products of each backward) and of fused attention's block products, row-major f32. Then the whole DOT
// kernel as the device runs it (the product split into panels over the device's pool), and oneDNN with its own OpenMP
// team over the whole product instead: the two ways to put both cores on one product.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <dnnl.h>

#include <Eigen/Core>
#include <random>
#include <vector>

#include "pjrt_sim/kernels/gemm.h"  // BLIS and oneDNN, exactly as the device calls them
#include "pjrt_sim/kernels/kernels.h"
#include "pjrt_sim/thread_pool.h"

extern "C" void omp_set_num_threads(int num_threads);

namespace {

using lazyrt::pjrt::GemmLibrary;
using lazyrt::pjrt::MatrixView;

struct Gemm {
  int m, n, k;
  bool ta, tb;  // A is [k, m] / B is [n, k] in memory
};

const Gemm kShapes[] = {
    // The MLP 784-256-128-10 at batch 128: x W^T, g W, x^T g for each layer (0-6).
    {128, 256, 784, false, true},
    {128, 128, 256, false, true},
    {128, 10, 128, false, true},
    {128, 784, 256, false, false},
    {784, 256, 128, true, false},
    {256, 128, 128, true, false},
    {128, 10, 128, true, false},
    // The default GPT (d_model 128, 4096 tokens a step): x W^T for qkv, the MLP's up and down (7-9),
    // g W for the same (10-12), and the weight gradients g^T x (13-15).
    {4096, 384, 128, false, true},
    {4096, 512, 128, false, true},
    {4096, 128, 512, false, true},
    {4096, 128, 384, false, false},
    {4096, 128, 512, false, false},
    {4096, 512, 128, false, false},
    {384, 128, 4096, true, false},
    {512, 128, 4096, true, false},
    {128, 512, 4096, true, false},
    // Fused attention's block products at the GPT's heads (E 32, 128 tokens, blocks of 64 keys), each made
    // thousands of times a step (16-20): the forward's scores q k^T and p v of its second block of queries,
    // the backward's scores of its first block of keys, its dV = P^T dO (and dK = dS^T Q), dQ = dS K.
    {64, 128, 32, false, true},
    {64, 32, 128, false, false},
    {128, 64, 32, false, true},
    {64, 32, 128, true, false},
    {128, 32, 64, false, false},
};
constexpr int kLastShape = static_cast<int>(std::size(kShapes)) - 1;

std::vector<float> Random(size_t n) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

struct Operands {
  explicit Operands(const Gemm& g)
      : a(Random(static_cast<size_t>(g.m) * g.k)),
        b(Random(static_cast<size_t>(g.k) * g.n)),
        c(static_cast<size_t>(g.m) * g.n),
        av{a.data(), g.ta ? 1 : g.k, g.ta ? g.m : 1},
        bv{b.data(), g.tb ? 1 : g.n, g.tb ? g.k : 1} {}
  std::vector<float> a, b, c;
  MatrixView<const float> av, bv;
};

void Counters(benchmark::State& state, const Gemm& g) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * g.m * g.n * g.k * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}

void BM_OpenBlas(benchmark::State& state) {
  openblas_set_num_threads(1);
  const Gemm g = kShapes[state.range(0)];
  Operands o(g);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 1.0f,
                o.a.data(), g.ta ? g.m : g.k, o.b.data(), g.tb ? g.k : g.n, 0.0f, o.c.data(), g.n);
    benchmark::DoNotOptimize(o.c.data());
  }
  Counters(state, g);
}

template <GemmLibrary kLibrary>
void BM_Library(benchmark::State& state) {
  const Gemm g = kShapes[state.range(0)];
  Operands o(g);
  for (auto _ : state) {
    lazyrt::pjrt::Gemm(kLibrary, g.m, g.n, g.k, o.av, o.bv, MatrixView<float>{o.c.data(), g.n, 1});
    benchmark::DoNotOptimize(o.c.data());
  }
  Counters(state, g);
}

// oneDNN's own OpenMP team (range(1) threads) over the whole product, from this thread.
void BM_OneDnnTeam(benchmark::State& state) {
  const Gemm g = kShapes[state.range(0)];
  Operands o(g);
  omp_set_num_threads(static_cast<int>(state.range(1)));
  for (auto _ : state) {
    dnnl_sgemm(g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.m, g.n, g.k, 1.0f, o.a.data(), g.ta ? g.m : g.k, o.b.data(),
               g.tb ? g.k : g.n, 0.0f, o.c.data(), g.n);
    benchmark::DoNotOptimize(o.c.data());
  }
  omp_set_num_threads(1);
  Counters(state, g);
}

// The device's DOT kernel on range(1)'s library, split as range(2) says (serial, column or row panels).
void BM_DotKernel(benchmark::State& state) {
  const Gemm g = kShapes[state.range(0)];
  Operands o(g);
  lazyrt::pjrt::proto::Kernel kernel;
  kernel.set_kind(lazyrt::pjrt::proto::Kernel::DOT);
  kernel.set_batch(1);
  kernel.set_m(g.m);
  kernel.set_n(g.n);
  kernel.set_k(g.k);
  kernel.set_transpose_lhs(g.ta);
  kernel.set_transpose_rhs(g.tb);
  kernel.set_variant(state.range(2));
  kernel.set_gemm_library(static_cast<int32_t>(state.range(1)));
  using lazyrt::pjrt::ArrayShape;
  using lazyrt::pjrt::PrimitiveType;
  const std::vector<ArrayShape> inputs = {{PrimitiveType::kF32, {g.m * g.k}}, {PrimitiveType::kF32, {g.k * g.n}}};
  auto built = lazyrt::pjrt::BuildKernel(kernel, inputs, ArrayShape{PrimitiveType::kF32, {1, g.m, g.n}});
  if (!built.ok()) {
    state.SkipWithError(std::string(built.status().message()).c_str());
    return;
  }
  const void* in[] = {o.a.data(), o.b.data()};
  void* out[] = {o.c.data()};
  for (auto _ : state) {
    (*built)->Run(in, out).IgnoreError();
    benchmark::DoNotOptimize(o.c.data());
  }
  Counters(state, g);
}

void DotArgs(benchmark::internal::Benchmark* b) {
  for (int shape = 0; shape <= kLastShape; ++shape) {
    for (GemmLibrary library : lazyrt::pjrt::kGemmLibraries) {
      for (int64_t variant : {lazyrt::pjrt::kDotSerial, lazyrt::pjrt::kDotColumnPanels, lazyrt::pjrt::kDotRowPanels}) {
        b->Args({shape, static_cast<int64_t>(library), variant});
      }
    }
  }
}

BENCHMARK(BM_Library<GemmLibrary::kBlis>)->Name("BM_Blis")->DenseRange(0, kLastShape);
BENCHMARK(BM_OpenBlas)->DenseRange(0, kLastShape);
BENCHMARK(BM_Library<GemmLibrary::kOneDnn>)->Name("BM_OneDnn")->DenseRange(0, kLastShape);
BENCHMARK(BM_Library<GemmLibrary::kOneDnnMatmul>)->Name("BM_OneDnnMatmul")->DenseRange(0, kLastShape);
BENCHMARK(BM_Library<GemmLibrary::kLibxsmm>)->Name("BM_Libxsmm")->DenseRange(0, kLastShape);
BENCHMARK(BM_OneDnnTeam)->ArgsProduct({benchmark::CreateDenseRange(0, kLastShape, 1), {2}});
BENCHMARK(BM_DotKernel)->Apply(DotArgs)->UseRealTime();

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

BENCHMARK(BM_Eigen)->DenseRange(0, kLastShape);

}  // namespace

BENCHMARK_MAIN();
