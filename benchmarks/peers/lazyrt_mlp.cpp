// The Fashion-MNIST MLP step (784-256-128-10, AdamW, cross-entropy) in lazyrt, on the batches and
// initial weights every peer shares (mlp_common.h). One sync per step; the runtime may run up to two
// steps ahead of the device, as a training loop does, so a step's time is the loop's period.
//
// lazyrt has no thread setting: its device pool has one worker per CPU the process may use
// (pjrt::UsableCpus), which is 2 on the benchmark machine, the count the other peers are given.
//
// The persistent cache is off: the first step is what a fresh process pays (trace + compile + run),
// comparable with the first step of the PyTorch peers. benchmarks/cold_warm measures the warm start.
// The last stdout line is the JSON result (see peers::PrintResult).
#include <cstdio>
#include <exception>
#include <memory>
#include <span>
#include <vector>

#include "benchmarks/configure_without_cache.h"
#include "benchmarks/peers/mlp_common.h"
#include "lazy/nn.h"
#include "lazy/optim.h"
#include "lazy/options.h"
#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"
#include "pjrt_sim/thread_pool.h"

namespace {

// The trace cost of one elementwise op with a host scalar, the same loop as micro's
// BM_TraceElementwiseOp, so the driver can print it next to LTC's figure for the same op.
double TraceOpNs(int64_t iterations) {
  lazyrt::Tensor x = lazyrt::Tensor::FromData(std::vector<float>(16, 1.0f), {4, 4});
  const peers::Clock::time_point start = peers::Clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    lazyrt::Tensor y = x * 0.5;
    if (!y.defined()) std::abort();  // keeps the op from being optimized away
  }
  return peers::MsBetween(start, peers::Clock::now()) * 1e6 / static_cast<double>(iterations);
}

}  // namespace

int main(int argc, char** argv) {
  const peers::Flags flags = peers::ParseFlags(argc, argv);
  try {
    if (!lazyrt::bench::ConfigureWithoutPersistentCache("lazyrt_mlp")) return 2;

    // Shared: each step's batch tensor reads its rows in place (FromExternal) and holds the dataset.
    const auto train = std::make_shared<const peers::Dataset>(peers::LoadTrain(flags.data));
    std::vector<lazyrt::Tensor> weights, biases, params;
    for (const peers::LayerInit& l : peers::InitLayers()) {
      weights.push_back(lazyrt::Tensor::FromData(l.weight, {l.out, l.in}));
      biases.push_back(lazyrt::Tensor::FromData(l.bias, {l.out}));
      weights.back().requires_grad_();
      biases.back().requires_grad_();
      params.push_back(weights.back());
      params.push_back(biases.back());
    }
    lazyrt::AdamW optimizer(params, flags.lr);

    peers::Result result;
    result.peer = "lazyrt";
    result.threads = lazyrt::pjrt::UsableCpus();
    result.steps = flags.steps;
    result.warmup = flags.warmup;
    std::vector<int64_t> labels;
    lazyrt::Tensor loss;
    const peers::Clock::time_point run_start = peers::Clock::now();
    double steady_cpu_start = 0;
    for (int64_t step = 0; step < flags.steps; ++step) {
      if (step == 1 + flags.warmup) steady_cpu_start = peers::ThreadCpuUs();
      const peers::Clock::time_point start = peers::Clock::now();
      const std::span<const float> images = peers::GetBatch(*train, flags.batch, step, labels);
      lazyrt::Tensor h = lazyrt::Tensor::FromExternal(images, {flags.batch, train->features}, train);
      const lazyrt::Tensor y = lazyrt::Tensor::FromData(std::span<const int64_t>(labels), {flags.batch});
      for (size_t l = 0; l < weights.size(); ++l) {
        h = lazyrt::matmul(h, lazyrt::transpose(weights[l], 0, 1)) + biases[l];  // as lazyrt::nn::Linear
        if (l + 1 < weights.size()) h = lazyrt::relu(h);
      }
      loss = lazyrt::nn::cross_entropy(h, y);
      loss.backward();
      optimizer.step();
      optimizer.zero_grad();
      lazyrt::sync();
      if (step == 0) result.first_loss = loss.item();  // the first step ends when its result is ready
      result.step_ms.push_back(peers::MsBetween(start, peers::Clock::now()));
    }
    const int64_t steady_steps = flags.steps - 1 - flags.warmup;
    if (steady_steps > 0)
      result.host_cpu_us = (peers::ThreadCpuUs() - steady_cpu_start) / static_cast<double>(steady_steps);
    result.last_loss = loss.item();
    lazyrt::wait_device();
    result.total_ms = peers::MsBetween(run_start, peers::Clock::now());
    result.op_ns = TraceOpNs(flags.op_iterations);
    result.op_kind = "trace x*0.5 (C++)";
    peers::PrintResult(result);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lazyrt_mlp: %s\n", e.what());
    return 1;
  }
  return 0;
}
