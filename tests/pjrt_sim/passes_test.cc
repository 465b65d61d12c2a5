// The compiler passes (CSE, DCE, algebraic simplification, constant folding), observed through the facts
// of the executable they produce: how many kernels, of which kind, computing what, and the pass timings.
#include "pjrt_sim/passes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "pjrt_sim/autotune.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/kernels/kernels.h"
#include "pjrt_sim/thread_pool.h"
#include "tests/pjrt_sim/compiler_test_util.h"

namespace lazyrt::pjrt {
namespace passes_test {

class PassesTest : public CompilerTest {};

// --- CSE ------------------------------------------------------------------------------------------
TEST_F(PassesTest, CseMergesDuplicateAdds) {
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {4}), y = b.Parameter(1, proto::F32, {4});
  const int64_t a1 = b.Add(x, y), a2 = b.Add(x, y);
  b.Output(b.Mul(a1, a2));
  const proto::Executable exe = CompileToProto(b.module(), kUnfused);
  EXPECT_EQ(exe.kernels_size(), 2) << KernelSummary(exe);  // one add, one multiply
  EXPECT_EQ(KernelsComputing(exe, Opcode::kAdd), 1);
  EXPECT_GE(PassChanges(exe, "cse"), 1);
  EXPECT_EQ(exe.module_instructions(), 5);
  const std::vector<HostArray> out = Run(b.module(), kUnfused, {F32({4}, {1, 2, 3, 4}), F32({4}, {1, 1, 1, -4})});
  EXPECT_THAT(out[0].values<float>(), ElementsAre(4, 9, 16, 0));
}

TEST_F(PassesTest, CseMergesChainsTransitively) {
  // exp(x + y) computed twice: once the adds merge, the exps do too.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {3}), y = b.Parameter(1, proto::F32, {3});
  const int64_t e1 = b.Unary(Opcode::kExp, b.Add(x, y)), e2 = b.Unary(Opcode::kExp, b.Add(x, y));
  b.Output(b.Binary(Opcode::kSubtract, e1, e2));
  const proto::Executable exe = CompileToProto(b.module(), kUnfused);
  EXPECT_EQ(KernelsComputing(exe, Opcode::kExp), 1) << KernelSummary(exe);
  EXPECT_EQ(KernelsComputing(exe, Opcode::kAdd), 1) << KernelSummary(exe);
}

TEST_F(PassesTest, CseKeepsDistinctConstantsApart) {
  // 1 and 1.0000001 (distinct f32 values) print alike with 6 significant digits.
  ModuleBuilder b;
  b.Output(b.Constant(1.0, proto::F32, {2}));
  b.Output(b.Constant(1.0000001, proto::F32, {2}));
  b.Output(b.Constant(0.0, proto::F32, {2}));
  b.Output(b.Constant(-0.0, proto::F32, {2}));
  for (const CompileOptions& o : {kUnfused, kFused}) {
    const std::vector<HostArray> out = Run(b.module(), o, {});
    ASSERT_EQ(out.size(), 4u);
    EXPECT_EQ(out[0].at<float>(0), 1.0f);
    EXPECT_EQ(out[1].at<float>(1), static_cast<float>(1.0000001));
    EXPECT_FALSE(std::signbit(out[2].at<float>(0)));
    EXPECT_TRUE(std::signbit(out[3].at<float>(0)));
  }
}

TEST_F(PassesTest, CseKeepsDifferentAttributesApart) {
  // Same opcode and operand, different attributes: not merged.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {2, 3});
  b.Output(b.Compare(CompareDirection::kLt, x, x));
  b.Output(b.Compare(CompareDirection::kGt, x, x));
  b.Output(b.Compare(CompareDirection::kLe, x, x));
  b.Output(b.Slice(x, {0, 0}, {2, 2}, {1, 1}));
  b.Output(b.Slice(x, {0, 1}, {2, 3}, {1, 1}));
  const int64_t seed = b.Constant(5, proto::S64);
  b.Output(b.Rng(Opcode::kRngUniform, seed, proto::F32, {8}, 0));
  b.Output(b.Rng(Opcode::kRngUniform, seed, proto::F32, {8}, 1));
  const std::vector<HostArray> out = Run(b.module(), kUnfused, {F32({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_EQ(out.size(), 7u);
  EXPECT_THAT(out[0].values<uint8_t>(), ::testing::Each(0));
  EXPECT_THAT(out[2].values<uint8_t>(), ::testing::Each(1));
  EXPECT_THAT(out[3].values<float>(), ElementsAre(1, 2, 4, 5));
  EXPECT_THAT(out[4].values<float>(), ElementsAre(2, 3, 5, 6));
  EXPECT_NE(out[5].bytes, out[6].bytes);
}

// --- DCE ------------------------------------------------------------------------------------------
TEST_F(PassesTest, DceRemovesUnusedInstructions) {
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {8, 8});
  const int64_t unused_param = b.Parameter(1, proto::F32, {8});
  b.Dot(x, x);                                                            // dead
  b.Unary(Opcode::kExp, b.Unary(Opcode::kLog, x));                        // dead
  b.Reduce(Combiner::kSum, b.Broadcast(unused_param, {8, 8}, {1}), {0});  // dead
  b.Output(b.Unary(Opcode::kNegate, x));
  const proto::Executable exe = CompileToProto(b.module(), kUnfused);
  EXPECT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
  EXPECT_EQ(CountKernels(exe, proto::Kernel::DOT), 0);
  EXPECT_EQ(KernelsComputing(exe, Opcode::kExp), 0);
  EXPECT_GE(PassChanges(exe, "dce"), 5);
  // Parameters are the calling convention: an unused one is still taken.
  EXPECT_EQ(exe.parameters_size(), 2);
  EXPECT_EQ(exe.op_histogram().at("dot"), 1);
}

TEST_F(PassesTest, DceKeepsValuesReachableOnlyThroughOutputs) {
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {3});
  const int64_t e = b.Unary(Opcode::kExp, x);
  b.Unary(Opcode::kTanh, e);  // dead user of a live value
  b.Output(b.Unary(Opcode::kNegate, e));
  b.Output(e);
  const proto::Executable exe = CompileToProto(b.module(), kUnfused);
  EXPECT_EQ(exe.kernels_size(), 2) << KernelSummary(exe);
  EXPECT_EQ(KernelsComputing(exe, Opcode::kTanh), 0);
}

// --- algebraic simplification ---------------------------------------------------------------------
TEST_F(PassesTest, AlgebraicIdentitiesLeaveNoKernel) {
  struct Case {
    std::string name;
    std::function<int64_t(ModuleBuilder&, int64_t)> build;
  };
  const Dims d = {2, 3};
  const std::vector<Case> cases = {
      {"x*1", [&](ModuleBuilder& b, int64_t x) { return b.Mul(x, b.Constant(1, proto::F32, d)); }},
      {"1*x", [&](ModuleBuilder& b, int64_t x) { return b.Mul(b.Constant(1, proto::F32, d), x); }},
      {"x+0", [&](ModuleBuilder& b, int64_t x) { return b.Add(x, b.Constant(0, proto::F32, d)); }},
      {"0+x", [&](ModuleBuilder& b, int64_t x) { return b.Add(b.Constant(0, proto::F32, d), x); }},
      {"x-0",
       [&](ModuleBuilder& b, int64_t x) { return b.Binary(Opcode::kSubtract, x, b.Constant(0, proto::F32, d)); }},
      {"x/1", [&](ModuleBuilder& b, int64_t x) { return b.Binary(Opcode::kDivide, x, b.Constant(1, proto::F32, d)); }},
      {"-(-x)", [&](ModuleBuilder& b, int64_t x) { return b.Unary(Opcode::kNegate, b.Unary(Opcode::kNegate, x)); }},
      {"-(-(-(-x)))",
       [&](ModuleBuilder& b, int64_t x) {
         int64_t v = x;
         for (int i = 0; i < 4; ++i) v = b.Unary(Opcode::kNegate, v);
         return v;
       }},
      {"convert f32->f32", [&](ModuleBuilder& b, int64_t x) { return b.Convert(x, proto::F32); }},
      {"reshape to the same dims", [&](ModuleBuilder& b, int64_t x) { return b.Reshape(x, d); }},
      {"identity transpose",
       [&](ModuleBuilder& b, int64_t x) {
         return b.Transpose(x, {0, 1});
       }},
      {"transpose twice",
       [&](ModuleBuilder& b, int64_t x) {
         return b.Transpose(b.Transpose(x, {1, 0}), {1, 0});
       }},
      {"broadcast to the same dims",
       [&](ModuleBuilder& b, int64_t x) {
         return b.Broadcast(x, d, {0, 1});
       }},
      {"full slice",
       [&](ModuleBuilder& b, int64_t x) {
         return b.Slice(x, {0, 0}, {2, 3}, {1, 1});
       }},
      {"reduce over no dims", [&](ModuleBuilder& b, int64_t x) { return b.Reduce(Combiner::kSum, x, {}); }},
      {"(x*1+0)/1",
       [&](ModuleBuilder& b, int64_t x) {
         const int64_t m = b.Mul(x, b.Constant(1, proto::F32, d));
         return b.Binary(Opcode::kDivide, b.Add(m, b.Constant(0, proto::F32, d)), b.Constant(1, proto::F32, d));
       }},
  };
  for (const Case& c : cases) {
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, d);
    b.Output(c.build(b, x));
    const proto::Executable exe = CompileToProto(b.module(), kUnfused);
    EXPECT_EQ(exe.kernels_size(), 0) << c.name << ":\n" << KernelSummary(exe);
    ASSERT_EQ(exe.outputs_size(), 1);
    EXPECT_EQ(exe.slots(static_cast<int>(exe.outputs(0))).kind(), proto::Slot::PARAMETER) << c.name;
    EXPECT_GE(PassChanges(exe, "algebraic_simplifier"), 1) << c.name;
    const std::vector<HostArray> out = Run(b.module(), kUnfused, {F32(d, {1, -2, 3, -4, 5, -0.5})});
    EXPECT_THAT(out[0].values<float>(), ElementsAre(1, -2, 3, -4, 5, -0.5)) << c.name;
  }
}

// A convert to a type that holds every value of its operand's, and back, is the operand; a narrowing
// and back rounds, and stays.
TEST_F(PassesTest, AWideningConvertAndItsWayBackLeaveNoKernel) {
  const Dims d = {4};
  for (const auto& [narrow, wide] : {std::pair{proto::BF16, proto::F32},
                                     {proto::F16, proto::F64},
                                     {proto::F32, proto::F64},
                                     {proto::S32, proto::S64},
                                     {proto::S32, proto::F64},
                                     {proto::PRED, proto::F32}}) {
    SCOPED_TRACE(absl::StrCat(proto::ElementType_Name(narrow), " -> ", proto::ElementType_Name(wide), " -> back"));
    ModuleBuilder b;
    b.Output(b.Convert(b.Convert(b.Parameter(0, narrow, d), wide), narrow));
    const proto::Executable exe = CompileToProto(b.module(), kUnfused);
    EXPECT_EQ(exe.kernels_size(), 0) << KernelSummary(exe);
    ASSERT_EQ(exe.outputs_size(), 1);
    EXPECT_EQ(exe.slots(static_cast<int>(exe.outputs(0))).kind(), proto::Slot::PARAMETER);
  }
  ModuleBuilder b;
  b.Output(b.Convert(b.Convert(b.Parameter(0, proto::F32, d), proto::BF16), proto::F32));
  b.Output(b.Convert(b.Convert(b.Parameter(1, proto::F64, d), proto::S32), proto::F64));
  const std::vector<HostArray> out = Run(b.module(), kUnfused,
                                         {F32(d, {1.0f, 1.00390625f, 3.14159274f, -0.1f}),
                                          MakeArray<double>(PrimitiveType::kF64, d, {0.5, -2.5, 7, 3e10})});
  EXPECT_THAT(out[0].values<float>(), ElementsAre(1.0f, 1.0f, 3.140625f, -0.10009765625f));
  EXPECT_THAT(out[1].values<double>(), ElementsAre(0, -2, 7, 2147483647));
}

TEST_F(PassesTest, IntegerIdentitiesToo) {
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::S32, {4});
  b.Output(b.Binary(Opcode::kDivide, b.Mul(x, b.Constant(1, proto::S32, {4})), b.Constant(1, proto::S32, {4})));
  const proto::Executable exe = CompileToProto(b.module(), kUnfused);
  EXPECT_EQ(exe.kernels_size(), 0) << KernelSummary(exe);
}

TEST_F(PassesTest, NonIdentitiesAreKept) {
  // x*2, x+1, a real transpose, a partial slice, x*(-1), and 0-x are real work.
  const Dims d = {2, 3};
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, d);
  b.Output(b.Mul(x, b.Constant(2, proto::F32, d)));
  b.Output(b.Add(x, b.Constant(1, proto::F32, d)));
  b.Output(b.Transpose(x, {1, 0}));
  b.Output(b.Slice(x, {0, 1}, {2, 3}, {1, 1}));
  b.Output(b.Binary(Opcode::kSubtract, b.Constant(0, proto::F32, d), x));
  const proto::Executable exe = CompileToProto(b.module(), kUnfused);
  int working = 0;  // kernels other than the constants' own
  for (const proto::Kernel& k : exe.kernels())
    working += !(k.program_size() == 1 && k.program(0).opcode() == static_cast<int32_t>(Opcode::kConstant));
  EXPECT_EQ(working, 5) << KernelSummary(exe);
  const std::vector<HostArray> out = Run(b.module(), kUnfused, {F32(d, {1, 2, 3, 4, 5, 6})});
  EXPECT_THAT(out[0].values<float>(), ElementsAre(2, 4, 6, 8, 10, 12));
  EXPECT_THAT(out[1].values<float>(), ElementsAre(2, 3, 4, 5, 6, 7));
  EXPECT_THAT(out[2].values<float>(), ElementsAre(1, 4, 2, 5, 3, 6));
  EXPECT_THAT(out[3].values<float>(), ElementsAre(2, 3, 5, 6));
  EXPECT_THAT(out[4].values<float>(), ElementsAre(-1, -2, -3, -4, -5, -6));
}

