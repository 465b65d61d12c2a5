// Conformance with PyTorch (1.13) op by op, at the edges: dtype promotion with 0-dim tensors, ties,
// empty and 0-dim tensors, NaN and infinities, and the inputs PyTorch refuses. Each expectation is what
// PyTorch does (checked with PyTorch by hand, tests/numerics/compare_with_torch.py for the random
// inputs), or what README.md's "Semantics" section says lazyrt does instead and why. A change that
// drifts from either fails here.
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace lazyrt {
namespace conformance_test {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor F32(const std::vector<float>& v, const std::vector<int64_t>& dims) {
  return Tensor::FromData(std::span<const float>(v), dims);
}
Tensor F64(const std::vector<double>& v, const std::vector<int64_t>& dims) {
  return Tensor::FromData(std::span<const double>(v), dims);
}
Tensor I32(const std::vector<int32_t>& v, const std::vector<int64_t>& dims) {
  return Tensor::FromData(std::span<const int32_t>(v), dims);
}
Tensor I64(const std::vector<int64_t>& v, const std::vector<int64_t>& dims) {
  return Tensor::FromData(std::span<const int64_t>(v), dims);
}
// An i64 tensor whose values only the device knows when the next op is traced (pending IR).
Tensor PendingI64(const std::vector<int64_t>& v, const std::vector<int64_t>& dims) {
  Tensor t = I64(v, dims) * int64_t{1};
  EXPECT_TRUE(t.is_pending());
  return t;
}
std::vector<int64_t> DimsOf(const Tensor& t) { return {t.dims().begin(), t.dims().end()}; }

// The message of the lazyrt::Error `f` throws ("" and a test failure if none).
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

// ---- dtype promotion ------------------------------------------------------------------------------

struct PromotionCase {
  DType a;
  std::vector<int64_t> a_dims;
  DType b;
  std::vector<int64_t> b_dims;
  DType want;
};

Tensor Ones(DType dtype, const std::vector<int64_t>& dims) { return ones(dims, dtype); }

// torch.result_type: the dimensioned operands decide; a 0-dim operand only when its category
// (bool < integer < floating) is higher; two 0-dim operands promote as usual.
TEST(Conformance, ZeroDimTensorsPromoteOnlyAcrossCategories) {
  const PromotionCase cases[] = {
      {DType::kF32, {3}, DType::kF64, {}, DType::kF32},  {DType::kF64, {}, DType::kF32, {3}, DType::kF32},
      {DType::kI32, {3}, DType::kI64, {}, DType::kI32},  {DType::kI32, {3}, DType::kF32, {}, DType::kF32},
      {DType::kI32, {3}, DType::kF64, {}, DType::kF64},  {DType::kI64, {2, 2}, DType::kF32, {}, DType::kF32},
      {DType::kBool, {3}, DType::kI64, {}, DType::kI64}, {DType::kBF16, {3}, DType::kF64, {}, DType::kBF16},
      {DType::kF32, {}, DType::kF64, {}, DType::kF64},   {DType::kI32, {}, DType::kI64, {}, DType::kI64},
      {DType::kF32, {3}, DType::kF64, {3}, DType::kF64}, {DType::kF32, {1}, DType::kF64, {}, DType::kF32},
      {DType::kI32, {3}, DType::kI64, {1}, DType::kI64}, {DType::kF16, {0}, DType::kF32, {}, DType::kF16},
  };
  for (const PromotionCase& c : cases) {
    SCOPED_TRACE(Shape(c.a, c.a_dims).ToString() + " with " + Shape(c.b, c.b_dims).ToString());
    const Tensor a = Ones(c.a, c.a_dims), b = Ones(c.b, c.b_dims);
    EXPECT_EQ(ir::DTypeName((a + b).dtype()), ir::DTypeName(c.want));
    EXPECT_EQ(ir::DTypeName(maximum(a, b).dtype()), ir::DTypeName(c.want));
    EXPECT_EQ(ir::DTypeName(where(gt(a, Scalar::Static(0)), a, b).dtype()), ir::DTypeName(c.want));
  }
}

// f32[3] + f64[] computes in f32: the f64 value is rounded to f32 first (it is not added in f64).
TEST(Conformance, ZeroDimOperandIsRoundedToTheResultType) {
  const Tensor a = F32({1.0f, 2.0f, 3.0f}, {3});
  const Tensor b = F64({0.1}, {});
  const std::vector<float> got = (a + b).to_vector<float>();
  EXPECT_THAT(got, ElementsAre(1.0f + 0.1f, 2.0f + 0.1f, 3.0f + 0.1f));
  // A comparison promotes the same way: i32[3] == f64[] compares in f64 (2 != 2.5), i32[3] == i64[] in i32.
  EXPECT_THAT(eq(I32({1, 2, 3}, {3}), F64({2.5}, {})).to_vector<uint8_t>(), ElementsAre(0, 0, 0));
  EXPECT_THAT(eq(I32({1, 2, 3}, {3}), I64({2}, {})).to_vector<uint8_t>(), ElementsAre(0, 1, 0));
  // Each gradient keeps its operand's dtype.
  Tensor x = F32({1.0f, 2.0f}, {2});
  Tensor s = F64({3.0}, {});
  x.requires_grad_();
  s.requires_grad_();
  sum(x * s).backward();
  EXPECT_TRUE(x.grad().dtype() == DType::kF32);
  EXPECT_TRUE(s.grad().dtype() == DType::kF64);
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(3.0f, 3.0f));
  EXPECT_THAT(s.grad().to_vector<double>(), ElementsAre(3.0));
}

// A host scalar takes the tensor's dtype; a fractional one with an integer tensor computes in f32.
TEST(Conformance, HostScalarsFollowTheTensor) {
  EXPECT_TRUE((I32({1, 2}, {2}) * 2).dtype() == DType::kI32);
  EXPECT_TRUE((I32({1, 2}, {2}) * 2.5).dtype() == DType::kF32);
  EXPECT_TRUE((F64({1.0}, {1}) * 2.5f).dtype() == DType::kF64);
  EXPECT_THAT((I32({1, 2}, {2}) * 2.5).to_vector<float>(), ElementsAre(2.5f, 5.0f));
}

// torch.cat promotes its tensors' dtypes; each gradient comes back in its tensor's dtype.
TEST(Conformance, CatPromotes) {
  Tensor a = F32({1.0f, 2.0f}, {2});
  Tensor b = F64({0.1}, {1});
  a.requires_grad_();
  b.requires_grad_();
  const Tensor c = cat({a, b, I32({7}, {1})}, 0);
  EXPECT_TRUE(c.dtype() == DType::kF64);
  EXPECT_THAT(c.to_vector<double>(), ElementsAre(1.0, 2.0, 0.1, 7.0));
  sum(c * F64({1.0, 2.0, 3.0, 4.0}, {4})).backward();
  EXPECT_TRUE(a.grad().dtype() == DType::kF32);
  EXPECT_THAT(a.grad().to_vector<float>(), ElementsAre(1.0f, 2.0f));
  EXPECT_THAT(b.grad().to_vector<double>(), ElementsAre(3.0));
  EXPECT_TRUE(cat({I32({1}, {1}), F32({2.0f}, {1})}, 0).dtype() == DType::kF32);
}

// ---- one_hot ----------------------------------------------------------------------------------------

TEST(Conformance, OneHotIsI64AndRefusesIndicesOutOfRange) {
  const Tensor hot = one_hot(I64({2, 0}, {2}), 3);
  EXPECT_TRUE(hot.dtype() == DType::kI64);
  EXPECT_EQ(DimsOf(hot), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(hot.to_vector<int64_t>(), ElementsAre(0, 0, 1, 1, 0, 0));
  EXPECT_THAT(one_hot(I32({1}, {}), 2, DType::kF32).to_vector<float>(), ElementsAre(0.0f, 1.0f));

  // Indices known when the op is called: refused there, naming the index and the caller's line.
  const int line = __LINE__ + 1;
  const std::string too_big = ErrorOf([] { one_hot(I64({1, 3}, {2}), 3); });
  EXPECT_THAT(
      too_big,
      HasSubstr(
          "one_hot: index 3 is out of range for a dimension of size 3 (valid: [0, 3)), at position 1 of index i64[2]"));
  EXPECT_THAT(too_big, HasSubstr("conformance_test.cc:" + std::to_string(line)));
  EXPECT_THAT(ErrorOf([] { one_hot(I32({-1}, {1}), 3); }), HasSubstr("index -1"));

  // Indices only the device knows: in range they give the same values, out of range the error comes
  // when the result (or anything computed from it) is read.
  EXPECT_THAT(one_hot(PendingI64({2, 0}, {2}), 3).to_vector<int64_t>(), ElementsAre(0, 0, 1, 1, 0, 0));
  EXPECT_THAT(one_hot(PendingI64({1}, {1}), 2, DType::kBool).to_vector<uint8_t>(), ElementsAre(0, 1));
  const Tensor late = one_hot(PendingI64({0, 7}, {2}), 3, DType::kF32);
  EXPECT_THAT(ErrorOf([&] { sum(late).item(); }), AllOf(HasSubstr("index 7"), HasSubstr("size 3")));
  const Tensor negative = one_hot(PendingI64({-2}, {1}), 3);
  EXPECT_THAT(ErrorOf([&] { negative.to_vector<int64_t>(); }), HasSubstr("index -2"));
  EXPECT_THAT(ErrorOf([] { one_hot(I64({0}, {1}), 0); }), HasSubstr("num_classes > 0"));
  EXPECT_THAT(ErrorOf([] { one_hot(F32({0.0f}, {1}), 2); }), HasSubstr("integer index"));
}

// ---- pow --------------------------------------------------------------------------------------------

TEST(Conformance, IntegerPow) {
  // By a negative host integer: refused, as PyTorch ("Integers to negative integer powers").
  EXPECT_THAT(ErrorOf([] {
                pow(I32({2, 3}, {2}), Scalar(-1));
              }),
              AllOf(HasSubstr("pow: integers to negative integer powers are not allowed"), HasSubstr("i32[2]")));
  EXPECT_THAT(ErrorOf([] { pow(I64({2}, {1}), Scalar(int64_t{-3})); }), HasSubstr("negative integer powers"));
  // By a negative integer tensor, PyTorch computes (as here) the integer part: 1 for 1, +-1 for -1,
  // else 0.
  EXPECT_THAT(pow(I32({2, 1, -1, -1, 3}, {5}), I32({-1, -2, -3, -2, 0}, {5})).to_vector<int32_t>(),
              ElementsAre(0, 1, -1, 1, 1));
  EXPECT_THAT(pow(I64({-3, 2}, {2}), Scalar(3)).to_vector<int64_t>(), ElementsAre(-27, 8));
  const Tensor root = pow(I32({4, 9}, {2}), Scalar(0.5));  // a fractional exponent computes in f32
  EXPECT_TRUE(root.dtype() == DType::kF32);
  EXPECT_THAT(root.to_vector<float>(), ElementsAre(2.0f, 3.0f));
  EXPECT_THAT(pow(F32({2.0f}, {1}), Scalar(-1)).to_vector<float>(), ElementsAre(0.5f));  // floats: fine
}

// d/da pow(a, b) = b a^(b-1) but 0 where b == 0; d/db = pow(a, b) ln a but 0 where a == 0 and b >= 0.
TEST(Conformance, PowGradientsAtZero) {
  Tensor a = F32({0.0f, 0.0f, 0.0f, 0.0f, 2.0f}, {5});
  Tensor b = F32({0.0f, 2.0f, 0.5f, -1.0f, 0.0f}, {5});
  a.requires_grad_();
  b.requires_grad_();
  sum(pow(a, b)).backward();
  EXPECT_THAT(a.grad().to_vector<double>(), ElementsAre(0.0, 0.0, kInf, -kInf, 0.0));
  // 0^-1 = inf, and inf * ln 0 = -inf (PyTorch's value as well).
  EXPECT_THAT(b.grad().to_vector<double>(), ElementsAre(0.0, 0.0, 0.0, -kInf, std::log(2.0f)));

  for (const Scalar zero : {Scalar(0.0), Scalar::Static(0.0)}) {
    SCOPED_TRACE(zero.is_static() ? "static exponent 0" : "device exponent 0");
    Tensor x = F32({0.0f, 3.0f}, {2});
    x.requires_grad_();
    sum(pow(x, zero)).backward();
    EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(0.0f, 0.0f));
  }
  Tensor x = F32({0.0f, 3.0f}, {2});
  x.requires_grad_();
  sum(pow(x, Scalar(2.0))).backward();
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(0.0f, 6.0f));
}

