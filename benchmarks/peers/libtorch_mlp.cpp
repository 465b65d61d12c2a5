// The Fashion-MNIST MLP step (784-256-128-10, AdamW, cross-entropy) in libtorch's C++ eager mode, on
// the batches and initial weights every peer shares (mlp_common.h). Built only when CMake finds
// Torch (Debian's libtorch-dev). The last stdout line is the JSON result (see peers::PrintResult).
#include <torch/torch.h>

#include <cstdio>
#include <exception>
#include <vector>

#include "benchmarks/peers/mlp_common.h"

namespace {

// Dispatch + run of one eager elementwise op with a host scalar on a 4x4 tensor: the eager
// counterpart of lazyrt's per-op trace cost.
double EagerOpNs(int64_t iterations) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::ones({4, 4});
  const peers::Clock::time_point start = peers::Clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    torch::Tensor y = x * 0.5;
    if (!y.defined()) std::abort();  // keeps the op from being optimized away
  }
  return peers::MsBetween(start, peers::Clock::now()) * 1e6 / static_cast<double>(iterations);
}

}  // namespace

int main(int argc, char** argv) {
  const peers::Flags flags = peers::ParseFlags(argc, argv);
  try {
    torch::set_num_threads(flags.threads);
    const peers::Dataset train = peers::LoadTrain(flags.data);

    std::vector<torch::nn::Linear> layers;
    for (const peers::LayerInit& l : peers::InitLayers()) {
      torch::nn::Linear layer(l.in, l.out);
      torch::NoGradGuard no_grad;
      layer->weight.copy_(torch::from_blob(const_cast<float*>(l.weight.data()), {l.out, l.in}));
      layer->bias.copy_(torch::from_blob(const_cast<float*>(l.bias.data()), {l.out}));
      layers.push_back(layer);
    }
    auto forward = [&](torch::Tensor h) {
      for (size_t l = 0; l < layers.size(); ++l) {
        h = layers[l]->forward(h);
        if (l + 1 < layers.size()) h = torch::relu(h);
      }
      return h;
    };
    std::vector<torch::Tensor> params;
    for (auto& layer : layers) {
      for (const torch::Tensor& p : layer->parameters()) params.push_back(p);
    }
    torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(flags.lr));

    peers::Result result;
    result.peer = "libtorch";
    result.threads = torch::get_num_threads();
    result.steps = flags.steps;
    result.warmup = flags.warmup;
    std::vector<int64_t> labels;
    torch::Tensor loss;
    const peers::Clock::time_point run_start = peers::Clock::now();
    for (int64_t step = 0; step < flags.steps; ++step) {
      const peers::Clock::time_point start = peers::Clock::now();
      const std::span<const float> images = peers::GetBatch(train, flags.batch, step, labels);
      // The batch's rows read in place, as lazyrt's FromExternal does; the labels copied, as its FromData.
      const torch::Tensor x = torch::from_blob(const_cast<float*>(images.data()), {flags.batch, train.features});
      const torch::Tensor y = torch::from_blob(labels.data(), {flags.batch}, torch::kInt64).clone();
      optimizer.zero_grad();
      loss = torch::nn::functional::cross_entropy(forward(x), y);
      loss.backward();
      optimizer.step();
      if (step == 0) result.first_loss = loss.item<double>();
      result.step_ms.push_back(peers::MsBetween(start, peers::Clock::now()));
    }
    result.last_loss = loss.item<double>();
    result.total_ms = peers::MsBetween(run_start, peers::Clock::now());
    result.op_ns = EagerOpNs(flags.op_iterations);
    result.op_kind = "eager x*0.5 (C++)";
    peers::PrintResult(result);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "libtorch_mlp: %s\n", e.what());
    return 1;
  }
  return 0;
}
