#include "lazy/nn.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "lazy/autograd.h"
#include "lazy/indexing_internal.h"
#include "lazy/tracing.h"

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

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, int64_t ignore_index, absl::string_view reduction,
                     SourceLocation loc) {
  if (reduction != "mean" && reduction != "sum" && reduction != "none") {
    throw Error(absl::StrCat("cross_entropy: reduction must be \"mean\", \"sum\" or \"none\", got \"", reduction, "\""),
                loc);
  }
  detail::CommonDevice({&logits, &labels}, "cross_entropy", loc);
  // The shape labels must have: logits' without the class dim (dim 1, or dim 0 of a 1-D logits).
  std::vector<int64_t> want(logits.dims().begin(), logits.dims().end());
  if (!want.empty()) want.erase(want.begin() + (want.size() == 1 ? 0 : 1));
  const bool shapes_fit =
      logits.rank() >= 1 && std::equal(want.begin(), want.end(), labels.dims().begin(), labels.dims().end());
  if (!shapes_fit || !ir::IsIntegral(labels.dtype()) || !ir::IsFloating(logits.dtype())) {
    throw Error(absl::StrCat("cross_entropy: needs floating logits [N, C] (or [N, C, d1, ...], or [C]) and integer "
                             "labels of logits' shape without the class dim; got logits ",
                             logits.shape().ToString(), " and labels ", labels.shape().ToString()),
                loc);
  }
  const int64_t classes = logits.dim(logits.rank() == 1 ? 0 : 1);
  const bool labels_known = detail::CheckKnownIndices(labels, classes, "cross_entropy", loc, ignore_index);
  // Rows of classes: [M, C] with the class dim last, and their labels [M].
  Tensor rows = logits;
  if (logits.rank() > 2) {
    std::vector<int64_t> perm = {0};
    for (int64_t d = 2; d < logits.rank(); ++d) perm.push_back(d);
    perm.push_back(1);
    rows = permute(logits, perm, loc);
  }
  rows = reshape(rows, {-1, classes}, loc);
  const Tensor flat = reshape(labels, {-1, 1}, loc);
  const Tensor kept = ne(flat, Scalar::Static(static_cast<double>(ignore_index)), loc);
  // Ignored rows pick class 0 (any in range), then count nothing.
  const Tensor safe = where(kept, flat, zeros({}, flat.dtype(), flat.device(), loc), loc);
  const Tensor zero = zeros({}, logits.dtype(), logits.device(), loc);
  Tensor log_probs, losses;
  {
    // The row losses are differentiated as one op (below), not op by op.
    NoGradGuard no_grad;
    log_probs = log_softmax(rows, 1, loc);
    const Tensor picked = detail::GatherAs(log_probs, 1, safe, "cross_entropy", loc);  // [M, 1]
    losses = reshape(where(kept, neg(picked, loc), zero, loc), {-1}, loc);
  }
  // d(loss_i)/d(row i) = g_i (softmax(row i) - one_hot(label_i)), 0 for an ignored row: one elementwise
  // expression of the saved log-probabilities, where the ops above differentiated one at a time took a
  // scatter of the gathered gradient into zeros and log_softmax's g' - exp(y) sum(g') of it (five kernels for
  // the MLP's loss). With s = -g_i (0 on an ignored row), the scattered row g' is s at the label and +0
  // elsewhere and sums to s, so where(label, s, 0) - exp(y) s is the same value, and the same bits: the
  // same operations, and where s is -0 (g' held +0) each result is still +0 - (+-0) or -0 - (-0), +0.
  losses = detail::Record(
      losses, "cross_entropy", {rows},
      [log_probs, kept, safe, zero, classes, labels_known, loc](const Tensor& g, const Tensor&,
                                                                const std::vector<Tensor>&) -> std::vector<Tensor> {
        const Tensor s = neg(where(kept, reshape(g, {-1, 1}, loc), zero, loc), loc);  // [M, 1]
        // [M, C]: labels only the device knows are checked by this gradient too, which may be read
        // without the loss (the forward's gather checks them for the loss).
        const Tensor label =
            labels_known ? eq(arange(0, classes, 1, safe.dtype(), safe.device(), loc), safe, loc)
                         : detail::OneHotAs(reshape(safe, {-1}, loc), classes, DType::kBool, "cross_entropy", loc);
        return {where(label, s, zero, loc) - TensorArg(exp(log_probs, loc) * TensorArg(s, loc), loc)};
      },
      loc);
  if (reduction == "none") return reshape(losses, labels.sizes(), loc);
  const Tensor total = sum(losses, {}, false, loc);
  if (reduction == "sum") return total;
  return total / TensorArg(sum(cast(kept, logits.dtype(), loc), {}, false, loc), loc);
}

}  // namespace lazyrt::nn
