// Micro-benchmarks of the runtime's per-op and per-sync overheads, of loading a compiled executable,
// and of each kernel family. Some reach below the public API (lowering, the pjrt_sim client, the
// runtime's live-tensor registry, the executable cache's LRU class), as benchmarks/ may.
#include <benchmark/benchmark.h>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <source_location>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "benchmarks/configure_without_cache.h"
#include "ir/hash.h"
#include "ir/node.h"
#include "ir/post_order.h"
#include "lazy/lru_cache.h"
#include "lazy/nn.h"
#include "lazy/optim.h"
#include "lazy/options.h"
#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"
#include "lowering/lower.h"
#include "pjrt_sim/client.h"
#include "pjrt_sim/compiler.h"
#include "pjrt_sim/executable.h"
#include "pjrt_sim/kernels/kernels.h"
#include "pjrt_sim/opcode.h"

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
// executable, upload nothing (no host scalars), launch. Tracing is outside the timed region; the
// kernels (one-element tensors) are inside it when the executable runs on the calling thread, which it
// does when that is estimated to cost less than waking the device's stream thread (Executable::inline_ns).
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
  {
    Tensor warm = build();
    lazyrt::sync();
    lazyrt::wait_device();
  }  // compile once
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

// Steps 2-4 of a sync without the rest of it: post-order the graph of N nodes, combine its DAG hash
// with the context into the graph key, find that key in an LRU of executables. The graph is the one
// BM_SyncCacheHit syncs, so BM_SyncCacheHit minus this is what a cache hit spends elsewhere
// (collecting the live tensors, gathering parameters, launching, recording the sync).
// The GraphExecutor's own cache and context hash are private to lazy/graph_executor.cc, and the only
// way into them is sync(), which also executes; so this runs the same components (ir::PostOrder,
// ir::HashCombine, lazyrt::LruCache) on an LRU of its own, filled to the executor's capacity (1024): the
// largest table a lookup can probe. Values are empty: a lookup never touches the value.
void BM_GraphKeyLookup(benchmark::State& state) {
  using lazyrt::ir::HashValue;
  constexpr size_t kExecutorCacheCapacity = 1024;  // kExecutableCacheCapacity in lazy/graph_executor.cc
  std::vector<float> one = {1.0f};
  const std::vector<int64_t> dims = {1};
  Tensor x = Tensor::FromData(one, dims);
  Tensor c = Tensor::FromData(one, dims);
  Tensor y = x;
  for (int64_t i = 0; i < state.range(0) / 2; ++i) y = y * c + x;
  const std::vector<lazyrt::ir::Value> roots = {y.ir_value()};
  // Any fixed context works: the executor hashes device kind, compiler version and options into one.
  const std::string context = "lazyrt-sim|" + lazyrt::pjrt::Executable::ProducerVersion();
  const HashValue context_hash = lazyrt::ir::HashBytes(context.data(), context.size());

  lazyrt::LruCache<HashValue, std::shared_ptr<lazyrt::pjrt::Executable>> cache(kExecutorCacheCapacity);
  const HashValue key = lazyrt::ir::HashCombine(lazyrt::ir::PostOrder(roots).dag_hash(), context_hash);
  for (HashValue other = 1; other < kExecutorCacheCapacity; ++other)
    cache.Put(lazyrt::ir::HashCombine(key, other), nullptr);
  cache.Put(key, nullptr);
  for (auto _ : state) {
    const lazyrt::ir::PostOrder order(roots);
    const HashValue graph_key = lazyrt::ir::HashCombine(order.dag_hash(), context_hash);
    std::shared_ptr<lazyrt::pjrt::Executable>* hit = cache.Get(graph_key);
    if (hit == nullptr) {
      state.SkipWithError("graph key not found: the key of an unchanged graph changed");
      break;
    }
    benchmark::DoNotOptimize(hit);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["nodes"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_GraphKeyLookup)->Arg(10)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMicrosecond);

Tensor Filled(std::vector<int64_t> dims, float value) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n), value);
  return Tensor::FromData(v, dims);
}

