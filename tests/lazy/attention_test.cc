// scaled_dot_product_attention (the fused kernel, forward and backward) against the unfused composition
// softmax(q k^T * scale + mask) v built from existing ops, against a reference loop on the host, and
// against finite differences; plus PyTorch's edge semantics and errors.
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lazy/error.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace lazyrt {
namespace attention_test {

using ::testing::HasSubstr;
using Dims = std::vector<int64_t>;

constexpr double kInf = std::numeric_limits<double>::infinity();

int64_t Numel(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

Tensor Random(const Dims& dims, DType dtype, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(Numel(dims)));
  for (double& x : v) x = u(rng);
  if (dtype == DType::kF64) return Tensor::FromData(std::span<const double>(v), dims);
  std::vector<float> f(v.begin(), v.end());
  return Tensor::FromData(std::span<const float>(f), dims);
}

// A new leaf holding `t`'s values (so that each run accumulates its own gradients).
Tensor Fresh(const Tensor& t) {
  const Dims dims(t.dims().begin(), t.dims().end());
  if (t.dtype() == DType::kF64) return Tensor::FromData(std::span<const double>(t.to_vector<double>()), dims);
  return Tensor::FromData(std::span<const float>(t.to_vector<float>()), dims).to(t.dtype());  // exact for bf16
}

// A bool mask from host values (there is no bool FromData): true where keep[i].
Tensor BoolMask(const std::vector<int>& keep, const Dims& dims) {
  std::vector<float> v(keep.begin(), keep.end());
  return gt(Tensor::FromData(std::span<const float>(v), dims), Scalar::Static(0.5));
}

// The unfused composition: every [L, S] matrix materialized, softmax as the existing op computes it.
Tensor Unfused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal, double scale) {
  Tensor scores = matmul(q, transpose(k, -1, -2)) * ScalarArg(Scalar::Static(scale));
  const int64_t l = q.dim(-2), s = k.dim(-2);
  const Tensor minus_inf = full({}, Scalar::Static(-kInf), q.dtype());
  if (causal) {  // key j <= query i: tril(ones(L, S))
    Tensor keep = le(reshape(arange(0, s, 1), {1, s}), reshape(arange(0, l, 1), {l, 1}));
    scores = where(keep, scores, minus_inf);
  }
  if (mask.defined()) scores = mask.dtype() == DType::kBool ? where(mask, scores, minus_inf) : scores + mask;
  return matmul(softmax(scores, -1), v);
}

struct Case {
  Case(std::string name, Dims q, Dims k, Dims v, Dims mask = {}, bool bool_mask = false, bool causal = false,
       DType dtype = DType::kF32, std::optional<double> scale = std::nullopt)
      : name(std::move(name)),
        q(std::move(q)),
        k(std::move(k)),
        v(std::move(v)),
        mask(std::move(mask)),
        bool_mask(bool_mask),
        causal(causal),
        dtype(dtype),
        scale(scale) {}

  std::string name;
  Dims q, k, v;
  Dims mask;  // empty: none
  bool bool_mask;
  bool causal;
  DType dtype;
  std::optional<double> scale;
};

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " element " << i << " is " << got[i] << ", want NaN";
      continue;
    }
    worst = std::max(worst, std::abs(got[i] - want[i]));
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << what << " element " << i;
  }
  ::testing::Test::RecordProperty(what + "_max_abs_error", std::to_string(worst));
}

