#include "lazy/nn.h"

#include <cmath>

namespace lazyrt::nn {
namespace {

Tensor Uniform(std::vector<int64_t> dims, double bound, std::mt19937_64& rng, Device device) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::uniform_real_distribution<float> u(static_cast<float>(-bound), static_cast<float>(bound));
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  Tensor t = Tensor::FromData(v, dims, device);
  t.requires_grad_();
  return t;
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, std::mt19937_64& rng, Device device) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight_ = Uniform({out_features, in_features}, bound, rng, device);
  bias_ = Uniform({out_features}, bound, rng, device);
}

Tensor Linear::operator()(const Tensor& x, SourceLocation loc) const {
  return matmul(x, transpose(weight_, 0, 1, loc), loc) + TensorArg(bias_, loc);
}

MLP::MLP(const std::vector<int64_t>& sizes, std::mt19937_64& rng, Device device) {
  for (size_t i = 0; i + 1 < sizes.size(); ++i) layers_.emplace_back(sizes[i], sizes[i + 1], rng, device);
}

Tensor MLP::operator()(const Tensor& x, const std::function<void(int)>& between_layers, SourceLocation loc) const {
  Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    h = layers_[i](h, loc);
    if (i + 1 < layers_.size()) {
      h = relu(h, loc);
      if (between_layers) between_layers(static_cast<int>(i) + 1);
    }
  }
  return h;
}

std::vector<Tensor> MLP::parameters() const {
  std::vector<Tensor> out;
  for (const Linear& l : layers_) {
    for (Tensor& p : l.parameters()) out.push_back(p);
  }
  return out;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, SourceLocation loc) {
  Tensor picked = sum(log_softmax(logits, 1, loc) * TensorArg(one_hot(labels, logits.dim(1), logits.dtype(), loc), loc),
                      {1}, false, loc);
  return neg(mean(picked, {}, false, loc), loc);
}

}  // namespace lazyrt::nn
