// embedding, scatter_add, index_add and the scatter-add gradients of index_select and gather, against
// reference loops and finite differences; and the one range check of every indexing op, at the call
// (known indices) and when the result is read (indices computed on the device).
#include <random>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lazy/tensor.h"
#include "tests/lazy/op_test_util.h"

namespace lazyrt {
namespace indexing_test {

using ::testing::AllOf;
using testing::ErrorOf;
using testing::F64;
using testing::GradCheck;
using ::testing::HasSubstr;
using testing::I64;
using ::testing::Not;
using testing::NumelOf;
using testing::PendingI64;
using testing::RandomValues;

std::string Line(int line) { return "indexing_test.cc:" + std::to_string(line); }

TEST(Indexing, EmbeddingMatchesReferenceAndItsGradientIsAScatterAdd) {
  std::mt19937_64 rng(3);
  const int64_t vocab = 7, dim = 3;
  const std::vector<double> w = RandomValues(vocab * dim, rng);
  const std::vector<int64_t> ids = {4, 0, 4, 6, 2, 4};
  Tensor weight = F64(w, {vocab, dim});
  weight.requires_grad_();
  const Tensor out = embedding(I64(ids, {2, 3}), weight);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 3, dim}));
  const std::vector<double> got = out.to_vector<double>();
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t c = 0; c < dim; ++c) {
      EXPECT_EQ(got[t * dim + static_cast<size_t>(c)], w[static_cast<size_t>(ids[t] * dim + c)]);
    }
  }
  const std::vector<double> dy = RandomValues(NumelOf({2, 3, dim}), rng);
  Tensor loss = sum(embedding(I64(ids, {2, 3}), weight) * F64(dy, {2, 3, dim}));
  // The backward graph adds rows: no one_hot of the vocabulary, no matmul.
  EXPECT_THAT(graph_text({loss}), AllOf(Not(HasSubstr("OneHot")), Not(HasSubstr("MatMul"))));
  loss.backward();
  std::vector<double> want(static_cast<size_t>(vocab * dim), 0.0);
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t c = 0; c < dim; ++c)
      want[static_cast<size_t>(ids[t] * dim + c)] += dy[t * dim + static_cast<size_t>(c)];
  }
  const std::vector<double> grad = weight.grad().to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(grad[i], want[i], 1e-15) << i;
  EXPECT_THAT(graph_text({weight.grad()}), Not(HasSubstr("MatMul")));
  // A 0-dim index gives one row.
  EXPECT_EQ(embedding(I64({5}, {}), weight).to_vector<double>(), (std::vector<double>{w[15], w[16], w[17]}));
  GradCheck("embedding", [&](auto& in) { return embedding(I64(ids, {3, 2}), in[0]); }, {{vocab, dim}});
}

TEST(Indexing, ScatterAddMatchesReferenceLoops) {
  std::mt19937_64 rng(4);
  const std::vector<int64_t> x_dims = {3, 4};
  const std::vector<double> x = RandomValues(12, rng);
  const std::vector<double> src = RandomValues(15, rng);  // [3, 5]: larger than the index
  const std::vector<int64_t> index = {3, 0, 3, 1, 1, 2};  // [2, 3]
  for (int64_t dim : {0, 1, -1}) {
    SCOPED_TRACE(dim);
    const int64_t d = dim < 0 ? dim + 2 : dim;
    std::vector<int64_t> idx = index;
    if (d == 0) {
      for (int64_t& v : idx) v %= 3;
    }
    const Tensor out = scatter_add(F64(x, x_dims), dim, I64(idx, {2, 3}), F64(src, {3, 5}));
    std::vector<double> want = x;
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < 3; ++j) {
        const int64_t a = idx[static_cast<size_t>(i * 3 + j)];
        const int64_t target = d == 0 ? a * 4 + j : i * 4 + a;
        want[static_cast<size_t>(target)] += src[static_cast<size_t>(i * 5 + j)];
      }
    }
    const std::vector<double> got = out.to_vector<double>();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15) << i;
  }
  GradCheck("scatter_add",
            [&](auto& in) {
              return scatter_add(in[0], 1, I64(index, {2, 3}), in[1]);
            },
            {{3, 4}, {3, 5}});
}