// Forward and the gradients of q, k and v (of sum(out * w)): fused against unfused.
void CheckAgainstUnfused(const Case& c) {
  SCOPED_TRACE(c.name);
  std::mt19937_64 rng(std::hash<std::string>{}(c.name));
  const Tensor q0 = Random(c.q, c.dtype, rng), k0 = Random(c.k, c.dtype, rng), v0 = Random(c.v, c.dtype, rng);
  Tensor mask;
  if (!c.mask.empty()) {
    if (c.bool_mask) {
      std::vector<int> keep(static_cast<size_t>(Numel(c.mask)));
      std::bernoulli_distribution b(0.7);
      for (int& x : keep) x = b(rng) ? 1 : 0;
      mask = BoolMask(keep, c.mask);
    } else {
      mask = Random(c.mask, c.dtype, rng, -2, 2);
    }
  }
  const double scale = c.scale.value_or(1.0 / std::sqrt(static_cast<double>(c.q.back())));
  auto run = [&](bool fused) {
    Tensor q = Fresh(q0), k = Fresh(k0), v = Fresh(v0);
    q.requires_grad_();
    k.requires_grad_();
    v.requires_grad_();
    Tensor out = fused ? scaled_dot_product_attention(q, k, v, mask, 0.0, c.causal, c.scale)
                       : Unfused(q, k, v, mask, c.causal, scale);
    std::mt19937_64 wrng(7);
    Tensor w = Random(Dims(out.dims().begin(), out.dims().end()), c.dtype, wrng);
    sum(out * w).backward();
    return std::vector<std::vector<double>>{out.to_vector<double>(), q.grad().to_vector<double>(),
                                            k.grad().to_vector<double>(), v.grad().to_vector<double>()};
  };
  const auto fused = run(true);
  const auto unfused = run(false);
  // f32: both accumulate in f32 in different orders (blocks of 64 keys, online rescaling).
  const double tol = c.dtype == DType::kF64 ? 1e-12 : 2e-5;
  const char* names[] = {"output", "dq", "dk", "dv"};
  for (size_t i = 0; i < 4; ++i) ExpectClose(fused[i], unfused[i], tol, names[i]);
}

TEST(Attention, MatchesUnfusedComposition) {
  CheckAgainstUnfused({"plain", {2, 3, 70, 16}, {2, 3, 70, 16}, {2, 3, 70, 16}});
  CheckAgainstUnfused({"L != S, Ev != E", {2, 65, 8}, {2, 129, 8}, {2, 129, 24}});
  CheckAgainstUnfused({"one row, one key", {3, 1, 4}, {3, 1, 4}, {3, 1, 2}});
  CheckAgainstUnfused({"E = 1", {2, 5, 1}, {2, 7, 1}, {2, 7, 3}});
  CheckAgainstUnfused({"rank 2", {9, 6}, {11, 6}, {11, 5}});
  CheckAgainstUnfused({"explicit scale", {2, 10, 8}, {2, 12, 8}, {2, 12, 8}, {}, false, false, DType::kF32, 0.7});
  CheckAgainstUnfused({"f64", {2, 2, 67, 12}, {2, 2, 70, 12}, {2, 2, 70, 10}, {}, false, false, DType::kF64});
}

TEST(Attention, CausalIsTopLeftAligned) {
  CheckAgainstUnfused({"causal square", {2, 2, 130, 16}, {2, 2, 130, 16}, {2, 2, 130, 16}, {}, false, true});
  CheckAgainstUnfused({"causal L < S", {2, 70, 8}, {2, 100, 8}, {2, 100, 8}, {}, false, true});
  CheckAgainstUnfused({"causal L > S", {2, 100, 8}, {2, 70, 8}, {2, 70, 6}, {}, false, true});
  CheckAgainstUnfused({"causal f64", {1, 3, 129, 8}, {1, 3, 129, 8}, {1, 3, 129, 8}, {}, false, true, DType::kF64});
}

TEST(Attention, BoolAndFloatMasksBroadcast) {
  CheckAgainstUnfused({"bool [L, S]", {2, 3, 70, 8}, {2, 3, 90, 8}, {2, 3, 90, 8}, {70, 90}, true});
  CheckAgainstUnfused(
      {"bool [B, 1, 1, S] key padding", {2, 3, 70, 8}, {2, 3, 90, 8}, {2, 3, 90, 8}, {2, 1, 1, 90}, true});
  CheckAgainstUnfused({"float [H, L, S]", {2, 3, 33, 8}, {2, 3, 66, 8}, {2, 3, 66, 4}, {3, 33, 66}});
  CheckAgainstUnfused({"float [B, 1, L, 1]", {2, 3, 33, 8}, {2, 3, 66, 8}, {2, 3, 66, 4}, {2, 1, 33, 1}});
  CheckAgainstUnfused({"float f64 [S]", {2, 2, 20, 4}, {2, 2, 20, 4}, {2, 2, 20, 4}, {20}, false, false, DType::kF64});
}

TEST(Attention, BatchDimsBroadcastAndGradientsSumBack) {
  // k and v shared by every batch element; q shared by every head.
  CheckAgainstUnfused({"shared k, v", {2, 3, 20, 8}, {3, 30, 8}, {3, 30, 8}});
  CheckAgainstUnfused({"shared q", {1, 3, 20, 8}, {2, 3, 30, 8}, {2, 1, 30, 5}});
  // L = S and E = Ev: the gradients come out as slices of one [..., 3, L, E] array.
  CheckAgainstUnfused({"shared k, v, L = S", {2, 3, 20, 8}, {3, 20, 8}, {3, 20, 8}});
  CheckAgainstUnfused({"shared q, L = S", {1, 3, 20, 8}, {2, 3, 20, 8}, {2, 1, 20, 8}, {}, false, true});
}