// ---- maximum / minimum --------------------------------------------------------------------------------

TEST(Conformance, MaximumAndMinimumSplitTiesAndPropagateNaN) {
  for (const bool is_max : {true, false}) {
    SCOPED_TRACE(is_max ? "maximum" : "minimum");
    Tensor a = F32({1.0f, 2.0f, 5.0f, static_cast<float>(kNaN)}, {4});
    Tensor b = F32({1.0f, 3.0f, 4.0f, 1.0f}, {4});
    a.requires_grad_();
    b.requires_grad_();
    const Tensor y = is_max ? maximum(a, b) : minimum(a, b);
    sum(y * F32({2.0f, 2.0f, 2.0f, 2.0f}, {4})).backward();
    const std::vector<float> v = y.to_vector<float>();
    EXPECT_EQ(v[0], 1.0f);
    EXPECT_EQ(v[1], is_max ? 3.0f : 2.0f);
    EXPECT_EQ(v[2], is_max ? 5.0f : 4.0f);
    EXPECT_TRUE(std::isnan(v[3]));
    // A tie: half each. NaN: neither comparison holds, so both receive the whole gradient (PyTorch too).
    EXPECT_THAT(a.grad().to_vector<float>(), ElementsAre(1.0f, is_max ? 0.0f : 2.0f, is_max ? 2.0f : 0.0f, 2.0f));
    EXPECT_THAT(b.grad().to_vector<float>(), ElementsAre(1.0f, is_max ? 2.0f : 0.0f, is_max ? 0.0f : 2.0f, 2.0f));
  }
}

