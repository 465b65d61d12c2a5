// layer_norm and rms_norm against reference loops (forward and backward), finite differences, and
// their errors.
#include <cfloat>
#include <cmath>
#include <optional>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ir/node.h"
#include "ir/op_kind.h"
#include "lazy/tensor.h"
#include "tests/lazy/op_test_util.h"

namespace lazyrt {
namespace normalization_test {

using testing::ErrorOf;
using testing::F64;
using testing::GradCheck;
using ::testing::HasSubstr;
using testing::NumelOf;
using testing::RandomValues;

// One row's normalization, computed the textbook way in long double: the reference.
struct RowNorm {
  std::vector<long double> x_hat;
  long double rstd;
};
RowNorm NormalizeRow(const double* x, int64_t width, bool rms, double eps) {
  long double mean = 0, var = 0;
  if (!rms) {
    for (int64_t i = 0; i < width; ++i) mean += x[i];
    mean /= width;
  }
  for (int64_t i = 0; i < width; ++i) var += (x[i] - mean) * (x[i] - mean);
  RowNorm r{{}, 1 / std::sqrt(var / width + eps)};
  for (int64_t i = 0; i < width; ++i) r.x_hat.push_back((x[i] - mean) * r.rstd);
  return r;
}

// y = x_hat * w + b, row by row (w, b empty: absent).
std::vector<double> ReferenceForward(const std::vector<double>& x, int64_t width, bool rms, double eps,
                                     const std::vector<double>& w, const std::vector<double>& b) {
  std::vector<double> y(x.size());
  for (size_t row = 0; row * width < x.size(); ++row) {
    const RowNorm n = NormalizeRow(&x[row * width], width, rms, eps);
    for (int64_t i = 0; i < width; ++i) {
      long double v = n.x_hat[static_cast<size_t>(i)];
      if (!w.empty()) v *= w[static_cast<size_t>(i)];
      if (!b.empty()) v += b[static_cast<size_t>(i)];
      y[row * width + static_cast<size_t>(i)] = static_cast<double>(v);
    }
  }
  return y;
}

// dx of sum(dy * y) by the chain rule through mean and variance, written out element by element
// (O(width^2) per row: the Jacobian itself, independent of the kernel's closed form).
std::vector<double> ReferenceBackward(const std::vector<double>& x, const std::vector<double>& dy, int64_t width,
                                      bool rms, double eps, const std::vector<double>& w) {
  std::vector<double> dx(x.size());
  for (size_t row = 0; row * width < x.size(); ++row) {
    const double* xr = &x[row * width];
    const RowNorm n = NormalizeRow(xr, width, rms, eps);
    const long double var = 1 / (n.rstd * n.rstd) - eps;
    long double mean = 0;
    if (!rms) {
      for (int64_t i = 0; i < width; ++i) mean += xr[i];
      mean /= width;
    }
    for (int64_t j = 0; j < width; ++j) {  // d/dx_j
      long double total = 0;
      for (int64_t i = 0; i < width; ++i) {
        // x_hat_i = (x_i - mean) (var + eps)^-1/2; dmean/dx_j = 1/n (0 for rms); dvar/dx_j = 2 (x_j - mean) / n.
        const long double dcentred = (i == j ? 1.0L : 0.0L) - (rms ? 0.0L : 1.0L / width);
        const long double dvar = 2 * (xr[j] - mean) / width;
        const long double d = dcentred * n.rstd - (xr[i] - mean) * 0.5L * n.rstd * n.rstd * n.rstd * dvar;
        const long double g = dy[row * width + static_cast<size_t>(i)] * (w.empty() ? 1.0L : w[static_cast<size_t>(i)]);
        total += g * d;
      }
      (void)var;
      dx[row * width + static_cast<size_t>(j)] = static_cast<double>(total);
    }
  }
  return dx;
}

struct Case {
  std::vector<int64_t> dims;
  size_t normalized;  // how many trailing dims
};

const Case kCases[] = {{{4, 6}, 1}, {{2, 3, 5}, 2}, {{2, 3, 5}, 1}, {{2, 2, 3, 4}, 1}, {{2, 2, 3, 4}, 2}};

std::vector<int64_t> Trailing(const Case& c) {
  return {c.dims.end() - static_cast<int64_t>(c.normalized), c.dims.end()};
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tolerance) << "element " << i;
}

TEST(Normalization, ForwardMatchesReferenceLoops) {
  std::mt19937_64 rng(1);
  for (const Case& c : kCases) {
    for (bool rms : {false, true}) {
      for (bool affine : {false, true}) {
        SCOPED_TRACE(::testing::Message() << (rms ? "rms_norm " : "layer_norm ") << ::testing::PrintToString(c.dims)
                                          << " over " << c.normalized << " dims, affine " << affine);
        const std::vector<int64_t> shape = Trailing(c);
        const std::vector<double> x = RandomValues(NumelOf(c.dims), rng, -3, 5);
        const std::vector<double> w = affine ? RandomValues(NumelOf(shape), rng) : std::vector<double>{};
        const std::vector<double> b = affine && !rms ? RandomValues(NumelOf(shape), rng) : std::vector<double>{};
        const Tensor wt = affine ? F64(w, shape) : Tensor();
        const Tensor bt = b.empty() ? Tensor() : F64(b, shape);
        const double eps = 1e-3;
        const Tensor y =
            rms ? rms_norm(F64(x, c.dims), shape, wt, eps) : layer_norm(F64(x, c.dims), shape, wt, bt, eps);
        ExpectNear(y.to_vector<double>(), ReferenceForward(x, NumelOf(shape), rms, eps, w, b), 1e-13);
        // f32: the same values to f32 precision (statistics in f64).
        std::vector<float> xf(x.begin(), x.end());
        const Tensor x32 = Tensor::FromData(std::span<const float>(xf), c.dims);
        const Tensor y32 = rms ? rms_norm(x32, shape, wt.defined() ? wt.to(DType::kF32) : Tensor(), eps)
                               : layer_norm(x32, shape, wt.defined() ? wt.to(DType::kF32) : Tensor(),
                                            bt.defined() ? bt.to(DType::kF32) : Tensor(), eps);
        EXPECT_TRUE(y32.dtype() == DType::kF32);
        const std::vector<float> got = y32.to_vector<float>();
        const std::vector<double> want = ReferenceForward(x, NumelOf(shape), rms, eps, w, b);
        for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6) << "f32 element " << i;
      }
    }
  }
}