// GEMM [m,k] x [k,n] of `dtype` operands through a whole sync (cache hit) and execution: GFLOP/s of the
// device's GEMM.
void GemmRate(benchmark::State& state, lazyrt::DType dtype) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Tensor a = lazyrt::cast(Filled({m, k}, 0.5f), dtype), b = lazyrt::cast(Filled({k, n}, 0.25f), dtype);
  lazyrt::sync();  // the operands stored in `dtype`, as a step's weights and activations are
  // Compile (and autotune) outside the timed loop: a 1024^3 product runs few iterations.
  {
    Tensor warm = lazyrt::matmul(a, b);
    lazyrt::sync();
    lazyrt::wait_device();
  }
  for (auto _ : state) {
    Tensor c = lazyrt::matmul(a, b);
    lazyrt::sync();
    lazyrt::wait_device();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(2 * m * k * n) * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
void BM_Gemm(benchmark::State& state) { GemmRate(state, lazyrt::DType::kF32); }
BENCHMARK(BM_Gemm)
    ->Args({128, 784, 256})
    ->Args({128, 256, 128})
    ->Args({1024, 1024, 1024})
    ->Args({4096, 128, 512})  // the GPT's linear layers (batch x context tokens, width 128)
    ->Args({4096, 512, 128})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
// bf16 operands, f32 accumulation (the GPT's --dtype bf16 products): the roofline of a bf16 step.
void BM_GemmBf16(benchmark::State& state) { GemmRate(state, lazyrt::DType::kBF16); }
BENCHMARK(BM_GemmBf16)
    ->Args({1024, 1024, 1024})
    ->Args({4096, 128, 512})
    ->Args({4096, 512, 128})
    ->Args({512, 4096, 128})  // a weight gradient: K = batch x context tokens
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// One cache line passed back and forth between two threads on two of the process's CPUs: the latency
// of a handoff between cores, which every parallel kernel pays several times. On a VM it is a property
// of where the host placed the vCPUs, and it changes: on the 2-vCPU Zen 5 of 2026-11-25 it was 85-130 ns
// or ~400 ns, and the MLP step 0.54 or 0.85 ms with it (RESULTS.md), the same binary.
void BM_CoreRoundTrip(benchmark::State& state) {
  cpu_set_t allowed;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
  }
  if (cpus.size() < 2) {
    state.SkipWithError("needs two CPUs");
    return;
  }
  const auto pin = [](int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  };
  alignas(64) std::atomic<int64_t> ball{0};  // odd: with the partner; even: back
  std::atomic<bool> stop{false};
  std::thread partner([&] {
    pin(cpus[1]);
    for (int64_t seen = 1; !stop.load(std::memory_order_relaxed);) {
      if (ball.load(std::memory_order_acquire) == seen) {
        ball.store(seen + 1, std::memory_order_release);
        seen += 2;
      }
    }
  });
  cpu_set_t before;
  pthread_getaffinity_np(pthread_self(), sizeof(before), &before);
  pin(cpus[0]);
  int64_t next = 1;
  for (auto _ : state) {
    ball.store(next, std::memory_order_release);
    while (ball.load(std::memory_order_acquire) != next + 1) {
    }
    next += 2;
  }
  stop.store(true);
  partner.join();
  pthread_setaffinity_np(pthread_self(), sizeof(before), &before);
}
BENCHMARK(BM_CoreRoundTrip)->MinTime(0.2);

// A chain of 8 elementwise ops over N floats, fused into one pass: GB/s of input read + output written.
void BM_FusedElementwise(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor x = Filled({n}, 0.5f);
  auto chain = [&] { return lazyrt::relu(((x * 1.5 + 0.25) * x - 0.125) * 2.0) + x; };
  {
    Tensor warm = chain();
    lazyrt::sync();
    lazyrt::wait_device();
  }  // compile outside the timed loop
  for (auto _ : state) {
    Tensor y = chain();
    lazyrt::sync();
    lazyrt::wait_device();
  }
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(2 * n * 4) * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FusedElementwise)->Arg(1 << 16)->Arg(1 << 22)->UseRealTime()->Unit(benchmark::kMicrosecond);