TEST_F(PassesTest, SumOfZeroPaddedSlicesBecomesOneConcatenation) {
  // The gradients of q, k and v sliced from one [2, 3, 2] projection along dim 1: each is its g between
  // zeros, and their sum is concat(gq, gk, gv), one kernel with no add and no zeros.
  ModuleBuilder b;
  const int64_t gq = b.Parameter(0, proto::F32, {2, 1, 2}), gk = b.Parameter(1, proto::F32, {2, 1, 2}),
                gv = b.Parameter(2, proto::F32, {2, 1, 2});
  const auto zeros = [&](int64_t n) { return b.Constant(0, proto::F32, {2, n, 2}); };
  const int64_t dq = b.Concatenate({gq, zeros(2)}, 1), dk = b.Concatenate({zeros(1), gk, zeros(1)}, 1),
                dv = b.Concatenate({zeros(2), gv}, 1);
  b.Output(b.Add(b.Add(dq, dk), dv));
  const std::vector<HostArray> args = {F32({2, 1, 2}, {1, 2, 3, 4}), F32({2, 1, 2}, {5, 6, 7, 8}),
                                       F32({2, 1, 2}, {9, 10, 11, 12})};
  for (const CompileOptions& o : {kUnfused, kFused}) {
    const proto::Executable exe = CompileToProto(b.module(), o);
    ASSERT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
    EXPECT_EQ(exe.kernels(0).kind(), proto::Kernel::CONCATENATE) << KernelSummary(exe);
    EXPECT_EQ(exe.kernels(0).inputs_size(), 3) << KernelSummary(exe);
    EXPECT_THAT(Run(b.module(), o, args)[0].values<float>(), ElementsAre(1, 2, 5, 6, 9, 10, 3, 4, 7, 8, 11, 12));
  }
}

