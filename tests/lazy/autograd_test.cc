// Every differentiable op's gradient against central finite differences, in f64.
#include <bit>
#include <cmath>
#include <functional>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ir/node.h"
#include "ir/op_kind.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace lazyrt {
namespace autograd_test {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor Random(std::vector<int64_t> dims, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return Tensor::FromData(std::span<const double>(v), dims);
}

// Checks d(sum(f(x) * w))/dx against (L(x + eps) - L(x - eps)) / 2 eps for every element of every input.
void GradCheck(const std::string& name, const Fn& f, std::vector<std::vector<int64_t>> shapes, double lo = -1,
               double hi = 1, double eps = 1e-6, double tolerance = 1e-5) {
  SCOPED_TRACE(name);
  std::mt19937_64 rng(std::hash<std::string>{}(name));
  std::vector<std::vector<double>> values;
  std::vector<Tensor> inputs;
  for (auto& s : shapes) {
    inputs.push_back(Random(s, rng, lo, hi));
    values.push_back(inputs.back().to_vector<double>());
  }
  Tensor probe = f(inputs);
  Tensor weights = Random(probe.sizes(), rng);
  std::vector<double> w_host = weights.to_vector<double>();

  auto loss_of = [&](const std::vector<std::vector<double>>& vals) {
    std::vector<Tensor> xs;
    for (size_t i = 0; i < vals.size(); ++i)
      xs.push_back(Tensor::FromData(std::span<const double>(vals[i]), shapes[i]));
    return sum(f(xs) * weights).item();
  };
  std::vector<Tensor> params;
  for (size_t i = 0; i < values.size(); ++i) {
    params.push_back(Tensor::FromData(std::span<const double>(values[i]), shapes[i]));
    params.back().requires_grad_();
  }
  Tensor loss = sum(f(params) * weights);
  loss.backward();
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined()) << "input " << i << " got no gradient";
    std::vector<double> analytic = params[i].grad().to_vector<double>();
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

TEST(Gradients, Elementwise) {
  GradCheck("add", [](auto& x) { return x[0] + x[1]; }, {{2, 3}, {3}});
  GradCheck("sub", [](auto& x) { return x[0] - x[1]; }, {{2, 3}, {2, 1}});
  GradCheck("mul", [](auto& x) { return x[0] * x[1]; }, {{2, 3}, {2, 3}});
  GradCheck(
      "div", [](auto& x) { return x[0] / x[1]; }, {{2, 3}, {3}}, 0.5, 2);
  GradCheck(
      "pow", [](auto& x) { return pow(x[0], x[1]); }, {{2, 2}, {2, 2}}, 0.5, 2);
  GradCheck("maximum", [](auto& x) { return maximum(x[0], x[1]); }, {{4}, {4}});
  GradCheck("minimum", [](auto& x) { return minimum(x[0], x[1]); }, {{4}, {4}});
  GradCheck("scalar ops", [](auto& x) { return (2.0 - x[0]) * 3.0 / 1.5 + 0.5; }, {{5}});
  GradCheck(
      "scalar div", [](auto& x) { return 1.0 / x[0]; }, {{5}}, 0.5, 2);
  GradCheck("pow scalar", [](auto& x) { return pow(x[0], Scalar(3.0)); }, {{5}});
  GradCheck("where", [](auto& x) { return where(gt(x[0], 0.0), x[0], x[1]); }, {{6}, {6}});
  GradCheck("neg", [](auto& x) { return neg(x[0]); }, {{4}});
  GradCheck("abs", [](auto& x) { return abs(x[0]); }, {{4}});
  GradCheck("exp", [](auto& x) { return exp(x[0]); }, {{4}});
  GradCheck(
      "log", [](auto& x) { return log(x[0]); }, {{4}}, 0.5, 2);
  GradCheck(
      "sqrt", [](auto& x) { return sqrt(x[0]); }, {{4}}, 0.5, 2);
  GradCheck(
      "rsqrt", [](auto& x) { return rsqrt(x[0]); }, {{4}}, 0.5, 2);
  GradCheck("tanh", [](auto& x) { return tanh(x[0]); }, {{4}});
  GradCheck("sigmoid", [](auto& x) { return sigmoid(x[0]); }, {{4}});
  GradCheck("relu", [](auto& x) { return relu(x[0]); }, {{6}});
  GradCheck(
      "gelu", [](auto& x) { return gelu(x[0]); }, {{6}}, -3, 3);
  GradCheck(
      "gelu tanh", [](auto& x) { return gelu(x[0], "tanh"); }, {{6}}, -3, 3);
  GradCheck(
      "erf", [](auto& x) { return erf(x[0]); }, {{6}}, -2, 2);
  GradCheck(
      "sin", [](auto& x) { return sin(x[0]); }, {{6}}, -3, 3);
  GradCheck(
      "cos", [](auto& x) { return cos(x[0]); }, {{6}}, -3, 3);
  // Through f32 the function is a staircase of ~1e-7 steps: a wider difference sees its slope.
  GradCheck(
      "cast", [](auto& x) { return cast(cast(x[0], DType::kF32), DType::kF64) * x[0]; }, {{3}}, -1, 1, 1e-2, 1e-4);
}

TEST(Gradients, ReductionsAndContractions) {
  GradCheck("matmul", [](auto& x) { return matmul(x[0], x[1]); }, {{3, 4}, {4, 2}});
  GradCheck("batched matmul", [](auto& x) { return matmul(x[0], x[1]); }, {{2, 3, 4}, {4, 2}});
  GradCheck("matmul vector", [](auto& x) { return matmul(x[0], x[1]); }, {{4}, {4, 3}});
  GradCheck("sum", [](auto& x) { return sum(x[0], {1}); }, {{2, 3, 2}});
  GradCheck("sum keepdim all", [](auto& x) { return sum(x[0], {}, true); }, {{2, 3}});
  GradCheck("mean", [](auto& x) { return mean(x[0], {0, 2}); }, {{2, 3, 2}});
  GradCheck("max", [](auto& x) { return max(x[0], {1}); }, {{3, 4}});
  GradCheck("min", [](auto& x) { return min(x[0], {0}); }, {{3, 4}});
  GradCheck("prod", [](auto& x) { return prod(x[0], {1}); }, {{3, 4}});
  // A row with one zero (its derivative is the product of the others) and one with two (all zero).
  GradCheck("prod with zeros",
            [](auto& x) {
              return prod(x[0] * Tensor::FromData(std::vector<double>{1, 0, 1, 0, 1, 0}, {2, 3}), {1});
            },
            {{2, 3}});
  GradCheck("softmax", [](auto& x) { return softmax(x[0], 1); }, {{2, 4}});
  GradCheck("log_softmax", [](auto& x) { return log_softmax(x[0], 0); }, {{3, 2}});
}

TEST(Gradients, DataMovement) {
  GradCheck("reshape", [](auto& x) { return reshape(x[0], {3, 2}) * x[1]; }, {{2, 3}, {3, 2}});
  GradCheck("transpose", [](auto& x) { return transpose(x[0], 0, 2); }, {{2, 3, 2}});
  GradCheck("permute", [](auto& x) { return permute(x[0], {1, 2, 0}); }, {{2, 3, 2}});
  GradCheck("expand", [](auto& x) { return expand(x[0], {2, 3, 4}); }, {{3, 1}});
  GradCheck("slice", [](auto& x) { return slice(x[0], 1, 1, 5, 2); }, {{2, 6}});
  // Step 1: the gradient is g between zeros (a concatenation), with zeros before, after, both or none.
  GradCheck("slice (middle)", [](auto& x) { return slice(x[0], 1, 1, 4); }, {{2, 6}});
  GradCheck("slice (prefix)", [](auto& x) { return slice(x[0], 0, 0, 2); }, {{3, 2}});
  GradCheck("slice (suffix)", [](auto& x) { return slice(x[0], -1, 2, 6); }, {{2, 6}});
  // Slices that tile x, as q, k and v from one projection: their gradients sum to one concatenation.
  GradCheck(
      "slices that tile",
      [](auto& x) { return slice(x[0], 1, 0, 1) * 2.0 + slice(x[0], 1, 1, 3) * x[1] + exp(slice(x[0], 1, 3, 4)); },
      {{2, 4}, {2, 2}});
  GradCheck("cat", [](auto& x) { return cat({x[0], x[1]}, 0); }, {{2, 3}, {1, 3}});
  GradCheck("index_select",
            [](auto& x) {
              std::vector<int64_t> idx = {2, 0, 2};
              const std::vector<int64_t> dims = {3};
              return index_select(x[0], 0, Tensor::FromData(std::span<const int64_t>(idx), dims));
            },
            {{3, 2}});
  GradCheck("gather",
            [](auto& x) {
              std::vector<int64_t> idx = {1, 1, 0, 2};
              const std::vector<int64_t> dims = {2, 2};
              return gather(x[0], 1, Tensor::FromData(std::span<const int64_t>(idx), dims));
            },
            {{3, 3}});
}

TEST(Autograd, AccumulatesAcrossBackwardCallsAndRespectsNoGrad) {
  std::vector<double> v = {1, 2};
  const std::vector<int64_t> dims = {2};
  Tensor w = Tensor::FromData(std::span<const double>(v), dims);
  w.requires_grad_();
  sum(w * w).backward();
  sum(w * 3.0).backward();
  EXPECT_THAT(w.grad().to_vector<double>(), ::testing::ElementsAre(5, 7));
  {
    NoGradGuard no_grad;
    EXPECT_FALSE((w * 2.0).requires_grad());
  }
  w.set_grad(Tensor());
  EXPECT_FALSE(w.grad().defined());
  Tensor y = sum(w * w);
  y.backward();
  EXPECT_THROW(y.backward(), Error);  // the tape was freed
  EXPECT_THROW(sum(w.detach()).backward(), Error);
}

// As PyTorch's threshold_backward, ReLU's gradient masks by the result, so the input has one reader: a
// bias add before the ReLU fuses with it rather than being stored for the backward pass.
TEST(Autograd, ReluGradientMasksByTheResult) {
  Tensor x = Tensor::FromData({-1.0f, 2.0f, 0.0f, 3.0f}, {4});
  x.requires_grad_();
  Tensor y = relu(x * 2.0);
  sum(y * 3.0).backward();
  const ir::Node* compare = nullptr;
  std::vector<const ir::Node*> pending = {x.grad().ir_value().node.get()};
  while (!pending.empty() && compare == nullptr) {
    const ir::Node* node = pending.back();
    pending.pop_back();
    if (node->op() == ir::OpKind::kLe) compare = node;
    for (const ir::Value& operand : node->operands()) pending.push_back(operand.node.get());
  }
  ASSERT_NE(compare, nullptr) << "no mask in the gradient's graph";
  EXPECT_EQ(compare->operand(0).node.get(), y.ir_value().node.get());
  EXPECT_THAT(x.grad().to_vector<float>(), ::testing::ElementsAre(0, 6, 0, 6));
}

TEST(Autograd, ForwardBackwardAndUpdateInOneGraph) {
  std::vector<float> v = {0.5f, -1.0f};
  const std::vector<int64_t> dims = {2};
  Tensor w = Tensor::FromData(std::span<const float>(v), dims);
  w.requires_grad_();
  Tensor loss = sum(w * w);
  loss.backward();
  {
    NoGradGuard no_grad;
    w.assign(w - w.grad() * 0.25);
  }
  sync();
  EXPECT_THAT(w.to_vector<float>(), ::testing::ElementsAre(0.25f, -0.5f));
  EXPECT_FLOAT_EQ(static_cast<float>(loss.item()), 1.25f);
}

// gelu and its gradient are one device opcode each (GELU, GELU_DERIVATIVE), the gradient one node: the
// bits of their formulas' ops traced one by one, (0.5 x) (1 + erf(x / sqrt 2)) and
// g (0.5 (1 + erf(x / sqrt 2)) + x e^(-x^2/2) / sqrt(2 pi)), in f32 and f64; but f32's gradient, whose
// derivative shares one exponential between erf and the pdf (vector_math.h), is held to within 4 half-ulps
// of 1 of the true derivative, times g, and the product's rounding.
TEST(Autograd, GeluAndItsGradientHaveTheBitsOfTheirFormulas) {
  std::mt19937_64 rng(12);
  std::normal_distribution<double> normal(0, 2.5);
  std::vector<double> values(3001), upstream(3001);
  for (double& v : values) v = normal(rng);
  for (double& v : upstream) v = normal(rng);
  values[0] = 0, values[1] = -0.0, values[2] = 40, values[3] = -40, values[4] = 1, values[5] = -1;
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    const Tensor g = cast(Tensor::FromData(upstream, {3001}), dtype);
    Tensor x = cast(Tensor::FromData(values, {3001}), dtype).detach();
    x.requires_grad_();
    const Tensor y = gelu(x);
    sum(y * g).backward();
    EXPECT_THAT(graph_text({x.grad()}), ::testing::Not(::testing::HasSubstr("Erf")));
    const Tensor xv = x.detach();
    const Tensor cdf = (erf(xv * M_SQRT1_2) + 1.0) * 0.5;
    const Tensor pdf = exp(xv * xv * -0.5) * (1.0 / std::sqrt(2 * M_PI));
    const Tensor want = g * (cdf + xv * pdf);
    const std::vector<double> got_y = cast(y, DType::kF64).to_vector<double>();
    const std::vector<double> want_y = cast(xv * 0.5 * (erf(xv * M_SQRT1_2) + 1.0), DType::kF64).to_vector<double>();
    for (size_t i = 0; i < got_y.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint64_t>(got_y[i]), std::bit_cast<uint64_t>(want_y[i]))
          << ir::DTypeName(dtype) << " gelu(" << values[i] << "): " << got_y[i] << " vs " << want_y[i];
    }
    const std::vector<double> got = cast(x.grad(), DType::kF64).to_vector<double>();
    const std::vector<double> expected = cast(want, DType::kF64).to_vector<double>();
    ASSERT_EQ(got.size(), expected.size());
    const std::vector<double> xs = cast(xv, DType::kF64).to_vector<double>();
    const std::vector<double> gs = cast(g, DType::kF64).to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) {
      if (dtype == DType::kF64) {
        ASSERT_EQ(std::bit_cast<uint64_t>(got[i]), std::bit_cast<uint64_t>(expected[i]))
            << "f64 x = " << values[i] << ": " << got[i] << " vs " << expected[i];
        continue;
      }
      const double x = xs[i];
      const double exact =
          gs[i] * (0.5 * (1 + std::erf(x * M_SQRT1_2)) + x * std::exp(-x * x / 2) / std::sqrt(2 * M_PI));
      EXPECT_LE(std::abs(got[i] - exact), std::abs(gs[i]) * 4 * 0x1p-24 + std::abs(exact) * 0x1p-24)
          << "f32 x = " << values[i] << ", g = " << gs[i] << ": " << got[i] << " vs " << exact;
    }
  }

  // bf16: computed in f32 from the widened input and rounded once (the gradient's derivative too, then
  // the product with g).
  const Tensor x16 = cast(Tensor::FromData(values, {3001}), DType::kBF16);
  const Tensor g16 = cast(Tensor::FromData(upstream, {3001}), DType::kBF16);
  Tensor leaf16 = x16.detach();
  leaf16.requires_grad_();
  const Tensor y16 = gelu(leaf16);
  sum(y16 * g16).backward();
  Tensor x32 = cast(x16, DType::kF32).detach();
  x32.requires_grad_();
  sum(gelu(x32)).backward();  // gelu's derivative at x32 in f32, times 1
  const Tensor derivative = cast(cast(x32.grad(), DType::kBF16), DType::kF32);
  const std::vector<float> want_y16 = cast(cast(gelu(x32), DType::kBF16), DType::kF32).to_vector<float>();
  const std::vector<float> want_g16 =
      cast(cast(cast(g16, DType::kF32) * derivative, DType::kBF16), DType::kF32).to_vector<float>();
  EXPECT_EQ(cast(y16, DType::kF32).to_vector<float>(), want_y16);
  EXPECT_EQ(cast(leaf16.grad(), DType::kF32).to_vector<float>(), want_g16);
}

}  // namespace autograd_test
}  // namespace lazyrt