// The fused result against a loop over the definition in f64, independently of the ops above.
TEST(Attention, MatchesReferenceLoop) {
  const int64_t l = 67, s = 75, e = 5, ev = 3;
  std::mt19937_64 rng(11);
  const Tensor q = Random({l, e}, DType::kF64, rng), k = Random({s, e}, DType::kF64, rng),
               v = Random({s, ev}, DType::kF64, rng), bias = Random({l, s}, DType::kF64, rng);
  const std::vector<double> hq = q.to_vector<double>(), hk = k.to_vector<double>(), hv = v.to_vector<double>(),
                            hb = bias.to_vector<double>();
  const std::vector<double> got = scaled_dot_product_attention(q, k, v, bias, 0.0, false, 0.3).to_vector<double>();
  for (int64_t i = 0; i < l; ++i) {
    std::vector<double> p(static_cast<size_t>(s));
    double max = -kInf, total = 0;
    for (int64_t j = 0; j < s; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < e; ++c) dot += hq[static_cast<size_t>(i * e + c)] * hk[static_cast<size_t>(j * e + c)];
      p[static_cast<size_t>(j)] = dot * 0.3 + hb[static_cast<size_t>(i * s + j)];
      max = std::max(max, p[static_cast<size_t>(j)]);
    }
    for (double& x : p) total += (x = std::exp(x - max));
    for (int64_t c = 0; c < ev; ++c) {
      double o = 0;
      for (int64_t j = 0; j < s; ++j) o += p[static_cast<size_t>(j)] * hv[static_cast<size_t>(j * ev + c)];
      EXPECT_NEAR(got[static_cast<size_t>(i * ev + c)], o / total, 1e-12) << i << ", " << c;
    }
  }
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(5);
  const Dims dq = {2, 4, 3}, dk = {2, 5, 3}, dv = {2, 5, 2};
  const Tensor mask = Random({4, 5}, DType::kF64, rng);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "float mask");
    std::vector<std::vector<double>> values = {Random(dq, DType::kF64, rng).to_vector<double>(),
                                               Random(dk, DType::kF64, rng).to_vector<double>(),
                                               Random(dv, DType::kF64, rng).to_vector<double>()};
    const std::vector<Dims> shapes = {dq, dk, dv};
    const Tensor w = Random({2, 4, 2}, DType::kF64, rng);
    auto loss = [&](const std::vector<Tensor>& x) {
      return sum(scaled_dot_product_attention(x[0], x[1], x[2], causal ? Tensor() : mask, 0.0, causal) * w);
    };
    auto tensors = [&](const std::vector<std::vector<double>>& vals) {
      std::vector<Tensor> xs;
      for (size_t i = 0; i < 3; ++i) xs.push_back(Tensor::FromData(std::span<const double>(vals[i]), shapes[i]));
      return xs;
    };
    std::vector<Tensor> params = tensors(values);
    for (Tensor& p : params) p.requires_grad_();
    loss(params).backward();
    const double eps = 1e-6;
    for (size_t i = 0; i < 3; ++i) {
      const std::vector<double> analytic = params[i].grad().to_vector<double>();
      for (size_t j = 0; j < values[i].size(); ++j) {
        auto plus = values, minus = values;
        plus[i][j] += eps;
        minus[i][j] -= eps;
        const double numeric = (loss(tensors(plus)).item() - loss(tensors(minus)).item()) / (2 * eps);
        EXPECT_NEAR(analytic[j], numeric, 1e-6) << "input " << i << " element " << j;
      }
    }
  }
}

TEST(Attention, DefaultScaleIsInverseSqrtOfE) {
  std::mt19937_64 rng(3);
  const Tensor q = Random({2, 9, 16}, DType::kF64, rng), k = Random({2, 9, 16}, DType::kF64, rng),
               v = Random({2, 9, 4}, DType::kF64, rng);
  ExpectClose(scaled_dot_product_attention(q, k, v).to_vector<double>(),
              scaled_dot_product_attention(q, k, v, Tensor(), 0.0, false, 0.25).to_vector<double>(), 1e-15, "out");
}