TEST(Indexing, IndexAddMatchesReferenceLoops) {
  std::mt19937_64 rng(5);
  const std::vector<double> x = RandomValues(2 * 4 * 3, rng);
  const std::vector<double> source = RandomValues(2 * 5 * 3, rng);
  const std::vector<int64_t> index = {1, 3, 1, 0, 1};
  const Tensor out = index_add(F64(x, {2, 4, 3}), 1, I64(index, {5}), F64(source, {2, 5, 3}), Scalar(0.5));
  std::vector<double> want = x;
  for (int64_t o = 0; o < 2; ++o) {
    for (int64_t j = 0; j < 5; ++j) {
      for (int64_t i = 0; i < 3; ++i) {
        want[static_cast<size_t>((o * 4 + index[static_cast<size_t>(j)]) * 3 + i)] +=
            0.5 * source[static_cast<size_t>((o * 5 + j) * 3 + i)];
      }
    }
  }
  const std::vector<double> got = out.to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15) << i;
  GradCheck("index_add", [&](auto& in) { return index_add(in[0], -2, I64(index, {5}), in[1], Scalar(-2.0)); },
            {{2, 4, 3}, {2, 5, 3}});
  // The gradients of index_select and gather, now scatter-adds, with repeated indices.
  GradCheck("index_select", [&](auto& in) { return index_select(in[0], 1, I64(index, {5})); }, {{2, 4, 3}});
  GradCheck("gather", [&](auto& in) { return gather(in[0], 0, I64({2, 0, 2, 2, 1, 0}, {2, 3})); }, {{3, 4}});
}

TEST(Indexing, ScatterAddIsBitIdenticalRunToRun) {
  std::mt19937_64 rng(6);
  std::vector<int64_t> idx(4096);
  for (int64_t& v : idx) v = static_cast<int64_t>(rng() % 3);
  std::vector<float> src(4096);
  std::uniform_real_distribution<float> u(-1e4f, 1e4f);
  for (float& v : src) v = u(rng);
  auto run = [&] {
    return scatter_add(zeros({3}), 0, I64(idx, {4096}), Tensor::FromData(std::span<const float>(src), {4096}))
        .to_vector<float>();
  };
  const std::vector<float> first = run();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(run(), first);
}

TEST(Indexing, EveryIndexingOpRefusesAKnownIndexOutOfRangeAtTheCall) {
  const Tensor table = F64(std::vector<double>(10, 1.0), {5, 2});
  int line = __LINE__ + 1;
  std::string e = ErrorOf([&] { embedding(I64({1, 5}, {2}), table); });
  EXPECT_THAT(e, AllOf(HasSubstr("embedding: index 5 is out of range for a dimension of size 5 (valid: [0, 5)), at "
                                 "position 1 of index i64[2]"),
                       HasSubstr(Line(line))));
  EXPECT_THAT(ErrorOf([&] { embedding(I64({-1}, {1}), table); }), HasSubstr("embedding: index -1"));
  EXPECT_THAT(ErrorOf([&] {
                index_select(table, 1, I64({0, 2}, {2}));
              }),
              HasSubstr("index_select: index 2 is out of range for a dimension of size 2"));
  EXPECT_THAT(ErrorOf([&] { gather(table, 0, I64({0, -3}, {1, 2})); }), HasSubstr("gather: index -3"));
  EXPECT_THAT(ErrorOf([&] {
                scatter_add(table, 0, I64({9}, {1, 1}), table);
              }),
              AllOf(HasSubstr("scatter_add: index 9"), HasSubstr("[0, 5)")));
  EXPECT_THAT(ErrorOf([&] {
                index_add(table, 0, I64({0, 5}, {2}), F64({1, 2, 3, 4}, {2, 2}));
              }),
              AllOf(HasSubstr("index_add: index 5"), HasSubstr("position 1")));
  EXPECT_THAT(ErrorOf([&] { one_hot(I64({3}, {1}), 3); }), HasSubstr("one_hot: index 3"));
}

