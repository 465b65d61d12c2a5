// Helpers of the op tests written for issue 14: random inputs, central finite differences, and the text
// of a thrown lazyrt::Error.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lazy/tensor.h"

namespace lazyrt::testing {

inline std::vector<double> RandomValues(int64_t n, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return v;
}

inline int64_t NumelOf(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

inline Tensor F64(const std::vector<double>& v, const std::vector<int64_t>& dims) {
  return Tensor::FromData(std::span<const double>(v), dims);
}

inline Tensor I64(const std::vector<int64_t>& v, const std::vector<int64_t>& dims) {
  return Tensor::FromData(std::span<const int64_t>(v), dims);
}

// An i64 tensor whose values only the device knows (computed, not yet synced).
inline Tensor PendingI64(const std::vector<int64_t>& v, const std::vector<int64_t>& dims) {
  Tensor t = I64(v, dims) * int64_t{1};
  EXPECT_TRUE(t.is_pending());
  return t;
}

template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no lazyrt::Error thrown";
  return "";
}

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks the gradient of sum(f(inputs) * w), for a random w, with respect to every element of every
// input against central finite differences, in f64.
inline void GradCheck(const std::string& name, const TensorFn& f, const std::vector<std::vector<int64_t>>& shapes,
                      double tolerance = 1e-6, double eps = 1e-6) {
  SCOPED_TRACE(name);
  std::mt19937_64 rng(std::hash<std::string>{}(name));
  std::vector<std::vector<double>> values;
  for (const auto& s : shapes) values.push_back(RandomValues(NumelOf(s), rng));
  auto tensors = [&](const std::vector<std::vector<double>>& vals, bool grad) {
    std::vector<Tensor> xs;
    for (size_t i = 0; i < vals.size(); ++i) {
      xs.push_back(F64(vals[i], shapes[i]));
      if (grad) xs.back().requires_grad_();
    }
    return xs;
  };
  std::vector<Tensor> params = tensors(values, true);
  Tensor out = f(params);
  const Tensor weights = F64(RandomValues(out.numel(), rng), {out.dims().begin(), out.dims().end()});
  sum(out * weights).backward();
  auto loss_of = [&](const std::vector<std::vector<double>>& vals) {
    return sum(f(tensors(vals, false)) * weights).item();
  };
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined()) << "input " << i << " got no gradient";
    const std::vector<double> analytic = params[i].grad().to_vector<double>();
    for (size_t j = 0; j < values[i].size(); ++j) {
      auto plus = values, minus = values;
      plus[i][j] += eps;
      minus[i][j] -= eps;
      const double numeric = (loss_of(plus) - loss_of(minus)) / (2 * eps);
      EXPECT_NEAR(analytic[j], numeric, tolerance * std::max(1.0, std::abs(numeric)))
          << "input " << i << " element " << j;
    }
  }
}

}  // namespace lazyrt::testing