// GELU (exact, erf) over N floats, fused into one pass: elements per ns, the speed of the transcendental
// element functions (vector_math.h) in a kernel, as the GPT's MLP runs them. Arg 1: the values [-2, 2) in
// ascending order (runs of small elements, which erf's array loop takes by the polynomial alone), or
// shuffled as a layer's pre-activations are (mixed runs: erf's whole work).
void BM_Gelu(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<float>(4.0 * i / n - 2.0);
  if (state.range(1) == 1) std::shuffle(values.begin(), values.end(), std::mt19937_64(7));
  Tensor x = Tensor::FromData(values, {n});
  lazyrt::sync();
  {
    Tensor warm = lazyrt::gelu(x);
    lazyrt::sync();
    lazyrt::wait_device();
  }  // compile outside the timed loop
  for (auto _ : state) {
    Tensor y = lazyrt::gelu(x);
    lazyrt::sync();
    lazyrt::wait_device();
  }
  state.counters["Gelem/s"] = benchmark::Counter(static_cast<double>(n) * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Gelu)->Args({1 << 21, 0})->Args({1 << 21, 1})->UseRealTime()->Unit(benchmark::kMicrosecond);

// GELU's gradient as the GPT's MLP block takes it: h = x W1 + b1 (here x + b1) through gelu, the gradient of
// h from the next layer's (a fixed [4096, 512] array), and b1's gradient summed over the rows, one sync of
// the backward each (cache hit): one REDUCE kernel computing gelu'(h) and storing the gradient of h.
void BM_GeluGradient(benchmark::State& state) {
  const int64_t rows = state.range(0), width = 512;
  std::vector<float> values(static_cast<size_t>(rows * width));
  std::mt19937_64 rng(8);
  std::normal_distribution<float> normal(0, 1.5f);
  for (float& v : values) v = normal(rng);
  Tensor x = Tensor::FromData(values, {rows, width});
  for (float& v : values) v = normal(rng);
  const Tensor upstream = Tensor::FromData(values, {rows, width});
  Tensor bias = Filled({width}, 0.25f);
  x.requires_grad_();  // h's gradient is stored, as the GPT's is (for x's and W1's)
  bias.requires_grad_();
  lazyrt::sync();
  auto step = [&] {
    lazyrt::sum(lazyrt::gelu(x + bias) * upstream).backward();
    lazyrt::sync();
    lazyrt::wait_device();
    x.set_grad(Tensor());
    bias.set_grad(Tensor());
  };
  step();  // compiled here, outside the timed loop
  for (auto _ : state) step();
  state.counters["Gelem/s"] = benchmark::Counter(
      static_cast<double>(rows * width) * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GeluGradient)->Arg(4096)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Mixed precision's widening loop: a bf16 [N, 512] product widened to f32 plus a bias, as the GPT's
// linear layers run under --dtype bf16, one sync each (cache hit): GB/s of bf16 read + f32 written.
void BM_Bf16WidenAddBias(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor x = lazyrt::cast(Filled({n, 512}, 0.75f), lazyrt::DType::kBF16);
  const Tensor bias = Filled({512}, 0.5f);
  lazyrt::sync();
  auto step = [&] {
    Tensor y = lazyrt::cast(x, lazyrt::DType::kF32) + bias;
    lazyrt::sync();
    lazyrt::wait_device();
  };
  step();  // compiled here, outside the timed loop
  for (auto _ : state) step();
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(n * 512 * (2 + 4)) * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Bf16WidenAddBias)->Arg(4096)->UseRealTime()->Unit(benchmark::kMicrosecond);

// And its narrowing loop: an f32 [N, 512] product rounded to bf16 for the next layer's matmul: GB/s of f32
// read + bf16 written.
void BM_Bf16NarrowProduct(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor x = Filled({n, 512}, 0.75f), y = Filled({n, 512}, 1.25f);
  lazyrt::sync();
  auto step = [&] {
    Tensor z = lazyrt::cast(x * y, lazyrt::DType::kBF16);
    lazyrt::sync();
    lazyrt::wait_device();
  };
  step();  // compiled here, outside the timed loop
  for (auto _ : state) step();
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(n * 512 * (4 + 4 + 2)) * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Bf16NarrowProduct)->Arg(4096)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The GPT's head split: q of a [N, 384] qkv projection ([batch 32, time N / 32, q/k/v, 4 heads, 32])
// made head-major [32, 4, N / 32, 32], one sync each (cache hit): a copy in runs of 32 floats. GB/s of
// f32 read + written.
void BM_HeadMajorCopy(benchmark::State& state) {
  const int64_t n = state.range(0), batch = 32;
  const Tensor qkv = Filled({n, 384}, 0.5f);
  lazyrt::sync();
  auto step = [&] {
    Tensor q = lazyrt::permute(lazyrt::reshape(lazyrt::slice(lazyrt::reshape(qkv, {batch, n / batch, 3, 128}), 2, 0, 1),
                                               {batch, n / batch, 4, 32}),
                               {0, 2, 1, 3});
    Tensor y = q + 1.0;
    lazyrt::sync();
    lazyrt::wait_device();
  };
  step();  // compiled here, outside the timed loop
  for (auto _ : state) step();
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(n * 128 * 8) * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_HeadMajorCopy)->Arg(4096)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Layer norm over the last dim of [N, 128] f32 (the GPT's shape at N = 4096), forward and the input's
// gradient of sum(y * w), one sync each (cache hit): the NORMALIZE kernels plus a multiply and a reduce.
// "Gelem/s": elements of x per ns, forward and backward together.
void BM_LayerNorm(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> data(static_cast<size_t>(n * 128)), weights(data.size());
  for (float& v : data) v = u(rng);
  for (float& v : weights) v = u(rng);
  Tensor x = Tensor::FromData(data, {n, 128}).requires_grad_();
  const Tensor w = Tensor::FromData(weights, {n, 128});
  auto step = [&] {
    lazyrt::sum(lazyrt::layer_norm(x, {128}) * w).backward();
    Tensor grad = x.grad();
    x.set_grad(Tensor());
    lazyrt::sync();
    lazyrt::wait_device();
  };
  lazyrt::sync();
  step();  // compiled here, outside the timed loop
  for (auto _ : state) step();
  state.counters["Gelem/s"] = benchmark::Counter(
      static_cast<double>(n * 128) * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LayerNorm)->Arg(4096)->UseRealTime()->Unit(benchmark::kMicrosecond);

enum class ReduceOp { kSum, kMax };

// One reduction of an [n, n] f32 array through a whole sync (cache hit) and execution: GB/s of input
// read + output written. `dim` 1 reduces each row to one value (contiguous reads), `dim` 0 each column
// (the reduced dimension is strided), the two layouts a reduction kernel must both handle well.
// Values vary so that max is not handed a constant.
void BM_Reduce(benchmark::State& state, ReduceOp op, int64_t dim) {
  const int64_t n = state.range(0);
  std::vector<float> v(static_cast<size_t>(n * n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1021) * 0.001f - 0.5f;
  Tensor x = Tensor::FromData(v, {n, n});
  auto reduce = [&] { return op == ReduceOp::kSum ? lazyrt::sum(x, {dim}) : lazyrt::max(x, {dim}); };
  // Compile outside the timed loop: a [4096, 4096] reduction runs few iterations, and the first
  // sync's compile (with autotuning) would dominate them.
  {
    Tensor warm = reduce();
    lazyrt::sync();
    lazyrt::wait_device();
  }
  for (auto _ : state) {
    Tensor r = reduce();
    lazyrt::sync();
    lazyrt::wait_device();
  }
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>((n * n + n) * 4) * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}
// [1024, 1024] (4 MiB) stays in the 32 MiB L3; [4096, 4096] (64 MiB) does not.
BENCHMARK_CAPTURE(BM_Reduce, sum_each_row, ReduceOp::kSum, 1)
    ->Arg(1024)
    ->Arg(4096)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Reduce, sum_each_column, ReduceOp::kSum, 0)
    ->Arg(1024)
    ->Arg(4096)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Reduce, max_each_row, ReduceOp::kMax, 1)
    ->Arg(1024)
    ->Arg(4096)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Reduce, max_each_column, ReduceOp::kMax, 0)
    ->Arg(1024)
    ->Arg(4096)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// A running sum along each row of an [n, n] f32 array (accumulated in f64) through a whole sync (cache
// hit) and execution: GB/s of input read + output written.
void BM_CumsumRows(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> v(static_cast<size_t>(n * n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1021) * 0.001f - 0.5f;
  Tensor x = Tensor::FromData(v, {n, n});
  {
    Tensor warm = lazyrt::cumsum(x, 1);
    lazyrt::sync();
    lazyrt::wait_device();
  }
  for (auto _ : state) {
    Tensor r = lazyrt::cumsum(x, 1);
    lazyrt::sync();
    lazyrt::wait_device();
  }
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(2 * n * n * 4) * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CumsumRows)->Arg(1024)->Arg(4096)->UseRealTime()->Unit(benchmark::kMicrosecond);

// topk along the rows of a [rows, cols] f32 array (an argsort of each row, then a gather): mixture-of-
// experts routing (the best 2 of 64 experts for 4096 tokens) and GPT top-k sampling (the best 50 of a
// 50257-token vocabulary for 8 sequences). Rows per second.
void BM_TopK(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), k = state.range(2);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 10007) * 1e-4f;
  Tensor x = Tensor::FromData(v, {rows, cols});
  {
    auto warm = lazyrt::topk(x, k);
    lazyrt::sync();
    lazyrt::wait_device();
  }
  for (auto _ : state) {
    auto r = lazyrt::topk(x, k);
    lazyrt::sync();
    lazyrt::wait_device();
  }
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(rows) * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TopK)->Args({4096, 64, 2})->Args({8, 50257, 50})->UseRealTime()->Unit(benchmark::kMicrosecond);

// One AdamW update of an [N, 784] weight whose gradient is given (the flagship's first layer at N = 256):
// the new moments and the new weight, a graph of elementwise work over 4 arrays read and 3 written.
// GB/s of those 7 arrays.
void BM_AdamWUpdate(benchmark::State& state) {
  const int64_t rows = state.range(0), n = rows * 784;
  Tensor weight = Filled({rows, 784}, 0.5f).requires_grad_();
  lazyrt::AdamW optimizer({weight}, 1e-3);
  const Tensor gradient = Filled({rows, 784}, 0.01f);
  auto update = [&] {
    weight.set_grad(gradient);
    optimizer.step();
    lazyrt::sync();
    lazyrt::wait_device();
  };
  update();  // compile outside the timed loop
  for (auto _ : state) update();
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(7 * n * 4) * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AdamWUpdate)->Arg(256)->Arg(2048)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The executable of one training step of the flagship model (examples/train_mlp: 784-256-128-10 MLP,
// batch 128, cross-entropy, backward, AdamW), compiled once per process: what the persistent cache
// stores and loads for real users. The graph is exactly what sync() would compile: every live tensor
// with pending IR, collected from the runtime's registry as GraphExecutor does (step 1), post-ordered,
// lowered and compiled with default options. The tensors are dropped afterwards, so no later
// benchmark's sync sees them. Data are random: the executable depends on shapes, not values.
struct CompiledStep {
  std::shared_ptr<lazyrt::pjrt::Executable> executable;
  int64_t nodes = 0;
};

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "micro: %s\n", what.c_str());
  std::exit(1);
}