// As PyTorch: a row whose every key is masked out is NaN (softmax of -inf scores), and so are the
// gradients that row reaches; the other rows are unaffected.
TEST(Attention, FullyMaskedRowIsNaNAsPyTorch) {
  std::mt19937_64 rng(9);
  const int64_t l = 4, s = 6;
  std::vector<int> keep(static_cast<size_t>(l * s), 1);
  for (int64_t j = 0; j < s; ++j) keep[static_cast<size_t>(2 * s + j)] = 0;  // row 2 sees nothing
  const Tensor mask = BoolMask(keep, {l, s});
  const Tensor q = Random({l, 3}, DType::kF32, rng), k = Random({s, 3}, DType::kF32, rng),
               v = Random({s, 2}, DType::kF32, rng);
  const std::vector<double> fused = scaled_dot_product_attention(q, k, v, mask).to_vector<double>();
  const std::vector<double> unfused = Unfused(q, k, v, mask, false, 1 / std::sqrt(3.0)).to_vector<double>();
  for (int64_t i = 0; i < l; ++i) {
    for (int64_t c = 0; c < 2; ++c) {
      const size_t at = static_cast<size_t>(i * 2 + c);
      if (i == 2) {
        EXPECT_TRUE(std::isnan(fused[at]) && std::isnan(unfused[at]));
      } else {
        EXPECT_NEAR(fused[at], unfused[at], 1e-6);
      }
    }
  }
}

// As torch: no keys at all give zeros (an empty matrix product), not NaN.
TEST(Attention, NoKeysGiveZeros) {
  const Tensor q = ones({2, 3, 4}), k = zeros({2, 0, 4}), v = zeros({2, 0, 5});
  EXPECT_EQ(scaled_dot_product_attention(q, k, v).to_vector<double>(), std::vector<double>(30, 0.0));
}

// PyTorch differentiates an added mask; lazyrt gives it the same gradient (by the unfused path).
TEST(Attention, FloatMaskThatRequiresGradGetsItsGradient) {
  std::mt19937_64 rng(4);
  const Tensor q = Random({2, 5, 3}, DType::kF64, rng), k = Random({2, 6, 3}, DType::kF64, rng),
               v = Random({2, 6, 2}, DType::kF64, rng);
  Tensor mask = Random({5, 6}, DType::kF64, rng);
  Tensor mask2 = Tensor::FromData(std::span<const double>(mask.to_vector<double>()), {5, 6});
  mask.requires_grad_();
  mask2.requires_grad_();
  sum(scaled_dot_product_attention(q, k, v, mask) * q.sum({-1}, true)).backward();
  sum(Unfused(q, k, v, mask2, false, 1 / std::sqrt(3.0)) * q.sum({-1}, true)).backward();
  ASSERT_TRUE(mask.grad().defined());
  ExpectClose(mask.grad().to_vector<double>(), mask2.grad().to_vector<double>(), 1e-12, "dmask");
  // With dropout too: the same draws as the fused kernels (f64), so the same output.
  manual_seed(77);
  const std::vector<double> unfused = scaled_dot_product_attention(q, k, v, mask, 0.4).to_vector<double>();
  manual_seed(77);
  const std::vector<double> fused = scaled_dot_product_attention(q, k, v, mask2.detach(), 0.4).to_vector<double>();
  ExpectClose(unfused, fused, 1e-12, "dropout");
}