TEST_F(PassesTest, SumsOfConcatenationsThatOverlapAreAdded) {
  // Values on both sides of one range, ranges that do not line up, another axis, nonzero constants:
  // the sum needs its adds.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {2, 2}), y = b.Parameter(1, proto::F32, {2, 2});
  const auto c = [&](double v, int64_t n) { return b.Constant(v, proto::F32, {2, n}); };
  b.Output(b.Add(b.Concatenate({x, c(0, 2)}, 1), b.Concatenate({y, c(0, 2)}, 1)));           // x and y overlap
  b.Output(b.Add(b.Concatenate({c(0, 1), x, c(0, 1)}, 1), b.Concatenate({y, c(0, 2)}, 1)));  // shifted
  b.Output(b.Add(b.Concatenate({x, c(0, 2)}, 1), b.Concatenate({c(1, 2), y}, 1)));           // a 1, not a 0
  const int64_t x4 = b.Parameter(2, proto::F32, {4, 2});
  b.Output(b.Add(b.Concatenate({x, c(0, 2)}, 1), b.Transpose(x4, {1, 0})));  // not a concatenation
  const std::vector<HostArray> out =
      Run(b.module(), kUnfused,
          {F32({2, 2}, {1, 2, 3, 4}), F32({2, 2}, {10, 20, 30, 40}), F32({4, 2}, {1, 1, 1, 1, 1, 1, 1, 1})});
  EXPECT_THAT(out[0].values<float>(), ElementsAre(11, 22, 0, 0, 33, 44, 0, 0));
  EXPECT_THAT(out[1].values<float>(), ElementsAre(10, 21, 2, 0, 30, 43, 4, 0));
  EXPECT_THAT(out[2].values<float>(), ElementsAre(2, 3, 10, 20, 4, 5, 30, 40));
  EXPECT_THAT(out[3].values<float>(), ElementsAre(2, 3, 1, 1, 4, 5, 1, 1));
  EXPECT_EQ(KernelsComputing(CompileToProto(b.module(), kUnfused), Opcode::kAdd), 4);
}

TEST_F(PassesTest, TransposeChainsCompose) {
  // transpose(transpose(x, p), q) becomes one transpose, computing the composition.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::S32, {2, 3, 4});
  b.Output(b.Transpose(b.Transpose(x, {2, 0, 1}), {0, 2, 1}));  // result dim i = x dim {2, 1, 0}[i]
  const proto::Executable exe = CompileToProto(b.module(), kUnfused);
  EXPECT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
  std::vector<int32_t> v(24);
  std::iota(v.begin(), v.end(), 0);
  const std::vector<HostArray> out = Run(b.module(), kUnfused, {MakeArray<int32_t>(PrimitiveType::kS32, {2, 3, 4}, v)});
  ASSERT_EQ(out[0].shape.dims, (Dims{4, 3, 2}));
  for (int64_t i = 0; i < 24; ++i) {
    const Dims c = testing::Unravel(i, {4, 3, 2});
    EXPECT_EQ(out[0].at<int32_t>(i), (c[2] * 3 + c[1]) * 4 + c[0]) << i;
  }
}

