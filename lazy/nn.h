// Small neural-network helpers: Linear with PyTorch's default initialisation, an MLP, cross-entropy.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "lazy/tensor.h"

namespace lazyrt::nn {

// y = x W^T + b, W [out, in]. Initialised as torch.nn.Linear: W and b uniform in +-1/sqrt(in)
// (kaiming_uniform with a = sqrt(5)), drawn from `rng` on the host so a seed fixes them exactly.
class Linear {
 public:
  Linear(int64_t in_features, int64_t out_features, std::mt19937_64& rng, Device device = {});
  Tensor operator()(const Tensor& x, LAZYRT_HERE) const;
  std::vector<Tensor> parameters() const { return {weight_, bias_}; }

 private:
  Tensor weight_, bias_;
};

// Linear layers with ReLU between them (none after the last).
class MLP {
 public:
  // sizes = {784, 256, 128, 10} makes three layers.
  MLP(const std::vector<int64_t>& sizes, std::mt19937_64& rng, Device device = {});
  // `between_layers`, if set, is called after every hidden layer with its index (1-based): where a
  // training loop may insert barriers.
  Tensor operator()(const Tensor& x, const std::function<void(int)>& between_layers = nullptr, LAZYRT_HERE) const;
  std::vector<Tensor> parameters() const;
  size_t num_layers() const { return layers_.size(); }

 private:
  std::vector<Linear> layers_;
};

// Mean over the batch of -log softmax(logits)[label]; logits [n, classes], labels i64 [n].
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, LAZYRT_HERE);

}  // namespace lazyrt::nn
