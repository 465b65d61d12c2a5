// Micro-benchmarks of the runtime's per-op and per-sync overheads.
#include <benchmark/benchmark.h>

#include <chrono>
#include <vector>

#include "ir/node.h"
#include "ir/post_order.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace {

using lazyrt::Tensor;

Tensor SmallTensor() {
  std::vector<float> v(16, 1.0f);
  const std::vector<int64_t> dims = {4, 4};
  return Tensor::FromData(v, dims);
}

// Cost of tracing one elementwise binary op with a host-scalar operand on a small tensor: the scalar
// becomes a parameter leaf, the op a node, the result a registered tensor. Each result is dropped at
// once, as in a real step where temporaries die quickly.
void BM_TraceElementwiseOp(benchmark::State& state) {
  Tensor x = SmallTensor();
  for (auto _ : state) {
    Tensor y = x * 0.5;
    benchmark::DoNotOptimize(y);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TraceElementwiseOp);

// Tracing a chain (results kept alive), the common shape of a forward pass.
void BM_TraceChain(benchmark::State& state) {
  Tensor x = SmallTensor();
  for (auto _ : state) {
    Tensor y = x;
    for (int i = 0; i < 100; ++i) y = y * 0.5 + 1.0;
    benchmark::DoNotOptimize(y);
  }
  state.SetItemsProcessed(state.iterations() * 200);
}
BENCHMARK(BM_TraceChain);

// Creating and hashing one node (no tensor, no registry).
void BM_NodeHash(benchmark::State& state) {
  using namespace lazyrt::ir;
  Value a{MakeNode(OpKind::kDeviceData, OperandList{}, ShapeList{Shape(DType::kF32, {128, 256})})};
  for (auto _ : state) {
    NodePtr n = MakeNode(OpKind::kAdd, OperandList{a, a}, ShapeList{Shape(DType::kF32, {128, 256})});
    benchmark::DoNotOptimize(n->hash());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_NodeHash);

// Post-order plus DAG hash of a graph of N nodes: the graph-key part of every sync.
void BM_PostOrderDagHash(benchmark::State& state) {
  Tensor x = SmallTensor();
  Tensor y = x;
  for (int64_t i = 0; i < state.range(0) / 2; ++i) y = y * 0.5 + x;
  std::vector<lazyrt::ir::Value> roots = {y.ir_value()};
  for (auto _ : state) {
    lazyrt::ir::PostOrder order(roots);
    benchmark::DoNotOptimize(order.dag_hash());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_PostOrderDagHash)->Arg(1000)->Arg(100000);

// One cache-hit sync of an N-node graph: collect the live tensors, post-order, hash, look up the
// executable, upload nothing (no host scalars), launch. Tracing and kernel execution (trivially small
// here: one-element tensors) are outside the timed region.
void BM_SyncCacheHit(benchmark::State& state) {
  std::vector<float> one = {1.0f};
  const std::vector<int64_t> dims = {1};
  Tensor x = Tensor::FromData(one, dims);
  Tensor c = Tensor::FromData(one, dims);
  auto build = [&] {
    Tensor y = x;
    for (int64_t i = 0; i < state.range(0) / 2; ++i) y = y * c + x;
    return y;
  };
  { Tensor warm = build(); lazyrt::sync(); lazyrt::wait_device(); }  // compile once
  // Manual timing of the sync call alone: PauseTiming/ResumeTiming cost microseconds themselves.
  for (auto _ : state) {
    Tensor y = build();
    const auto start = std::chrono::steady_clock::now();
    lazyrt::sync();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    lazyrt::wait_device();
  }
  state.counters["nodes"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_SyncCacheHit)->Arg(10)->Arg(100)->Arg(1000)->Arg(10000)->UseManualTime()->Unit(benchmark::kMicrosecond);

Tensor Filled(std::vector<int64_t> dims, float value) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n), value);
  return Tensor::FromData(v, dims);
}

// GEMM [m,k] x [k,n] through a whole sync (cache hit) and execution: GFLOP/s of the device's GEMM.
void BM_Gemm(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Tensor a = Filled({m, k}, 0.5f), b = Filled({k, n}, 0.25f);
  for (auto _ : state) {
    Tensor c = lazyrt::matmul(a, b);
    lazyrt::sync();
    lazyrt::wait_device();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(2 * m * k * n) * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Gemm)->Args({128, 784, 256})->Args({128, 256, 128})->Args({1024, 1024, 1024})->UseRealTime()->Unit(benchmark::kMicrosecond);

// A chain of 8 elementwise ops over N floats, fused into one pass: GB/s of input read + output written.
void BM_FusedElementwise(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor x = Filled({n}, 0.5f);
  for (auto _ : state) {
    Tensor y = lazyrt::relu(((x * 1.5 + 0.25) * x - 0.125) * 2.0) + x;
    lazyrt::sync();
    lazyrt::wait_device();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(2 * n * 4) * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FusedElementwise)->Arg(1 << 16)->Arg(1 << 22)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