TEST_F(PassesTest, TransposeFoldsIntoDot) {
  struct Case {
    Dims a, b;
    Dims perm_a, perm_b;  // empty: not transposed
    bool tl, tr;          // the dot's own flags
    bool want_tl, want_tr;
  };
  const std::vector<Case> cases = {
      {{5, 3}, {5, 4}, {1, 0}, {}, false, false, true, false},           // dot(a^T, b)
      {{3, 5}, {4, 5}, {}, {1, 0}, false, false, false, true},           // dot(a, b^T)
      {{5, 3}, {4, 5}, {1, 0}, {1, 0}, false, false, true, true},        // dot(a^T, b^T)
      {{3, 5}, {5, 4}, {1, 0}, {}, true, false, false, false},           // (a^T)^T cancels
      {{2, 5, 3}, {2, 5, 4}, {0, 2, 1}, {}, false, false, true, false},  // batched
      {{2, 3, 5}, {5, 4}, {}, {}, false, false, false, false},           // nothing to fold
  };
  std::mt19937_64 rng(3);
  for (const Case& c : cases) {
    ModuleBuilder b;
    const int64_t pa = b.Parameter(0, proto::F32, c.a), pb = b.Parameter(1, proto::F32, c.b);
    const int64_t a = c.perm_a.empty() ? pa : b.Transpose(pa, c.perm_a);
    const int64_t bb = c.perm_b.empty() ? pb : b.Transpose(pb, c.perm_b);
    b.Output(b.Dot(a, bb, c.tl, c.tr));
    const std::string what = absl::StrCat(testing::DimsText(c.a), " x ", testing::DimsText(c.b));
    const proto::Executable exe = CompileToProto(b.module(), kUnfused);
    ASSERT_EQ(exe.kernels_size(), 1) << what << "\n" << KernelSummary(exe);  // no transpose kernel
    const proto::Kernel& k = exe.kernels(0);
    EXPECT_EQ(k.kind(), proto::Kernel::DOT) << what;
    EXPECT_EQ(k.transpose_lhs(), c.want_tl) << what;
    EXPECT_EQ(k.transpose_rhs(), c.want_tr) << what;
    // Same numbers as the unsimplified product, computed by hand.
    const HostArray ha = F32(c.a, testing::RandomFloats(rng, testing::NumElements(c.a), -1, 1));
    const HostArray hb = F32(c.b, testing::RandomFloats(rng, testing::NumElements(c.b), -1, 1));
    const std::vector<HostArray> out = Run(b.module(), kUnfused, {ha, hb});
    const Dims od = out[0].shape.dims;
    const size_t r = od.size();
    const int64_t m = od[r - 2], n = od[r - 1];
    // Logical operands after every transpose: A [batch, m, k] and B [batch?, k, n].
    const auto logical = [](const HostArray& h, const Dims& perm, bool flag, int64_t batch, int64_t i, int64_t j) {
      Dims dims = h.shape.dims;
      Dims coords(dims.size(), 0);
      if (dims.size() == 3) coords[0] = batch;
      const size_t rr = dims.size();
      // Undo the dot's flag, then the transpose: (i, j) in the operand as the dot reads it.
      int64_t ii = flag ? j : i, jj = flag ? i : j;
      Dims view_coords = coords;
      view_coords[rr - 2] = ii;
      view_coords[rr - 1] = jj;
      if (!perm.empty()) {
        Dims src(rr);
        for (size_t d = 0; d < rr; ++d) src[static_cast<size_t>(perm[d])] = view_coords[d];
        view_coords = src;
      }
      return h.at<float>(testing::Ravel(view_coords, dims));
    };
    const int64_t kk = (c.tl != !c.perm_a.empty()) ? c.a[c.a.size() - 2] : c.a.back();
    for (int64_t i = 0; i < out[0].numel(); ++i) {
      const int64_t batch = i / (m * n), row = (i / n) % m, col = i % n;
      double acc = 0;
      for (int64_t p = 0; p < kk; ++p) {
        acc += static_cast<double>(logical(ha, c.perm_a, c.tl, batch, row, p)) *
               logical(hb, c.perm_b, c.tr, batch, p, col);
      }
      EXPECT_NEAR(out[0].at<float>(i), acc, 1e-5) << what << " at " << i;
    }
  }
}

TEST_F(PassesTest, TransposedProductIsComputedTransposed) {
  // transpose(dot(a, b)) = dot(b^T, a^T): one DOT kernel writes the transposed result contiguously,
  // with the operands swapped and their flags flipped; batched products too (only the matrix dims swap).
  struct Case {
    Dims a, b;
    bool tl, tr;
  };
  const std::vector<Case> cases = {{{3, 5}, {5, 4}, false, false},
                                   {{5, 3}, {5, 4}, true, false},
                                   {{3, 5}, {4, 5}, false, true},
                                   {{2, 3, 5}, {2, 5, 4}, false, false},
                                   {{2, 3, 5}, {5, 4}, false, false}};
  std::mt19937_64 rng(5);
  for (const Case& c : cases) {
    const std::string what = absl::StrCat(testing::DimsText(c.a), " x ", testing::DimsText(c.b));
    const size_t r = std::max(c.a.size(), c.b.size());
    Dims perm(r);
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[r - 1], perm[r - 2]);
    ModuleBuilder transposed, plain;
    for (ModuleBuilder* b : {&transposed, &plain}) {
      const int64_t dot = b->Dot(b->Parameter(0, proto::F32, c.a), b->Parameter(1, proto::F32, c.b), c.tl, c.tr);
      b->Output(b == &transposed ? b->Transpose(dot, perm) : dot);
    }
    const proto::Executable exe = CompileToProto(transposed.module(), kFused);
    ASSERT_EQ(exe.kernels_size(), 1) << what << "\n" << KernelSummary(exe);
    EXPECT_EQ(exe.kernels(0).kind(), proto::Kernel::DOT) << what;
    EXPECT_EQ(exe.kernels(0).transpose_lhs(), !c.tr) << what;
    EXPECT_EQ(exe.kernels(0).transpose_rhs(), !c.tl) << what;
    // The same numbers as the product transposed by hand.
    const HostArray ha = F32(c.a, testing::RandomFloats(rng, testing::NumElements(c.a), -1, 1));
    const HostArray hb = F32(c.b, testing::RandomFloats(rng, testing::NumElements(c.b), -1, 1));
    const HostArray got = Run(transposed.module(), kFused, {ha, hb})[0];
    const HostArray want = Run(plain.module(), kFused, {ha, hb})[0];
    const Dims& wd = want.shape.dims;
    const int64_t m = wd[r - 2], n = wd[r - 1];
    ASSERT_EQ(got.numel(), want.numel()) << what;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const int64_t batch = i / (m * n), row = (i / n) % m, col = i % n;
      EXPECT_NEAR(got.at<float>(batch * m * n + col * m + row), want.at<float>(i), 1e-5) << what << " at " << i;
    }
  }
}

TEST_F(PassesTest, TransposedProductWithOtherReadersIsNotDuplicated) {
  // The product is also read untransposed: rewriting the transpose as a second product would double
  // the GEMM work, so the transpose stays a (fused) view.
  ModuleBuilder b;
  const int64_t dot = b.Dot(b.Parameter(0, proto::F32, {3, 5}), b.Parameter(1, proto::F32, {5, 4}));
  b.Output(dot);
  b.Output(b.Transpose(dot, {1, 0}));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  EXPECT_EQ(CountKernels(exe, proto::Kernel::DOT), 1) << KernelSummary(exe);
}

TEST_F(PassesTest, TransposeOfBatchDimsDoesNotFoldIntoDot) {
  ModuleBuilder b;
  const int64_t pa = b.Parameter(0, proto::F32, {3, 2, 4});
  b.Output(b.Dot(b.Transpose(pa, {1, 0, 2}), b.Parameter(1, proto::F32, {2, 4, 5})));  // [2, 3, 4] x [2, 4, 5]
  const proto::Executable exe = CompileToProto(b.module(), kUnfused);
  EXPECT_EQ(exe.kernels_size(), 2) << KernelSummary(exe);
  EXPECT_FALSE(exe.kernels(1).transpose_lhs());
}

TEST_F(PassesTest, BroadcastOfConstantBecomesConstant) {
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {2, 3});
  b.Output(b.Add(x, b.Broadcast(b.Constant(2, proto::F32), {2, 3}, {})));
  const proto::Executable exe = CompileToProto(b.module(), kUnfused);
  for (const proto::Kernel& k : exe.kernels())
    EXPECT_THAT(k.label(), ::testing::Not(::testing::StartsWith("broadcast")));
  const std::vector<HostArray> out = Run(b.module(), kUnfused, {F32({2, 3}, {1, 2, 3, 4, 5, 6})});
  EXPECT_THAT(out[0].values<float>(), ElementsAre(3, 4, 5, 6, 7, 8));
}