// ---- reductions over nothing ---------------------------------------------------------------------------

TEST(Conformance, ReductionsOverEmptyDimensions) {
  const Tensor empty = zeros({2, 0});
  EXPECT_THAT(ErrorOf([&] { max(empty, {1}); }), HasSubstr("max: cannot reduce over dimension 1 of f32[2,0]"));
  EXPECT_THAT(ErrorOf([&] { max(empty); }), HasSubstr("max: cannot reduce f32[2,0], which is empty"));
  EXPECT_THAT(ErrorOf([&] { argmax(empty, 1); }), HasSubstr("empty"));
  // Over a dimension with elements, an empty other dimension is fine: an empty result.
  EXPECT_EQ(DimsOf(max(empty, {0})), (std::vector<int64_t>{0}));
  // sum has an identity (0); mean is 0/0 = NaN, as PyTorch.
  EXPECT_THAT(sum(empty, {1}).to_vector<float>(), ElementsAre(0.0f, 0.0f));
  const std::vector<float> m = mean(empty, {1}).to_vector<float>();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_TRUE(std::isnan(m[0]) && std::isnan(m[1]));
}

// ---- sign, casts ----------------------------------------------------------------------------------------

TEST(Conformance, SignOfNaNIsZero) {
  const std::vector<float> s = sign(F32({static_cast<float>(kNaN), -0.0f, 0.0f, 2.5f, -3.0f, static_cast<float>(kInf),
                                         static_cast<float>(-kInf)},
                                        {7}))
                                   .to_vector<float>();
  EXPECT_THAT(s, ElementsAre(0.0f, 0.0f, 0.0f, 1.0f, -1.0f, 1.0f, -1.0f));
  EXPECT_THAT(sign(I64({-4, 0, 9}, {3})).to_vector<int64_t>(), ElementsAre(-1, 0, 1));
}