// The layer norm's kernel alone over [32, 128, 128] f32 (4096 rows of 128), forward (range 0 = 0) or
// gradient (1), on arrays fresh from memory as a training step's kernels find them (its arena far larger
// than the caches): each run takes the next of 48 sets of arrays (2 MiB each: 96 MiB of x, as much of dy
// for the gradient). range(1) = 1 runs on one set, warm. range(2) = 1: with the affine (the GPT's layer
// norms), whose gradient also sums dy x_hat and dy into the weight's and the bias's gradients per sequence.
void BM_NormalizeKernel(benchmark::State& state) {
  const bool backward = state.range(0) != 0, warm = state.range(1) != 0, affine = state.range(2) != 0;
  lazyrt::pjrt::proto::Kernel kernel;
  kernel.set_kind(lazyrt::pjrt::proto::Kernel::NORMALIZE);
  kernel.set_opcode(
      static_cast<int32_t>(backward ? lazyrt::pjrt::Opcode::kLayerNormGrad : lazyrt::pjrt::Opcode::kLayerNorm));
  kernel.set_axis(2);
  kernel.set_epsilon(1e-5);
  using lazyrt::pjrt::ArrayShape;
  const ArrayShape shape{lazyrt::pjrt::PrimitiveType::kF32, {32, 128, 128}};
  const ArrayShape weight_shape{lazyrt::pjrt::PrimitiveType::kF32, {128}};
  std::vector<ArrayShape> inputs(backward ? 2 : 1, shape);
  if (affine) inputs.insert(inputs.end(), backward ? 1 : 2, weight_shape);
  const ArrayShape output = affine && backward ? ArrayShape{shape.type, {32, 130, 128}} : shape;
  absl::StatusOr<std::unique_ptr<lazyrt::pjrt::Kernel>> built = lazyrt::pjrt::BuildKernel(kernel, inputs, output);
  if (!built.ok()) Fail(std::string(built.status().message()));
  const size_t sets = warm ? 1 : 48, n = static_cast<size_t>(shape.numel());
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<std::vector<float>> x(sets, std::vector<float>(n)), g(sets, std::vector<float>(n)),
      y(sets, std::vector<float>(static_cast<size_t>(output.numel())));
  for (size_t i = 0; i < sets; ++i) {
    for (size_t e = 0; e < n; ++e) x[i][e] = u(rng), g[i][e] = u(rng);
  }
  std::vector<float> weight(128), bias(128);
  for (size_t e = 0; e < 128; ++e) weight[e] = 1 + u(rng) / 8, bias[e] = u(rng) / 8;
  size_t at = 0;
  for (auto _ : state) {
    std::vector<const void*> in = {x[at].data()};
    if (backward) in.push_back(g[at].data());
    if (affine) in.push_back(weight.data());
    if (affine && !backward) in.push_back(bias.data());
    void* out[] = {y[at].data()};
    if (!(*built)->Run(in, out).ok()) Fail("the layer norm's kernel failed");
    at = (at + 1) % sets;
  }
}
BENCHMARK(BM_NormalizeKernel)->ArgsProduct({{0, 1}, {0, 1}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);

// The executable sync() would compile now: every live tensor with pending IR, collected from the
// runtime's registry as GraphExecutor does (step 1), post-ordered, lowered and compiled with default
// options. The tensors stay pending.
CompiledStep CompilePendingGraph(const std::string& name) {
  auto& device = lazyrt::detail::Runtime::Get().device_state(lazyrt::Device{}, std::source_location::current());
  std::vector<lazyrt::ir::Value> roots;
  for (const Tensor& t : device.LiveTensors()) {
    const lazyrt::ir::Value& ir = t.impl()->ir;
    if (ir && ir.node->op() != lazyrt::ir::OpKind::kDeviceData) roots.push_back(ir);
  }
  const lazyrt::ir::PostOrder order(roots);
  absl::StatusOr<lazyrt::pjrt::proto::Module> module = lazyrt::lowering::LowerGraph(order, name);
  if (!module.ok()) Fail("lowering " + name + ": " + std::string(module.status().message()));
  absl::StatusOr<std::shared_ptr<lazyrt::pjrt::Executable>> exe =
      lazyrt::detail::Runtime::Get().client().Compile(*module, lazyrt::pjrt::CompileOptions{}, device.device);
  if (!exe.ok()) Fail("compiling " + name + ": " + std::string(exe.status().message()));
  return CompiledStep{*std::move(exe), static_cast<int64_t>(order.size())};
}

const CompiledStep& MlpTrainingStep() {
  static const CompiledStep step = [] {
    constexpr int64_t kBatch = 128;
    const std::vector<int64_t> sizes = {784, 256, 128, 10};
    std::mt19937_64 rng(0);
    lazyrt::nn::MLP model(sizes, rng);
    lazyrt::AdamW optimizer(model.parameters(), 1e-3);
    std::uniform_real_distribution<float> pixel(-1.0f, 1.0f);
    std::vector<float> images(static_cast<size_t>(kBatch * sizes[0]));
    for (float& p : images) p = pixel(rng);
    std::vector<int64_t> labels(static_cast<size_t>(kBatch));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);
    Tensor x = Tensor::FromData(images, {kBatch, sizes[0]});
    Tensor y = Tensor::FromData(std::span<const int64_t>(labels), {kBatch});
    Tensor loss = lazyrt::nn::cross_entropy(model(x), y);
    loss.backward();
    optimizer.step();
    optimizer.zero_grad();

    return CompilePendingGraph("mlp_training_step");
  }();
  return step;
}