TEST(Indexing, EveryIndexingOpReportsADeviceIndexOutOfRangeWhenReadNamingItsLine) {
  const Tensor table = F64(std::vector<double>(10, 1.0), {5, 2});
  auto expect_read_error = [](const Tensor& t, const std::string& op, int line, const std::string& what) {
    SCOPED_TRACE(op);
    EXPECT_THAT(ErrorOf([&] { sum(t * 2.0).item(); }),
                AllOf(HasSubstr(op + " (called at tests/lazy/" + Line(line) + "): " + what), HasSubstr("[0, ")));
  };
  int line = __LINE__ + 1;
  Tensor t = embedding(PendingI64({0, 7, 1}, {3}), table);
  expect_read_error(t, "embedding", line,
                    "index 7 is out of range for a dimension of size 5 (valid: [0, 5)), at position 1");
  line = __LINE__ + 1;
  t = index_select(table, 0, PendingI64({-1}, {1}));
  expect_read_error(t, "index_select", line, "index -1");
  line = __LINE__ + 1;
  t = gather(table, 1, PendingI64({0, 1, 2}, {1, 3}));
  expect_read_error(t, "gather", line, "index 2 is out of range for a dimension of size 2");
  line = __LINE__ + 1;
  t = scatter_add(table, 0, PendingI64({1, 5}, {1, 2}), table);
  expect_read_error(t, "scatter_add", line, "index 5");
  line = __LINE__ + 1;
  t = index_add(table, 1, PendingI64({3}, {1}), F64({1, 1, 1, 1, 1}, {5, 1}));
  expect_read_error(t, "index_add", line, "index 3");
  line = __LINE__ + 1;
  t = one_hot(PendingI64({0, 4}, {2}), 4).to(DType::kF64);
  expect_read_error(t, "one_hot", line, "index 4 is out of range for a dimension of size 4");
  // In range, the same ops compute.
  EXPECT_EQ(embedding(PendingI64({4}, {1}), table).to_vector<double>(), (std::vector<double>{1, 1}));
}

TEST(Indexing, EmptyTensors) {
  // Zero-size operands: nothing to add, and the indices are still checked.
  EXPECT_TRUE(index_add(zeros({3, 0}), 0, PendingI64({2, 0}, {2}), zeros({2, 0})).to_vector<float>().empty());
  EXPECT_EQ(scatter_add(zeros({2}), 0, PendingI64({}, {0}), zeros({0})).to_vector<float>(), (std::vector<float>{0, 0}));
  EXPECT_THAT(ErrorOf([] {
                index_add(zeros({3, 0}), 0, PendingI64({3}, {1}), zeros({1, 0})).to_vector<float>();
              }),
              HasSubstr("index 3"));
  EXPECT_EQ(embedding(PendingI64({}, {0, 2}), zeros({4, 3})).numel(), 0);
}

TEST(Indexing, ShapeAndDTypeErrors) {
  const Tensor x = F64(std::vector<double>(6, 0.0), {2, 3});
  EXPECT_THAT(ErrorOf([&] { embedding(F64({1}, {1}), x); }), HasSubstr("embedding: needs integer indices"));
  EXPECT_THAT(ErrorOf([&] { embedding(I64({1}, {1}), F64({1, 2}, {2})); }), HasSubstr("2-D weight"));
  EXPECT_THAT(ErrorOf([&] { scatter_add(x, 0, I64({0}, {1}), x); }), HasSubstr("same rank"));
  EXPECT_THAT(ErrorOf([&] { scatter_add(x, 2, I64({0}, {1, 1}), x); }), HasSubstr("dimension 2 is out of range"));
  EXPECT_THAT(ErrorOf([&] { scatter_add(x, 0, I64({0}, {1, 1}), zeros({2, 3})); }), HasSubstr("must have x's dtype"));
  EXPECT_THAT(ErrorOf([&] { index_add(x, 1, I64({0, 1}, {2}), x); }), HasSubstr("index's length"));
  EXPECT_THAT(ErrorOf([&] { index_add(x, 0, I64({0, 1}, {1, 2}), x); }), HasSubstr("1-D integer index"));
}

}  // namespace indexing_test
}  // namespace lazyrt