// Gradients at the edges found by tests/numerics/compare_with_torch.py: sign's is a tensor of zeros (not
// none), and relu passes the gradient of a NaN input on (PyTorch masks where the result is <= 0).
TEST(Conformance, SignAndReluGradients) {
  Tensor x = F32({-2.0f, 0.0f, 3.0f, static_cast<float>(kNaN)}, {4});
  x.requires_grad_();
  sum(sign(x) + relu(x) * 2.0).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(0.0f, 0.0f, 2.0f, 2.0f));
  Tensor y = F32({1.0f, -1.0f}, {2});
  y.requires_grad_();
  sum(sign(y)).backward();
  ASSERT_TRUE(y.grad().defined()) << "sign's gradient is zeros, as PyTorch's";
  EXPECT_THAT(y.grad().to_vector<float>(), ElementsAre(0.0f, 0.0f));
}

// Float to integer truncates toward zero and saturates; NaN becomes 0 (README "Semantics": PyTorch's
// result there is the CPU's, undefined behaviour in C++). To bool: nonzero and NaN are true.
TEST(Conformance, FloatToIntegerCastsSaturateAndMapNaNToZero) {
  const Tensor x = F64({kNaN, kInf, -kInf, 3.7, -3.7, 1e10, -1e10, 0.5}, {8});
  EXPECT_THAT(cast(x, DType::kI32).to_vector<int32_t>(),
              ElementsAre(0, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(), 3, -3,
                          std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(), 0));
  EXPECT_THAT(cast(x, DType::kI64).to_vector<int64_t>(),
              ElementsAre(0, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), 3, -3,
                          int64_t{10000000000}, int64_t{-10000000000}, 0));
  EXPECT_THAT(cast(x, DType::kBool).to_vector<uint8_t>(), ElementsAre(1, 1, 1, 1, 1, 1, 1, 1));
  EXPECT_THAT(cast(F32({0.0f, -0.0f}, {2}), DType::kBool).to_vector<uint8_t>(), ElementsAre(0, 0));
}