TEST_F(PassesTest, ACostlyFunctionOfABroadcastIsComputedBeforeIt) {
  // tanh(broadcast(v)) = broadcast(tanh(v)): 3 evaluations instead of 12, the same values. Where the broadcast has
  // another reader, or the function is cheap (negate), nothing moves: that would compute the broadcast twice.
  const HostArray v = F32({3}, {-1.5F, 0.25F, 2});
  for (bool shared : {false, true}) {
    for (Opcode f : {Opcode::kTanh, Opcode::kNegate}) {
      ModuleBuilder b;
      const int64_t broadcast = b.Broadcast(b.Parameter(0, proto::F32, {3}), {4, 3}, {1});
      b.Output(b.Unary(f, broadcast));
      if (shared) b.Output(broadcast);
      const proto::Executable exe = CompileToProto(b.module(), kUnfused);
      EXPECT_THAT(PointsComputing(exe, f), ElementsAre(f == Opcode::kTanh && !shared ? 3 : 12))
          << OpcodeName(f) << (shared ? ", shared\n" : "\n") << KernelSummary(exe);
      const std::vector<HostArray> out = Run(b.module(), kUnfused, {v});
      for (int64_t i = 0; i < 12; ++i) {
        const float x = v.values<float>()[static_cast<size_t>(i % 3)];
        EXPECT_EQ(out[0].values<float>()[static_cast<size_t>(i)], f == Opcode::kTanh ? Tanh(x) : -x) << i;
      }
    }
  }
}

// --- constant folding -----------------------------------------------------------------------------
TEST_F(PassesTest, ConstantArithmeticFoldsToAConstant) {
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {4});
  const int64_t five = b.Add(b.Constant(2, proto::F32, {4}), b.Constant(3, proto::F32, {4}));
  const int64_t folded = b.Unary(Opcode::kSqrt, b.Mul(five, b.Constant(5, proto::F32, {4})));  // 5
  b.Output(b.Mul(folded, x));
  for (const CompileOptions& o : {kUnfused, kFused}) {
    const proto::Executable exe = CompileToProto(b.module(), o);
    EXPECT_EQ(KernelsComputing(exe, Opcode::kAdd), 0) << KernelSummary(exe);
    EXPECT_EQ(KernelsComputing(exe, Opcode::kSqrt), 0) << KernelSummary(exe);
    EXPECT_EQ(KernelsComputing(exe, Opcode::kMultiply), 1) << KernelSummary(exe);
    EXPECT_EQ(exe.kernels_size(), o.fusion ? 1 : 2) << KernelSummary(exe);
    bool found = false;
    for (const proto::Kernel& k : exe.kernels()) {
      for (const proto::Step& s : k.program())
        found = found || (!s.load() && s.opcode() == static_cast<int32_t>(Opcode::kConstant) && s.value() == 5);
    }
    EXPECT_TRUE(found) << "no constant 5 in\n" << KernelSummary(exe);
    EXPECT_GE(PassChanges(exe, "constant_folding"), 3);
    const std::vector<HostArray> out = Run(b.module(), o, {F32({4}, {1, 2, -1, 0.5})});
    EXPECT_THAT(out[0].values<float>(), ElementsAre(5, 10, -5, 2.5));
  }
}

TEST_F(PassesTest, WholeConstantProgramNeedsOnlyAConstantKernel) {
  ModuleBuilder b;
  const int64_t c = b.Constant(0.5, proto::F32, {3});
  b.Output(
      b.Unary(Opcode::kExp, b.Unary(Opcode::kLog, b.Reshape(b.Transpose(b.Broadcast(c, {2, 3}, {1}), {1, 0}), {6}))));
  const proto::Executable exe = CompileToProto(b.module(), kUnfused);
  ASSERT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
  ASSERT_EQ(exe.kernels(0).program_size(), 1);
  EXPECT_EQ(exe.kernels(0).program(0).opcode(), static_cast<int32_t>(Opcode::kConstant));
  const std::vector<HostArray> out = Run(b.module(), kUnfused, {});
  EXPECT_THAT(out[0].values<float>(), ::testing::Each(::testing::FloatNear(0.5f, 1e-7f)));
}

TEST_F(PassesTest, FoldingNeverChangesBits) {
  // op(constants) folded at compile time must equal op computed by a kernel on the same constants.
  // select(p, c, c) with p a parameter hides c from the folder while a kernel still computes it.
  struct Case {
    std::string name;
    Opcode op;
    proto::ElementType in, out;
    std::vector<double> args;
    CompareDirection direction = CompareDirection::kEq;
    bool may_stay_unfolded = false;  // an s64 result a double constant cannot hold
  };
  const std::vector<Case> cases = {
      {"convert f32 0.1 -> f64", Opcode::kConvert, proto::F32, proto::F64, {0.1}},
      {"convert bf16 0.1 -> f32", Opcode::kConvert, proto::BF16, proto::F32, {0.1}},
      {"convert f32 1e-50 -> pred", Opcode::kConvert, proto::F32, proto::PRED, {1e-50}},
      {"convert f32 -2.5 -> pred", Opcode::kConvert, proto::F32, proto::PRED, {-2.5}},
      {"convert f32 0.5 -> pred", Opcode::kConvert, proto::F32, proto::PRED, {0.5}},
      {"add s32 3e9 + 1", Opcode::kAdd, proto::S32, proto::S32, {3e9, 1}},
      {"add s32 2.5 + 2.5", Opcode::kAdd, proto::S32, proto::S32, {2.5, 2.5}},
      {"multiply s64 3037000500^2",
       Opcode::kMultiply,
       proto::S64,
       proto::S64,
       {3037000500.0, 3037000500.0},
       CompareDirection::kEq,
       true},
      {"add s64 2^53 + 1", Opcode::kAdd, proto::S64, proto::S64, {9007199254740992.0, 1}, CompareDirection::kEq, true},
      {"add s64 2^52 + 1", Opcode::kAdd, proto::S64, proto::S64, {4503599627370496.0, 1}},
      {"compare pred 2 == 1", Opcode::kCompare, proto::PRED, proto::PRED, {2, 1}, CompareDirection::kEq},
      {"and pred 2, 1", Opcode::kAnd, proto::PRED, proto::PRED, {2, 1}},
      {"compare f32 0.1 == f32 0.1000000001", Opcode::kCompare, proto::F32, proto::PRED, {0.1, 0.1000000001}},
      {"exp bf16 0.1", Opcode::kExp, proto::BF16, proto::BF16, {0.1}},
      {"exp f16 0.3", Opcode::kExp, proto::F16, proto::F16, {0.3}},
      {"multiply bf16 1.1 * 1.3", Opcode::kMultiply, proto::BF16, proto::BF16, {1.1, 1.3}},
      {"add f32 0.1 + 0.2", Opcode::kAdd, proto::F32, proto::F32, {0.1, 0.2}},
      {"divide s32 7 / 0", Opcode::kDivide, proto::S32, proto::S32, {7, 0}},
      {"negate s32 -2^31", Opcode::kNegate, proto::S32, proto::S32, {-2147483648.0}},
      {"power s32 3^40", Opcode::kPower, proto::S32, proto::S32, {3, 40}},
      {"tanh f64", Opcode::kTanh, proto::F64, proto::F64, {0.7}},
      {"convert s64 2^62 -> f32", Opcode::kConvert, proto::S64, proto::F32, {4611686018427387904.0}},
      {"convert f32 3e9 -> s32", Opcode::kConvert, proto::F32, proto::S32, {3e9}},
      {"maximum f32 NaN, 1", Opcode::kMaximum, proto::F32, proto::F32, {std::nan(""), 1}},
  };
  for (const Case& c : cases) {
    for (bool folded : {true, false}) {
      ModuleBuilder b;
      const int64_t hide = b.Parameter(0, proto::PRED, {3});
      std::vector<int64_t> operands;
      for (double v : c.args) {
        const int64_t k = b.Constant(v, c.in, {3});
        operands.push_back(folded ? k : b.Select(hide, k, k));
      }
      b.Output(b.Op(c.op, operands, c.out, {3},
                    [&](proto::Instruction& i) { i.set_direction(static_cast<int32_t>(c.direction)); }));
      const proto::Executable exe = CompileToProto(b.module(), kUnfused);
      if (folded && !c.may_stay_unfolded) {
        EXPECT_EQ(KernelsComputing(exe, c.op), 0) << c.name << " (not folded)\n" << KernelSummary(exe);
      }
      static std::vector<uint8_t> reference;
      const std::vector<HostArray> out =
          Run(b.module(), kUnfused, {MakeArray<uint8_t>(PrimitiveType::kPred, {3}, {1, 1, 1})});
      if (!folded) {
        EXPECT_EQ(out[0].bytes, reference) << c.name << ": folding changed the bits";
      }
      reference = out[0].bytes;
    }
  }
}