// Forward and backward of causal self-attention at the GPT example's shape, q, k, v [32, 4, T, 32]
// (batch x heads x tokens x head dim), the loss sum(out * w): the fused kernels against the unfused
// composition softmax(q k^T / sqrt(32) masked) v, each a whole sync (cache hit) and execution; and the
// fused kernels on bf16 q, k and v (bf16 products, f32 softmax).
// Counters: "arena_MiB", the intermediate bytes the step's executable materializes (its arena, planned
// at compile time), and "scores_MiB", one [32, 4, T, T] f32 matrix for scale.
void BM_AttentionForwardBackward(benchmark::State& state, bool fused, lazyrt::DType dtype) {
  const int64_t t = state.range(0);
  const std::vector<int64_t> dims = {32, 4, t, 32};
  std::mt19937_64 rng(1);
  auto random = [&] {
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> v(static_cast<size_t>(32 * 4 * t * 32));
    for (float& x : v) x = u(rng);
    return Tensor::FromData(v, dims).to(dtype);
  };
  Tensor q = random().requires_grad_(), k = random().requires_grad_(), v = random().requires_grad_();
  const Tensor w = random();
  const Tensor causal =
      lazyrt::le(lazyrt::reshape(lazyrt::arange(0, t), {1, t}), lazyrt::reshape(lazyrt::arange(0, t), {t, 1}));
  const Tensor minus_inf = lazyrt::full({}, lazyrt::Scalar::Static(-INFINITY));
  std::vector<Tensor> grads;
  auto step = [&] {
    Tensor out;
    if (fused) {
      out = lazyrt::scaled_dot_product_attention(q, k, v, Tensor(), 0.0, /*is_causal=*/true);
    } else {
      Tensor scores = lazyrt::matmul(q, lazyrt::transpose(k, -1, -2)) * (1 / std::sqrt(32.0));
      out = lazyrt::matmul(lazyrt::softmax(lazyrt::where(causal, scores, minus_inf), -1), v);
    }
    lazyrt::sum(out * w).backward();
    grads = {q.grad(), k.grad(), v.grad()};
    for (Tensor* x : {&q, &k, &v}) x->set_grad(Tensor());
  };
  lazyrt::sync();  // the inputs and the causal mask materialized, as in every later step
  step();
  state.counters["arena_MiB"] =
      static_cast<double>(CompilePendingGraph("attention").executable->proto().arena_bytes()) / (1 << 20);
  state.counters["scores_MiB"] = static_cast<double>(32 * 4 * t * t * 4) / (1 << 20);
  lazyrt::sync();  // compiled here, outside the timed loop
  lazyrt::wait_device();
  for (auto _ : state) {
    step();
    lazyrt::sync();
    lazyrt::wait_device();
  }
}
BENCHMARK_CAPTURE(BM_AttentionForwardBackward, fused, true, lazyrt::DType::kF32)
    ->Arg(128)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionForwardBackward, fused_bf16, true, lazyrt::DType::kBF16)
    ->Arg(128)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionForwardBackward, unfused, false, lazyrt::DType::kF32)
    ->Arg(128)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Executable::Serialize() of the MLP step: what a compile costs extra to fill the persistent cache
