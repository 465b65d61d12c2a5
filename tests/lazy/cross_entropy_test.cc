// nn::cross_entropy: reductions, ignore_index, higher-rank logits and a large vocabulary against
// reference loops; gradients against finite differences; label errors.
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lazy/nn.h"
#include "lazy/tensor.h"
#include "tests/lazy/op_test_util.h"

namespace lazyrt {
namespace cross_entropy_test {

using ::testing::AllOf;
using testing::ErrorOf;
using testing::F64;
using testing::GradCheck;
using ::testing::HasSubstr;
using testing::I64;
using ::testing::Not;
using testing::PendingI64;
using testing::RandomValues;

// -log softmax(row)[label] in long double.
double RowLoss(const double* row, int64_t classes, int64_t label) {
  long double max = row[0], total = 0;
  for (int64_t c = 1; c < classes; ++c) max = std::max<long double>(max, row[c]);
  for (int64_t c = 0; c < classes; ++c) total += std::exp(row[c] - max);
  return static_cast<double>(-(row[label] - max - std::log(total)));
}

TEST(CrossEntropy, ReductionsAndIgnoreIndexMatchReferenceLoops) {
  std::mt19937_64 rng(9);
  const int64_t n = 6, classes = 3000;
  const std::vector<double> logits = RandomValues(n * classes, rng, -5, 5);
  const std::vector<int64_t> labels = {17, -100, 2999, 0, -100, 1234};
  const Tensor x = F64(logits, {n, classes});
  const std::vector<double> none = nn::cross_entropy(x, I64(labels, {n}), -100, "none").to_vector<double>();
  double sum = 0;
  int kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t l = labels[static_cast<size_t>(i)];
    const double want = l == -100 ? 0.0 : RowLoss(&logits[static_cast<size_t>(i * classes)], classes, l);
    EXPECT_NEAR(none[static_cast<size_t>(i)], want, 1e-12) << i;
    sum += want;
    kept += l != -100;
  }
  EXPECT_NEAR(nn::cross_entropy(x, I64(labels, {n}), -100, "sum").item(), sum, 1e-11);
  EXPECT_NEAR(nn::cross_entropy(x, I64(labels, {n})).item(), sum / kept, 1e-12);
  // Another ignore_index; all ignored: the mean is NaN, as torch.
  EXPECT_NEAR(nn::cross_entropy(x, I64({1, 1, 1, 1, 1, 1}, {n}), 1, "sum").item(), 0.0, 0.0);
  EXPECT_TRUE(std::isnan(nn::cross_entropy(x, I64({1, 1, 1, 1, 1, 1}, {n}), 1).item()));
  // No [N, C] one_hot and no matmul, forward or backward.
  Tensor param = F64(logits, {n, classes});
  param.requires_grad_();
  Tensor loss = nn::cross_entropy(param, I64(labels, {n}));
  loss.backward();
  EXPECT_THAT(graph_text({loss, param.grad()}), AllOf(Not(HasSubstr("OneHot")), Not(HasSubstr("MatMul"))));
  // Gradient (softmax - onehot) / kept on kept rows, 0 on ignored ones.
  const std::vector<double> grad = param.grad().to_vector<double>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t l = labels[static_cast<size_t>(i)];
    const double* row = &logits[static_cast<size_t>(i * classes)];
    long double max = row[0], total = 0;
    for (int64_t c = 1; c < classes; ++c) max = std::max<long double>(max, row[c]);
    for (int64_t c = 0; c < classes; ++c) total += std::exp(row[c] - max);
    for (int64_t c = 0; c < classes; c += 97) {
      const double p = static_cast<double>(std::exp(row[c] - max) / total);
      const double want = l == -100 ? 0.0 : (p - (c == l ? 1.0 : 0.0)) / kept;
      EXPECT_NEAR(grad[static_cast<size_t>(i * classes + c)], want, 1e-14) << i << "," << c;
    }
  }
}

TEST(CrossEntropy, HigherRankLogitsAndFiniteDifferences) {
  std::mt19937_64 rng(10);
  const std::vector<double> logits = RandomValues(2 * 4 * 3, rng);  // [N=2, C=4, d=3]
  const std::vector<int64_t> labels = {0, 3, -100, 2, 1, 3};        // [2, 3]
  const std::vector<double> none =
      nn::cross_entropy(F64(logits, {2, 4, 3}), I64(labels, {2, 3}), -100, "none").to_vector<double>();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t k = 0; k < 3; ++k) {
      double row[4];
      for (int64_t c = 0; c < 4; ++c) row[c] = logits[static_cast<size_t>((b * 4 + c) * 3 + k)];
      const int64_t l = labels[static_cast<size_t>(b * 3 + k)];
      EXPECT_NEAR(none[static_cast<size_t>(b * 3 + k)], l == -100 ? 0.0 : RowLoss(row, 4, l), 1e-12);
    }
  }
  EXPECT_NEAR(nn::cross_entropy(F64({1, 2, 3}, {3}), I64({2}, {})).item(),
              RowLoss(std::vector<double>{1, 2, 3}.data(), 3, 2), 1e-12);
  GradCheck("cross_entropy mean", [&](auto& in) { return nn::cross_entropy(in[0], I64(labels, {2, 3})); }, {{2, 4, 3}});
  GradCheck("cross_entropy sum",
            [&](auto& in) {
              return nn::cross_entropy(in[0], I64({1, 0, 2}, {3}), -100, "sum");
            },
            {{3, 3}});
}