TEST_F(PassesTest, FoldingLeavesReductionsAndRandomnessToKernels) {
  ModuleBuilder b;
  b.Output(b.Reduce(Combiner::kMax, b.Constant(7, proto::F32, {0, 3}), {0}));  // over nothing: -inf
  b.Output(b.Reduce(Combiner::kMax, b.Constant(7, proto::F32, {4, 3}), {0}));
  b.Output(b.Reduce(Combiner::kSum, b.Constant(0.5, proto::F32, {4, 3}), {0}));
  b.Output(b.Rng(Opcode::kRngUniform, b.Constant(9, proto::S64), proto::F32, {16}, 0));
  const proto::Executable exe = CompileToProto(b.module(), kUnfused);
  EXPECT_EQ(CountKernels(exe, proto::Kernel::REDUCE), 2) << KernelSummary(exe);  // max over [0,3], the sum
  EXPECT_EQ(KernelsComputing(exe, Opcode::kRngUniform), 1);
  const std::vector<HostArray> out = Run(b.module(), kUnfused, {});
  EXPECT_THAT(out[0].values<float>(), ::testing::Each(-std::numeric_limits<float>::infinity()));
  EXPECT_THAT(out[1].values<float>(), ::testing::Each(7.0f));
  EXPECT_THAT(out[2].values<float>(), ::testing::Each(2.0f));
  std::set<float> distinct;
  for (float v : out[3].values<float>()) distinct.insert(v);
  EXPECT_GT(distinct.size(), 10u);
}

// --- pass bookkeeping -----------------------------------------------------------------------------
// --- scheduling ------------------------------------------------------------------------------------
// Where `module`'s instruction `id` is after ScheduleReductionsEarly, given how it was built.
struct Scheduled {
  HloModule hlo;
  std::vector<int64_t> at;  // new index of each instruction
};
Scheduled Schedule(const proto::Module& module, int64_t* moved = nullptr) {
  Scheduled s{FromVerifiedProto(module), {}};
  // Each instruction remembers its old index through a unique stream number (no pass reads it here).
  for (size_t i = 0; i < s.hlo.insts.size(); ++i) s.hlo.insts[i].stream = static_cast<int64_t>(i) + 1000;
  const int64_t m = ScheduleReductionsEarly(s.hlo);
  if (moved != nullptr) *moved = m;
  s.at.assign(s.hlo.insts.size(), -1);
  for (size_t i = 0; i < s.hlo.insts.size(); ++i) {
    s.at[static_cast<size_t>(s.hlo.insts[i].stream - 1000)] = static_cast<int64_t>(i);
    for (int64_t op : s.hlo.insts[i].operands) EXPECT_LT(op, static_cast<int64_t>(i)) << "an operand after its user";
  }
  return s;
}

TEST_F(PassesTest, AWeightGradientRunsRightAfterItsOperands) {
  // dW = x^T dY, built after dX = dY W^T and what follows it (as a step's graph puts the weight gradients
  // after the whole backward): it moves up to right after dY, with the transpose it reads x through, and
  // runs before dX's product; the values are the same.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {256, 16}), w = b.Parameter(1, proto::F32, {16, 32});
  const int64_t dy = b.Unary(Opcode::kExp, b.Unary(Opcode::kTanh, b.Dot(x, w)));
  const int64_t dx = b.Dot(dy, b.Transpose(w, {1, 0}));
  const int64_t later = b.Unary(Opcode::kTanh, b.Unary(Opcode::kExp, dx));
  const int64_t xt = b.Transpose(x, {1, 0});
  const int64_t dw = b.Dot(xt, dy);
  const int64_t db = b.Reduce(Combiner::kSum, dy, {0});
  b.Output(later);
  b.Output(dw);
  b.Output(db);
  int64_t moved = 0;
  const Scheduled s = Schedule(b.module(), &moved);
  EXPECT_EQ(moved, 3);  // the transpose, dW and the bias's sums
  EXPECT_EQ(s.at[static_cast<size_t>(xt)], s.at[static_cast<size_t>(x)] + 1);
  EXPECT_EQ(s.at[static_cast<size_t>(dw)], s.at[static_cast<size_t>(dy)] + 1);
  EXPECT_EQ(s.at[static_cast<size_t>(db)], s.at[static_cast<size_t>(dy)] + 2);
  EXPECT_LT(s.at[static_cast<size_t>(db)], s.at[static_cast<size_t>(dx)]);
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  EXPECT_EQ(PassChanges(exe, "schedule_reductions_early"), 2);  // the transpose is the product's flag by then
  std::vector<std::string> dots;
  for (const proto::Kernel& k : exe.kernels()) {
    if (k.kind() == proto::Kernel::DOT) dots.push_back(absl::StrCat(k.m(), "x", k.n()));
  }
  EXPECT_THAT(dots, ElementsAre("256x32", "16x32", "256x16")) << KernelSummary(exe);
  std::mt19937_64 rng(2);
  const std::vector<HostArray> in = {F32({256, 16}, testing::RandomFloats(rng, 256 * 16, -1, 1)),
                                     F32({16, 32}, testing::RandomFloats(rng, 16 * 32, -1, 1))};
  const std::vector<HostArray> fused = Run(b.module(), kFused, in), unfused = Run(b.module(), kUnfused, in);
  for (size_t r = 0; r < fused.size(); ++r) EXPECT_EQ(fused[r].bytes, unfused[r].bytes) << "result " << r;
}

