// A small MLP trained on one device or data parallel over a mesh: the multi-device tests compare the two.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "lazy/optim.h"
#include "lazy/sharding.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace lazyrt::testing {

inline std::vector<float> RandomValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// The losses of `steps` SGD steps on mean((relu(x w1) w2 - t)^2), x [16, 6]: on lazy:0, or data parallel
// over `mesh` (the batch split over its first axis, the weights replicated) when one is given.
inline std::vector<double> TrainMlp(const Mesh* mesh, int steps) {
  constexpr int64_t kBatch = 16;
  const std::vector<float> xs = RandomValues(kBatch * 6, 5), w1s = RandomValues(6 * 16, 6),
                           w2s = RandomValues(16 * 3, 7), ts = RandomValues(kBatch * 3, 8);
  Tensor x = Tensor::FromData(std::span<const float>(xs), {kBatch, 6});
  Tensor t = Tensor::FromData(std::span<const float>(ts), {kBatch, 3});
  Tensor w1 = Tensor::FromData(std::span<const float>(w1s), {6, 16});
  Tensor w2 = Tensor::FromData(std::span<const float>(w2s), {16, 3});
  if (mesh != nullptr) {
    mark_sharding(x, *mesh, {mesh->axis_names()[0], {}});
    mark_sharding(t, *mesh, {mesh->axis_names()[0], {}});
    mark_sharding(w1, *mesh, {});
    mark_sharding(w2, *mesh, {});
  }
  w1.requires_grad_();
  w2.requires_grad_();
  SGD optimizer({w1, w2}, 0.1);
  std::vector<Tensor> losses;
  for (int step = 0; step < steps; ++step) {
    Tensor diff = matmul(relu(matmul(x, w1)), w2) - t;
    Tensor loss = mean(diff * diff);
    loss.backward();
    optimizer.step();
    optimizer.zero_grad();
    losses.push_back(loss.detach());
    sync();
  }
  std::vector<double> values;
  for (const Tensor& l : losses) values.push_back(l.item());
  return values;
}

}  // namespace lazyrt::testing