TEST(Normalization, BackwardMatchesReferenceLoops) {
  std::mt19937_64 rng(2);
  for (const Case& c : kCases) {
    for (bool rms : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (rms ? "rms_norm " : "layer_norm ") << ::testing::PrintToString(c.dims));
      const std::vector<int64_t> shape = Trailing(c);
      const int64_t width = NumelOf(shape);
      const std::vector<double> x = RandomValues(NumelOf(c.dims), rng, -2, 2);
      const std::vector<double> dy = RandomValues(NumelOf(c.dims), rng);
      const std::vector<double> w = RandomValues(width, rng);
      const std::vector<double> b = RandomValues(width, rng);
      Tensor xt = F64(x, c.dims), wt = F64(w, shape), bt = F64(b, shape);
      xt.requires_grad_();
      wt.requires_grad_();
      bt.requires_grad_();
      const double eps = 1e-5;
      const Tensor y = rms ? rms_norm(xt, shape, wt, eps) : layer_norm(xt, shape, wt, bt, eps);
      sum(y * F64(dy, c.dims)).backward();
      ExpectNear(xt.grad().to_vector<double>(), ReferenceBackward(x, dy, width, rms, eps, w), 1e-10);
      // dweight = sum over rows of dy * x_hat; dbias = sum over rows of dy.
      const std::vector<double> x_hat = ReferenceForward(x, width, rms, eps, {}, {});
      std::vector<double> dw(static_cast<size_t>(width)), db(static_cast<size_t>(width));
      for (size_t i = 0; i < x.size(); ++i) {
        dw[i % static_cast<size_t>(width)] += dy[i] * x_hat[i];
        db[i % static_cast<size_t>(width)] += dy[i];
      }
      ExpectNear(wt.grad().to_vector<double>(), dw, 1e-12);
      if (!rms) ExpectNear(bt.grad().to_vector<double>(), db, 1e-12);
    }
  }
}

// layer_norm with weight and bias is one node each way (the gradient's packs dx with each group of rows' sums
// for dweight and dbias): its output and dx have the bits of the affine traced as ops after the norm, and its
// dweight and dbias the same sums in another order.
TEST(Normalization, AffineInOneNodeHasTheBitsOfTheTracedAffine) {
  std::mt19937_64 rng(3);
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{8, 8, 16}, std::vector<int64_t>{5, 3, 7}}) {
    SCOPED_TRACE(::testing::PrintToString(dims));
    const int64_t width = dims.back(), n = NumelOf(dims);
    auto f32 = [](const std::vector<double>& v, const std::vector<int64_t>& shape) {
      const std::vector<float> f(v.begin(), v.end());
      return Tensor::FromData(std::span<const float>(f), shape);
    };
    const std::vector<double> xv = RandomValues(n, rng, -3, 3), dyv = RandomValues(n, rng);
    const std::vector<double> wv = RandomValues(width, rng), bv = RandomValues(width, rng);
    std::vector<Tensor> x, w, b, y;
    for (bool fused : {true, false}) {
      x.push_back(f32(xv, dims));
      w.push_back(f32(wv, {width}));
      b.push_back(f32(bv, {width}));
      for (Tensor* t : {&x.back(), &w.back(), &b.back()}) t->requires_grad_();
      // Without a bias in the call, the affine is traced as ops: x_hat * weight, then + bias here.
      y.push_back(fused ? layer_norm(x.back(), {width}, w.back(), b.back())
                        : layer_norm(x.back(), {width}, w.back()) + b.back());
      if (fused) {  // one node: LAYER_NORM (x, weight, bias)
        ASSERT_EQ(y.back().ir_value().node->op(), ir::OpKind::kLayerNorm);
        ASSERT_EQ(y.back().ir_value().node->operands().size(), 3U);
      }
      sum(y.back() * f32(dyv, dims)).backward();
    }
    EXPECT_EQ(y[0].to_vector<float>(), y[1].to_vector<float>());
    EXPECT_EQ(x[0].grad().to_vector<float>(), x[1].grad().to_vector<float>());
    for (size_t t : {size_t{1}, size_t{2}}) {
      const std::vector<float> got = (t == 1 ? w[0] : b[0]).grad().to_vector<float>();
      const std::vector<float> want = (t == 1 ? w[1] : b[1]).grad().to_vector<float>();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << t << " " << i;
    }
  }
}