TEST_F(PassesTest, WhatDoesNotShrinkStaysWhereItIs) {
  // A product as large as its operands (a forward's), a sum of a row into a value only 4 times smaller,
  // a view that something staying also reads, and a sum already right after its operand, keep their places.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {64, 16}), w = b.Parameter(1, proto::F32, {16, 32});
  const int64_t wt = b.Transpose(w, {1, 0});
  const int64_t y = b.Unary(Opcode::kExp, b.Parameter(2, proto::F32, {64, 32}));
  const int64_t forward = b.Dot(x, w);
  const int64_t rows = b.Reduce(Combiner::kSum, b.Parameter(3, proto::F32, {8, 4}), {1});
  const int64_t shared = b.Dot(y, wt);  // [64, 16]: not smaller than y
  b.Output(b.Reduce(Combiner::kSum, b.Unary(Opcode::kTanh, forward), {0, 1}));
  b.Output(forward);
  b.Output(rows);
  b.Output(shared);
  b.Output(b.Unary(Opcode::kTanh, wt));
  int64_t moved = 0;
  const Scheduled s = Schedule(b.module(), &moved);
  EXPECT_EQ(moved, 0);
  for (size_t i = 0; i < s.at.size(); ++i) EXPECT_EQ(s.at[i], static_cast<int64_t>(i));
}

TEST_F(PassesTest, PassTimingsListEveryPass) {
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {4});
  b.Output(b.Add(x, x));
  const int64_t before = CompilerPassesRun();
  const proto::Executable with = CompileToProto(b.module(), {.fusion = true, .autotune = true});
  std::vector<std::string> names;
  for (const proto::PassTiming& t : with.pass_timings()) {
    names.push_back(t.pass());
    EXPECT_GE(t.ms(), 0) << t.pass();
  }
  EXPECT_THAT(names, ::testing::ElementsAre("verify", "dce", "algebraic_simplifier", "constant_folding", "cse",
                                            "schedule_reductions_early", "fusion", "buffer_assignment", "autotune"));
  EXPECT_GE(CompilerPassesRun() - before, 9);
  EXPECT_GT(with.compile_ms(), 0);
  EXPECT_EQ(with.module_name(), "test");
  EXPECT_EQ(with.op_histogram().at("parameter"), 1);
  EXPECT_EQ(with.op_histogram().at("add"), 1);

  const proto::Executable without = CompileToProto(b.module(), {.fusion = true, .autotune = false});
  names.clear();
  for (const proto::PassTiming& t : without.pass_timings()) names.push_back(t.pass());
  EXPECT_THAT(names, ::testing::Not(::testing::Contains("autotune")));
  EXPECT_THAT(names, ::testing::Contains("buffer_assignment"));
}

// Every kernel worth tuning has one record: each candidate's best time, and as its choice the fastest
// candidate that reproduces the reference's bits, which is the variant the kernel then runs.
TEST_F(PassesTest, AutotuneKeepsEachKernelsFastestIdenticalCandidate) {
  if (ThreadPool::Get().size() < 2) GTEST_SKIP() << "one core: nothing to choose between";
  const int64_t n = 192;  // n * n > 2^15: GEMM and loop candidates
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {n, n});
  const int64_t y = b.Parameter(1, proto::F32, {n, n});
  const int64_t product = b.Dot(x, y);
  b.Output(b.Dot(product, y));
  b.Output(b.Unary(Opcode::kSqrt, b.Add(b.Mul(x, y), y)));
  const proto::Executable exe = CompileToProto(b.module(), {.fusion = true, .autotune = true});
  std::set<int64_t> tuned;
  for (const proto::AutotuneRecord& record : exe.autotune()) {
    if (record.chosen().starts_with("library_")) continue;  // the machine's GEMM library, recorded once
    EXPECT_TRUE(tuned.insert(record.kernel()).second) << "two records of kernel " << record.kernel();
    if (record.has_same_as()) continue;  // the second product: AutotuneMeasuresKernelsAlikeOnce
    ASSERT_GE(record.candidates_size(), 2) << record.kernel();
    double fastest = 1e300;
    const proto::AutotuneCandidate* chosen = nullptr;
    const proto::AutotuneCandidate* fastest_candidate = nullptr;
    for (const proto::AutotuneCandidate& c : record.candidates()) {
      EXPECT_GT(c.us(), 0) << c.name();
      EXPECT_LT(c.us(), 1e6) << c.name();
      if (c.name().find("rejected") != std::string::npos) continue;
      if (c.us() < fastest) fastest_candidate = &c;
      fastest = std::min(fastest, c.us());
      if (c.name() == record.chosen()) chosen = &c;
    }
    ASSERT_NE(chosen, nullptr) << "kernel " << record.kernel() << " chose " << record.chosen();
    if (record.split_by_traffic()) {
      // Timed faster split, and split the way DotSplitVariant says: no slower than whole.
      EXPECT_THAT(fastest_candidate->name(), ::testing::HasSubstr("_panels_")) << record.chosen();
      EXPECT_THAT(record.chosen(), ::testing::HasSubstr("_panels_"));
      EXPECT_LE(chosen->us(), record.candidates(0).us()) << record.chosen();
    } else {
      EXPECT_EQ(chosen->us(), fastest) << record.chosen();
    }
    const proto::Kernel& kernel = exe.kernels(static_cast<int>(record.kernel()));
    if (kernel.kind() == proto::Kernel::DOT) {
      const int64_t variant = record.chosen().find("row_panels") != std::string::npos ||
                                      record.chosen().find("_tiles_") != std::string::npos
                                  ? kDotRowPanels
                              : record.chosen().find("column_panels") != std::string::npos ? kDotColumnPanels
                                                                                           : kDotSerial;
      EXPECT_EQ(kernel.variant(), variant) << record.chosen();
    } else {
      EXPECT_EQ(kernel.grain() > 0, record.chosen().starts_with("parallel")) << record.chosen();
    }
  }
  EXPECT_EQ(tuned.size(), 3u) << KernelSummary(exe);  // both products and the loop
}