// ---- arange ---------------------------------------------------------------------------------------------

TEST(Conformance, ArangeRefusesBoundsAgainstTheStep) {
  EXPECT_THAT(ErrorOf([] { arange(0, -5, 2); }),
              HasSubstr("arange: the bounds [0, -5) are inconsistent with the sign of step 2"));
  EXPECT_THAT(ErrorOf([] { arange(0, 5, -1); }), HasSubstr("sign of step -1"));
  EXPECT_THAT(ErrorOf([] { arange(0, 5, 0); }), HasSubstr("step must not be 0"));
  EXPECT_THAT(arange(0, -5, -2).to_vector<int64_t>(), ElementsAre(0, -2, -4));
  EXPECT_EQ(arange(5, 5, -1).numel(), 0);
  EXPECT_EQ(arange(5, 5, 3).numel(), 0);
  EXPECT_THAT(arange(1, 4, 2, DType::kF32).to_vector<float>(), ElementsAre(1.0f, 3.0f));
}

// ---- 0-dim tensors ----------------------------------------------------------------------------------------

// PyTorch lets dim 0 and -1 name the one "dimension" of a 0-dim tensor.
TEST(Conformance, ZeroDimTensorsAcceptDimZero) {
  for (const int64_t dim : {0, -1}) {
    SCOPED_TRACE(dim);
    Tensor x = F32({3.5f}, {});
    x.requires_grad_();
    const Tensor s = softmax(x, dim);
    EXPECT_EQ(s.rank(), 0);
    EXPECT_EQ(s.item(), 1.0);
    const Tensor ls = log_softmax(x, dim);
    EXPECT_EQ(ls.rank(), 0);
    EXPECT_EQ(ls.item(), 0.0);
    (s * 2.0 + ls).backward();
    EXPECT_EQ(x.grad().rank(), 0);
    EXPECT_EQ(x.grad().item(), 0.0);  // both are constant in x
    const Tensor am = argmax(x, dim);
    EXPECT_EQ(am.rank(), 0);
    EXPECT_TRUE(am.dtype() == DType::kI64);
    EXPECT_EQ(am.item(), 0.0);
    EXPECT_EQ(argmax(x, dim, true).rank(), 0);
    const Tensor t = transpose(x, dim, 0);
    EXPECT_EQ(t.rank(), 0);
    EXPECT_EQ(t.item(), 3.5);
  }
  const Tensor x = F32({1.0f}, {});
  EXPECT_THAT(ErrorOf([&] { softmax(x, 1); }), HasSubstr("dimension 1 is out of range"));
  EXPECT_THAT(ErrorOf([&] { argmax(x, -2); }), HasSubstr("dimension -2 is out of range"));
  EXPECT_THAT(ErrorOf([&] { transpose(x, 0, 1); }), HasSubstr("dimension 1 is out of range"));
}

