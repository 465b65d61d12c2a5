// Micro-benchmarks of the runtime's per-op and per-sync overheads.
#include <benchmark/benchmark.h>

#include <vector>

#include "ir/node.h"
#include "ir/post_order.h"
#include "lazy/tensor.h"

namespace {

using lazyrt::Tensor;

Tensor SmallTensor() {
  std::vector<float> v(16, 1.0f);
  const int64_t dims[] = {4, 4};
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

}  // namespace

BENCHMARK_MAIN();