// A product split over two threads goes the way that brings each the fewest bytes: the MLP's x W1^T (W1
// twice x's bytes) in columns, each reading its rows of W1; its weight gradient, whose result is the
// largest array, in rows, which the next kernel's halves read where they were written; the GPT's
// products by their larger operand.
TEST(DotSplitVariant, SplitsTheWayThatMovesTheFewestBytes) {
  auto dot = [](int64_t m, int64_t n, int64_t k) {
    proto::Kernel kernel;
    kernel.set_batch(1);
    kernel.set_m(m);
    kernel.set_n(n);
    kernel.set_k(k);
    return kernel;
  };
  EXPECT_EQ(DotSplitVariant(dot(128, 256, 784), 4, 4, 2), kDotColumnPanels);   // x W1^T
  EXPECT_EQ(DotSplitVariant(dot(256, 784, 128), 4, 4, 2), kDotRowPanels);      // dW1 = dY1^T x
  EXPECT_EQ(DotSplitVariant(dot(4096, 512, 128), 4, 4, 2), kDotRowPanels);     // the GPT's x W^T
  EXPECT_EQ(DotSplitVariant(dot(128, 512, 4096), 4, 4, 2), kDotColumnPanels);  // its weight gradients
  EXPECT_EQ(DotSplitVariant(dot(128, 256, 784), 2, 2, 2), kDotColumnPanels);   // only proportions count
  EXPECT_EQ(DotSplitVariant(dot(64, 64, 64), 4, 4, 2), kDotRowPanels);         // square: columns' C is read across
  EXPECT_EQ(DotSplitVariant(dot(64, 128, 64), 4, 4, 2), kDotRowPanels);        // a tie (40 KiB a thread): rows
  EXPECT_EQ(DotSplitVariant(dot(256, 784, 128), 4, 4, 4), kDotColumnPanels);   // four threads: dW1 in columns
}

// A GEMM library is timed by its fastest variant that computes its whole product's bits: panels that round
// differently are never run (tuning keeps the result), so their time must not win the library the record.
TEST(LibraryTimeUs, CountsOnlyTheVariantsComputingTheWholeProductsBits) {
  const std::vector<TimedVariant> runs = {{3.6, "whole"}, {1.9, "other"}, {2.5, "whole"}};
  EXPECT_EQ(LibraryTimeUs(runs), 2.5);
  EXPECT_EQ(LibraryTimeUs(std::span(runs).first(2)), 3.6);
  EXPECT_EQ(LibraryTimeUs({}), std::nullopt);
}

// A kernel of the same configuration on the same shapes as an earlier one (each layer of a model has its
// own) is not measured again: it takes the earlier kernel's choice, and its record says whose.
TEST_F(PassesTest, AutotuneMeasuresKernelsAlikeOnce) {
  if (ThreadPool::Get().size() < 2) GTEST_SKIP() << "one core: nothing to choose between";
  const int64_t n = 192;  // n * n * n > 2^15: tuned
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {n, n});
  const int64_t y = b.Parameter(1, proto::F32, {n, n});
  const int64_t wide = b.Parameter(2, proto::F32, {n, 2 * n});
  b.Output(b.Dot(b.Dot(x, y), y));  // the same product twice, on other slots
  b.Output(b.Dot(x, wide));         // another shape
  const proto::Executable exe = CompileToProto(b.module(), {.fusion = true, .autotune = true});
  std::map<int64_t, const proto::AutotuneRecord*> measured, taken;
  for (const proto::AutotuneRecord& record : exe.autotune()) {
    if (record.chosen().starts_with("library_")) continue;
    if (exe.kernels(static_cast<int>(record.kernel())).kind() != proto::Kernel::DOT) continue;
    (record.has_same_as() ? taken : measured)[record.kernel()] = &record;
  }
  ASSERT_EQ(measured.size(), 2u) << "one record per shape with its candidates";
  ASSERT_EQ(taken.size(), 1u) << "the second product of n x n x n";
  const auto& [kernel, record] = *taken.begin();
  ASSERT_TRUE(measured.contains(record->same_as())) << record->same_as();
  EXPECT_LT(record->same_as(), kernel);
  EXPECT_EQ(record->candidates_size(), 0);
  const proto::AutotuneRecord& first = *measured.at(record->same_as());
  EXPECT_EQ(record->chosen(), first.chosen());
  const proto::Kernel& later = exe.kernels(static_cast<int>(kernel));
  const proto::Kernel& earlier = exe.kernels(static_cast<int>(record->same_as()));
  EXPECT_EQ(std::tuple(later.m(), later.n(), later.k()), std::tuple(n, n, n));
  EXPECT_EQ(std::tuple(earlier.m(), earlier.n(), earlier.k()), std::tuple(n, n, n));
  EXPECT_EQ(later.variant(), earlier.variant());
  EXPECT_EQ(later.gemm_library(), earlier.gemm_library());
  EXPECT_NE(later.output(), earlier.output());
}

// Whole or split is timing's choice; which way to split, DotSplitVariant's, whichever split timed faster,
// unless its way timed slower than the whole product.
TEST_F(PassesTest, AutotuneSplitsAProductTheWayThatMovesTheFewestBytes) {
  if (ThreadPool::Get().size() != 2) GTEST_SKIP() << "the shapes below are chosen for two threads";
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {128, 784});
  const int64_t w = b.Parameter(1, proto::F32, {256, 784});
  const int64_t dy = b.Parameter(2, proto::F32, {128, 256});
  b.Output(b.Dot(x, w, false, true));   // [128x784] x [784x256]
  b.Output(b.Dot(dy, x, true, false));  // [256x128] x [128x784]
  const proto::Executable exe = CompileToProto(b.module(), {.fusion = true, .autotune = true});
  int split_products = 0;
  for (const proto::AutotuneRecord& record : exe.autotune()) {
    if (record.chosen().starts_with("library_")) continue;
    const proto::Kernel& kernel = exe.kernels(static_cast<int>(record.kernel()));
    ASSERT_EQ(kernel.kind(), proto::Kernel::DOT);
    if (kernel.variant() == kDotSerial) continue;  // timed faster whole on this machine now
    ++split_products;
    const int64_t by_bytes = kernel.m() == 128 ? kDotColumnPanels : kDotRowPanels;
    if (kernel.variant() == by_bytes) continue;
    // The other way: only where this way timed slower than whole (a busy machine).
    const std::string way = by_bytes == kDotColumnPanels ? "_column_panels_" : "_row_panels_";
    for (const proto::AutotuneCandidate& c : record.candidates()) {
      if (c.name().find(way) != std::string::npos) {
        EXPECT_GT(c.us(), record.candidates(0).us()) << record.chosen();
      }
    }
  }
  if (split_products == 0) GTEST_SKIP() << "both products timed faster whole: no split to check";
}

TEST_F(PassesTest, CompileOptionsFingerprintNamesEveryOption) {
  const CompileOptions a{.fusion = true, .autotune = true, .max_fusion_steps = 48};
  EXPECT_NE(a.Fingerprint(), (CompileOptions{.fusion = false, .autotune = true, .max_fusion_steps = 48}).Fingerprint());
  EXPECT_NE(a.Fingerprint(), (CompileOptions{.fusion = true, .autotune = false, .max_fusion_steps = 48}).Fingerprint());
  EXPECT_NE(a.Fingerprint(), (CompileOptions{.fusion = true, .autotune = true, .max_fusion_steps = 47}).Fingerprint());
  EXPECT_EQ(a.Fingerprint(), CompileOptions{}.Fingerprint());
}

}  // namespace passes_test
}  // namespace lazyrt::pjrt