// Dropout draws in the kernels what rand() of the scores' shape draws from the same seed and stream (the
// first random op after manual_seed), forward and backward: the composition with those draws matches. Also
// past the kernels' steps (512 keys forward, 512 queries backward): the draws' positions are absolute.
TEST(Attention, DropoutDrawsAsRandAndItsGradientsFollow) {
  std::mt19937_64 rng(8);
  const double p = 0.3;
  for (const auto& [l, s] : {std::pair<int64_t, int64_t>{70, 90}, {600, 530}}) {
    const Dims dq = {2, 3, l, 8}, dk = {2, 3, s, 8}, dv = {2, 3, s, 5}, scores = {2, 3, l, s};
    const Tensor q0 = Random(dq, DType::kF64, rng), k0 = Random(dk, DType::kF64, rng),
                 v0 = Random(dv, DType::kF64, rng);
    const Tensor w = Random({2, 3, l, 5}, DType::kF64, rng);
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(causal ? "causal" : "plain") + " L " + std::to_string(l) + " S " + std::to_string(s));
      auto run = [&](bool fused) {
        Tensor q = Fresh(q0), k = Fresh(k0), v = Fresh(v0);
        for (Tensor* x : {&q, &k, &v}) x->requires_grad_();
        manual_seed(1234);
        Tensor out;
        if (fused) {
          out = scaled_dot_product_attention(q, k, v, Tensor(), p, causal);
        } else {
          const Tensor keep =
              ge(rand(scores, Scalar::Static(0.0), Scalar::Static(1.0), DType::kF64), Scalar::Static(p));
          Tensor scaled = matmul(q, transpose(k, -1, -2)) * ScalarArg(Scalar::Static(1 / std::sqrt(8.0)));
          if (causal) {
            Tensor tril = le(reshape(arange(0, s, 1), {1, s}), reshape(arange(0, l, 1), {l, 1}));
            scaled = where(tril, scaled, full({}, Scalar::Static(-kInf), DType::kF64));
          }
          const Tensor dropped =
              where(keep, softmax(scaled, -1) * ScalarArg(Scalar::Static(1 / (1 - p))), zeros({}, DType::kF64));
          out = matmul(dropped, v);
        }
        sum(out * w).backward();
        return std::vector<std::vector<double>>{out.to_vector<double>(), q.grad().to_vector<double>(),
                                                k.grad().to_vector<double>(), v.grad().to_vector<double>()};
      };
      const auto fused = run(true);
      const auto unfused = run(false);
      const char* names[] = {"output", "dq", "dk", "dv"};
      for (size_t i = 0; i < 4; ++i) ExpectClose(fused[i], unfused[i], 1e-12, names[i]);
    }
    // Everything dropped: zeros, as torch's dropout with p = 1.
    const Tensor all = scaled_dot_product_attention(q0, k0, v0, Tensor(), 1.0);
    EXPECT_EQ(all.to_vector<double>(), std::vector<double>(static_cast<size_t>(2 * 3 * l * 5), 0.0));
  }
}

// bf16 q, k and v (views of one [B, T, 3, H, D] projection, as the GPT's attention reads them, or tensors of
// their own; causal, masked by bool or bf16): the output and the gradients are bf16, and the values those
// of the f64 attention of the same numbers within bf16's rounding. The products are bf16 with f32 sums,
// softmax and sums f32; the gradients' sums read P and dS rounded (bf16's relative 2^-9).
TEST(Attention, Bf16OperandsGiveBf16ResultsWithF32Softmax) {
  std::mt19937_64 rng(21);
  const int64_t b = 2, t = 70, h = 3, d = 16;
  const Tensor projection = Random({b, t, 3, h, d}, DType::kF32, rng).to(DType::kBF16);
  const Tensor w = Random({b, h, t, d}, DType::kF32, rng).to(DType::kBF16);
  const Tensor bool_mask = gt(Random({t, t}, DType::kF32, rng), Scalar::Static(-0.6));
  const Tensor bf16_mask = Random({h, t, t}, DType::kF32, rng).to(DType::kBF16);
  for (const auto& [name, viewed, causal, mask] :
       {std::tuple<const char*, bool, bool, Tensor>{"heads of the projection, causal", true, true, Tensor()},
        {"tensors of their own", false, false, Tensor()},
        {"bool mask", false, false, bool_mask},
        {"bf16 mask", true, false, bf16_mask}}) {
    SCOPED_TRACE(name);
    auto run = [&](DType dtype) {
      const Tensor qkv = Fresh(projection.to(dtype));
      std::vector<Tensor> leaves = {qkv};
      std::vector<Tensor> heads;
      for (int64_t part = 0; part < 3; ++part) {
        heads.push_back(permute(reshape(slice(qkv, 2, part, part + 1), {b, t, h, d}), {0, 2, 1, 3}));
      }
      if (!viewed) leaves = heads = {Fresh(heads[0]), Fresh(heads[1]), Fresh(heads[2])};
      for (Tensor& x : leaves) x.requires_grad_();
      if (viewed) {
        for (int64_t part = 0; part < 3; ++part) {
          heads[static_cast<size_t>(part)] =
              permute(reshape(slice(leaves[0], 2, part, part + 1), {b, t, h, d}), {0, 2, 1, 3});
        }
      }
      const Tensor m = mask.defined() && mask.dtype() != DType::kBool ? mask.to(dtype) : mask;
      const Tensor out = scaled_dot_product_attention(heads[0], heads[1], heads[2], m, 0.0, causal);
      EXPECT_EQ(out.dtype(), dtype);
      sum(out * w.to(dtype)).backward();
      std::vector<std::vector<double>> values = {out.to_vector<double>()};
      for (const Tensor& x : leaves) {
        EXPECT_EQ(x.grad().dtype(), dtype);
        values.push_back(x.grad().to_vector<double>());
      }
      return values;
    };
    const auto bf16 = run(DType::kBF16);
    const auto f64 = run(DType::kF64);
    ExpectClose(bf16[0], f64[0], 6e-3, "output");
    for (size_t i = 1; i < f64.size(); ++i) ExpectClose(bf16[i], f64[i], 2e-2, "gradient");
  }
  // Dropout draws the same probabilities whatever the dtype (the draws are the scores' positions').
  auto dropped = [&](DType dtype) {
    Tensor q = Fresh(projection.to(dtype));
    q.requires_grad_();
    const Tensor heads = permute(reshape(slice(q, 2, 0, 1), {b, t, h, d}), {0, 2, 1, 3});
    manual_seed(99);
    const Tensor out = scaled_dot_product_attention(heads, heads, heads, Tensor(), 0.3, true);
    sum(out * w.to(dtype)).backward();
    return std::vector<std::vector<double>>{out.to_vector<double>(), q.grad().to_vector<double>()};
  };
  const auto bf16 = dropped(DType::kBF16);
  const auto f64 = dropped(DType::kF64);
  ExpectClose(bf16[0], f64[0], 1e-2, "output with dropout");
  ExpectClose(bf16[1], f64[1], 3e-2, "gradient with dropout");
}