// Long f32 reductions are accurate (PyTorch's pairwise sum is ~5e-8 from an f64 reference over 2^20
// elements; lazyrt accumulates f32 in f64 and rounds once): whole-tensor, row, column and fused
// (the producer computed inside the reduction) alike.
TEST(Conformance, MillionElementReductionsAreAccurate) {
  constexpr int64_t n = int64_t{1} << 20;
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t state = 12345;
  for (float& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = 0.1f + static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
  double total = 0, total_exp = 0;
  for (float x : v) {
    total += x;
    total_exp += static_cast<double>(std::exp(x));  // the f32 exp the kernel computes, summed exactly
  }
  const auto near = [](double got, double want) { return std::abs(got - want) <= 1e-7 * std::abs(want); };
  const Tensor x = F32(v, {n});
  const double sum = lazyrt::sum(x).item(), mean = lazyrt::mean(x).item();
  EXPECT_TRUE(near(sum, total)) << sum << " vs " << total;
  EXPECT_TRUE(near(mean, total / static_cast<double>(n))) << mean;
  const double fused = lazyrt::sum(exp(x)).item();
  EXPECT_TRUE(near(fused, total_exp)) << fused << " vs " << total_exp;
  // Columns: 1024 rows added into each of 1024 outputs; rows: each output a run of 1024.
  const Tensor m = reshape(x, {1024, 1024});
  const std::vector<float> cols = lazyrt::sum(m, {0}).to_vector<float>();
  const std::vector<float> rows = lazyrt::sum(m, {1}).to_vector<float>();
  for (int64_t j = 0; j < 1024; j += 97) {
    double col = 0, row = 0;
    for (int64_t i = 0; i < 1024; ++i) {
      col += v[static_cast<size_t>(i * 1024 + j)];
      row += v[static_cast<size_t>(j * 1024 + i)];
    }
    EXPECT_TRUE(near(cols[static_cast<size_t>(j)], col)) << "column " << j;
    EXPECT_TRUE(near(rows[static_cast<size_t>(j)], row)) << "row " << j;
  }
}

}  // namespace conformance_test
}  // namespace lazyrt