// The gradient is one elementwise expression of the saved log-probabilities; it must give the bits of
// the ops cross_entropy is made of differentiated one by one (a gather's scatter, log_softmax's row sums),
// the sign of every zero included: upstream gradients of either sign and zeros ("none", weighted), a -inf
// logit (a probability of 0), labels the host knows or only the device does.
TEST(CrossEntropy, GradientHasTheBitsOfItsOpsDifferentiatedOneByOne) {
  std::mt19937_64 rng(11);
  const int64_t n = 37, classes = 10;
  std::vector<float> logits(static_cast<size_t>(n * classes));
  std::uniform_real_distribution<float> u(-6, 6);
  for (float& v : logits) v = u(rng);
  logits[3] = -std::numeric_limits<float>::infinity();   // row 0, not its label (0)
  logits[25] = -std::numeric_limits<float>::infinity();  // row 2, not its label (4)
  logits[41] = 60.0f;                                    // row 4: the other classes' probabilities underflow
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = i % 5 == 3 ? -100 : (i * 7) % classes;
  std::vector<float> weights(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) weights[static_cast<size_t>(i)] = i % 4 == 0 ? -1.5f : (i % 4 == 1 ? 0.0f : 2.0f);
  weights[2] = -0.0f;
  const Tensor w = Tensor::FromData(std::span<const float>(weights), {n});
  const auto bits = [](const Tensor& t) {
    std::vector<uint32_t> out;
    for (float v : t.to_vector<float>()) out.push_back(std::bit_cast<uint32_t>(v));
    return out;
  };
  for (const bool pending : {false, true}) {
    for (const std::string reduction : {"mean", "sum", "none"}) {
      const Tensor y = pending ? PendingI64(labels, {n}) : I64(labels, {n});
      Tensor fused = Tensor::FromData(std::span<const float>(logits), {n, classes});
      fused.requires_grad_();
      Tensor loss = nn::cross_entropy(fused, y, -100, reduction);
      (reduction == "none" ? sum(loss * w) : loss).backward();
      EXPECT_THAT(graph_text({fused.grad()}), Not(HasSubstr("ScatterAdd")));

      Tensor ops = Tensor::FromData(std::span<const float>(logits), {n, classes});
      ops.requires_grad_();
      const Tensor flat = reshape(y, {-1, 1});
      const Tensor kept = ne(flat, Scalar::Static(-100.0));
      const Tensor safe = where(kept, flat, zeros({}, DType::kI64));
      const Tensor losses = reshape(where(kept, neg(gather(log_softmax(ops, 1), 1, safe)), zeros({})), {-1});
      const Tensor total = sum(losses);
      Tensor want = reduction == "none"  ? sum(losses * w)
                    : reduction == "sum" ? total
                                         : total / sum(cast(kept, DType::kF32));
      want.backward();
      EXPECT_EQ(bits(loss), bits(reduction == "none" ? losses : want)) << reduction;
      EXPECT_EQ(bits(fused.grad()), bits(ops.grad())) << reduction << (pending ? ", labels pending" : "");
    }
  }
}

// A label only the device knows, out of range: reading the gradient alone reports it, as cross_entropy's.
TEST(CrossEntropy, GradientReadWithoutTheLossReportsALabelOutOfRange) {
  Tensor x = F64(std::vector<double>(6, 0.5), {2, 3});
  x.requires_grad_();
  const int line = __LINE__ + 1;
  nn::cross_entropy(x, PendingI64({1, 3}, {2})).backward();
  EXPECT_THAT(ErrorOf([&] { x.grad().to_vector<double>(); }),
              AllOf(HasSubstr("cross_entropy (called at tests/lazy/cross_entropy_test.cc:" + std::to_string(line)),
                    HasSubstr("index 3")));
}

TEST(CrossEntropy, LabelErrors) {
  const Tensor x = F64(std::vector<double>(6, 0.0), {2, 3});
  const int line = __LINE__ + 1;
  EXPECT_THAT(ErrorOf([&] {
                nn::cross_entropy(x, I64({0, 3}, {2}));
              }),
              AllOf(HasSubstr("cross_entropy: index 3 is out of range for a dimension of size 3 (valid: [0, 3)), at "
                              "position 1"),
                    HasSubstr("cross_entropy_test.cc:" + std::to_string(line))));
  EXPECT_THAT(ErrorOf([&] { nn::cross_entropy(x, I64({-1, 0}, {2})); }), HasSubstr("index -1"));
  const int read_line = __LINE__ + 1;
  const Tensor late = nn::cross_entropy(x, PendingI64({5, -100}, {2}));
  EXPECT_THAT(ErrorOf([&] { late.item(); }),
              AllOf(HasSubstr("cross_entropy (called at tests/lazy/cross_entropy_test.cc:" + std::to_string(read_line)),
                    HasSubstr("index 5")));
  EXPECT_THAT(ErrorOf([&] { nn::cross_entropy(x, I64({0, 1}, {2}), -100, "avg"); }), HasSubstr("reduction must be"));
  EXPECT_THAT(ErrorOf([&] { nn::cross_entropy(x, I64({0, 1, 1}, {3})); }), HasSubstr("integer labels"));
  EXPECT_THAT(ErrorOf([&] { nn::cross_entropy(x, F64({0, 1}, {2})); }), HasSubstr("integer labels"));
}

}  // namespace cross_entropy_test
}  // namespace lazyrt