template <typename Fn>
void ExpectError(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& part : parts) EXPECT_THAT(std::string(e.what()), HasSubstr(part));
    EXPECT_THAT(std::string(e.what()), HasSubstr("attention_test.cc"));  // the caller's location
  }
}

TEST(Attention, ErrorsNameTheShapesAndTheValidOnes) {
  const Tensor q = zeros({2, 4, 8}), k = zeros({2, 6, 8}), v = zeros({2, 6, 3});
  const char* op = "scaled_dot_product_attention";
  ExpectError([&] { scaled_dot_product_attention(zeros({8}), k, v); }, {op, "rank >= 2", "f32[8]"});
  ExpectError([&] { scaled_dot_product_attention(q, zeros({2, 6, 7}), v); }, {op, "k's last dim = E", "f32[2,6,7]"});
  ExpectError([&] { scaled_dot_product_attention(q, k, zeros({2, 5, 3})); }, {op, "second-to-last = S"});
  ExpectError([&] { scaled_dot_product_attention(zeros({3, 4, 8}), k, v); }, {op, "cannot be broadcast"});
  ExpectError([&] { scaled_dot_product_attention(q.to(DType::kF64), k, v); }, {op, "one dtype", "f64[2,4,8]"});
  ExpectError([&] { scaled_dot_product_attention(q.to(DType::kI32), k.to(DType::kI32), v.to(DType::kI32)); },
              {op, "f32, f64 or bf16"});
  ExpectError([&] { scaled_dot_product_attention(q.to(DType::kF16), k.to(DType::kF16), v.to(DType::kF16)); },
              {op, "convert f16 first", "f16[2,4,8]"});
  ExpectError(
      [&] {
        scaled_dot_product_attention(q, k, v, zeros({4, 5}));
      },
      {op, "broadcast to the scores", "[2,4,6]"});
  ExpectError([&] { scaled_dot_product_attention(q, k, v, zeros({3, 4, 6})); }, {op, "broadcast to the scores"});
  ExpectError([&] { scaled_dot_product_attention(q, k, v, zeros({4, 6}, DType::kF64)); }, {op, "bool or q's dtype"});
  ExpectError([&] { scaled_dot_product_attention(q, k, v, zeros({4, 6}), 0.0, true); }, {op, "is_causal", "attn_mask"});
  ExpectError([&] { scaled_dot_product_attention(q, k, v, Tensor(), 1.5); },
              {op, "dropout_p must be in [0, 1]", "1.5"});
  ExpectError([&] { scaled_dot_product_attention(q, k, v, Tensor(), 0.0, false, kInf); }, {op, "finite"});
  ExpectError([&] { scaled_dot_product_attention(zeros({2, 4, 0}), zeros({2, 6, 0}), v); }, {op, "E = 0"});
}

}  // namespace attention_test
}  // namespace lazyrt