TEST(Normalization, GradientsMatchFiniteDifferences) {
  GradCheck("layer_norm affine",
            [](auto& in) {
              return layer_norm(in[0], {3, 4}, in[1], in[2]);
            },
            {{2, 3, 4}, {3, 4}, {3, 4}});
  GradCheck("layer_norm affine in one node", [](auto& in) { return layer_norm(in[0], {4}, in[1], in[2]); },
            {{4, 3, 4}, {4}, {4}});
  GradCheck("layer_norm plain", [](auto& in) { return layer_norm(in[0], {5}); }, {{3, 5}});
  GradCheck("rms_norm weight", [](auto& in) { return rms_norm(in[0], {4}, in[1]); }, {{2, 2, 4}, {4}});
  GradCheck("rms_norm plain", [](auto& in) { return rms_norm(in[0], {2, 3}, Tensor(), 1e-6); }, {{2, 3}});
}

TEST(Normalization, RmsNormDefaultEpsIsTheMachineEpsilon) {
  // A row of zeros: x / sqrt(0 + eps) is 0 whatever eps; a tiny row shows eps. x = 1e-8: mean(x^2) = 1e-16,
  // and with DBL_EPSILON (2.2e-16) added the result is 1e-8 / sqrt(3.22e-16).
  const Tensor y = rms_norm(F64({1e-8, 1e-8}, {2}), {2});
  const double want = 1e-8 / std::sqrt(1e-16 + DBL_EPSILON);
  EXPECT_NEAR(y.to_vector<double>()[0], want, 1e-12);
  const std::vector<float> xf = {1e-4f, 1e-4f};
  const Tensor y32 = rms_norm(Tensor::FromData(std::span<const float>(xf), {2}), {2});
  EXPECT_NEAR(y32.to_vector<float>()[0], 1e-4 / std::sqrt(1e-8 + FLT_EPSILON), 1e-5);
}

TEST(Normalization, Errors) {
  const Tensor x = F64(std::vector<double>(24, 1.0), {2, 3, 4});
  EXPECT_THAT(ErrorOf([&] { layer_norm(x, {3}); }),
              AllOf(HasSubstr("layer_norm"), HasSubstr("[3]"), HasSubstr("f64[2,3,4]"), HasSubstr("trailing dims")));
  EXPECT_THAT(ErrorOf([&] { rms_norm(x, {2, 3, 4, 5}); }), HasSubstr("trailing dims"));
  EXPECT_THAT(ErrorOf([&] { layer_norm(x, {}); }), HasSubstr("at least one dimension"));
  EXPECT_THAT(ErrorOf([&] {
                layer_norm(x, {4}, F64({1, 1, 1}, {3}));
              }),
              AllOf(HasSubstr("layer_norm: weight"), HasSubstr("f64[3]")));
  EXPECT_THAT(ErrorOf([&] {
                layer_norm(x, {3, 4}, Tensor(), F64({1, 1, 1, 1}, {4}));
              }),
              HasSubstr("layer_norm: bias must be a floating tensor of shape normalized_shape [3,4]"));
  EXPECT_THAT(ErrorOf([&] { rms_norm(x, {4}, F64({1, 1, 1, 1}, {1, 4})); }), HasSubstr("rms_norm: weight"));
  const std::vector<int64_t> ints = {1, 2, 3, 4};
  EXPECT_THAT(ErrorOf([&] { layer_norm(Tensor::FromData(std::span<const int64_t>(ints), {4}), {4}); }),
              AllOf(HasSubstr("layer_norm"), HasSubstr("floating-point"), HasSubstr("i64[4]")));
  EXPECT_THAT(ErrorOf([&] { rms_norm(x, {4}, Tensor(), -1.0); }), HasSubstr("eps must be finite and >= 0"));
  const int line = __LINE__ + 1;
  EXPECT_THAT(ErrorOf([&] { layer_norm(x, {5}); }), HasSubstr("normalization_test.cc:" + std::to_string(line)));
}

}  // namespace normalization_test
}  // namespace lazyrt
