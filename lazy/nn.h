// Small neural-network helpers: Linear with PyTorch's default initialisation, an MLP, cross-entropy.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "absl/strings/string_view.h"

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

// As torch.nn.functional.cross_entropy with class indices: -log softmax(logits)[label] per row, for
// logits [N, C] and integer labels [N] (or logits [N, C, d1, ...] with labels [N, d1, ...], or [C] with
// a 0-dim label). Rows whose label is ignore_index contribute nothing; reduction "mean" divides by the
// number of the other rows (NaN if there are none, as torch), "sum" adds, "none" gives the per-row
// losses in labels' shape. A label outside [0, C) that is not ignore_index is an index error (at the
// call if the labels are known, else when the result is read). Built from log_softmax and a gather; its
// gradient is one elementwise expression, g (exp(log_softmax) - one_hot(label)), computed in one fused
// loop (labels only the device knows add their range check's kernel): neither direction stores an [N, C]
// one_hot or multiplies by one.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, int64_t ignore_index = -100,
                     absl::string_view reduction = "mean", LAZYRT_HERE);

}  // namespace lazyrt::nn