// (before compression and the write, which cache/ does).
void BM_ExecutableSerialize(benchmark::State& state) {
  const CompiledStep& step = MlpTrainingStep();
  size_t bytes = 0;
  for (auto _ : state) {
    std::string serialized = step.executable->Serialize();
    bytes = serialized.size();
    benchmark::DoNotOptimize(serialized.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["nodes"] = static_cast<double>(step.nodes);
}
BENCHMARK(BM_ExecutableSerialize)->Unit(benchmark::kMicrosecond);

// Client::LoadSerializedExecutable() of the MLP step's bytes: parse, validate every index and size,
// build the kernels, run no compiler pass. A warm start pays this instead of lower + compile.
void BM_ExecutableLoad(benchmark::State& state) {
  const CompiledStep& step = MlpTrainingStep();
  const std::string serialized = step.executable->Serialize();
  lazyrt::pjrt::Client& client = lazyrt::detail::Runtime::Get().client();
  for (auto _ : state) {
    absl::StatusOr<std::shared_ptr<lazyrt::pjrt::Executable>> loaded = client.LoadSerializedExecutable(serialized);
    if (!loaded.ok()) {
      state.SkipWithError(std::string(loaded.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(loaded->get());
  }
  state.SetBytesProcessed(static_cast<int64_t>(serialized.size()) * state.iterations());
  state.counters["bytes"] = static_cast<double>(serialized.size());
  state.counters["nodes"] = static_cast<double>(step.nodes);
}
BENCHMARK(BM_ExecutableLoad)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  if (!lazyrt::bench::ConfigureWithoutPersistentCache("micro")) return 2;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
