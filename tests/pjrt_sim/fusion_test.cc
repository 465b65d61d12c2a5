// Fusion: which values become kernels of their own and which are computed inside their readers'
// programs (elementwise chains, views as affine loads, producers into reductions, multi-output loops).
#include "pjrt_sim/fusion.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <set>

#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/kernels/fused_program.h"
#include "tests/pjrt_sim/compiler_test_util.h"

namespace lazyrt::pjrt {
namespace fusion_test {

class FusionTest : public CompilerTest {
 protected:
  // No module compiled here needed its sibling fusions undone (they had put a kernel before one it reads).
  void TearDown() override { EXPECT_EQ(SiblingFusionFallbacks(), fallbacks_at_start_); }
  const int64_t fallbacks_at_start_ = SiblingFusionFallbacks();

  // The bits of every result of `module`, compiled with `fused` and unfused, on random arrays of the
  // parameters' dims.
  void ExpectFusedBitsAreUnfusedBits(const proto::Module& module, const std::vector<Dims>& parameter_dims,
                                     const CompileOptions& fused_options = kFused) {
    std::mt19937_64 rng(5);
    std::vector<HostArray> in;
    for (const Dims& dims : parameter_dims)
      in.push_back(F32(dims, testing::RandomFloats(rng, testing::NumElements(dims), -1, 1)));
    const std::vector<HostArray> fused = Run(module, fused_options, in), unfused = Run(module, kUnfused, in);
    ASSERT_EQ(fused.size(), unfused.size());
    for (size_t r = 0; r < fused.size(); ++r) EXPECT_EQ(fused[r].bytes, unfused[r].bytes) << "result " << r;
  }
  // The same, on `args` parameters of `dims`.
  void ExpectFusedBitsAreUnfusedBits(const proto::Module& module, const Dims& dims, int args) {
    ExpectFusedBitsAreUnfusedBits(module, std::vector<Dims>(static_cast<size_t>(args), dims));
  }
};

TEST_F(FusionTest, ElementwiseChainFusesIntoOneLoopKernel) {
  const Dims d = {16, 9};
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, d), y = b.Parameter(1, proto::F32, d);
  int64_t v = x;
  for (int i = 0; i < 10; ++i) v = b.Unary(i % 2 ? Opcode::kTanh : Opcode::kNegate, b.Add(v, y));
  b.Output(v);
  const proto::Executable fused = CompileToProto(b.module(), kFused);
  ASSERT_EQ(fused.kernels_size(), 1) << KernelSummary(fused);
  EXPECT_EQ(fused.kernels(0).kind(), proto::Kernel::LOOP);
  EXPECT_EQ(fused.arena_bytes(), 0);  // nothing materialized in between
  int loads = 0;
  for (const proto::Step& s : fused.kernels(0).program()) loads += s.load();
  EXPECT_EQ(loads, 2);  // x and y, each read once
  EXPECT_EQ(PassChanges(fused, "fusion"), 19);
  const proto::Executable unfused = CompileToProto(b.module(), kUnfused);
  EXPECT_EQ(unfused.kernels_size(), 20) << KernelSummary(unfused);
}

TEST_F(FusionTest, ViewsFuseAsAffineLoads) {
  // add(transpose(x), broadcast(row)): one kernel, the transposed load strided, the row load with
  // stride 0 along the broadcast dim.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {3, 4}), row = b.Parameter(1, proto::F32, {3});
  b.Output(b.Add(b.Transpose(x, {1, 0}), b.Broadcast(row, {4, 3}, {1})));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  ASSERT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
  std::vector<std::vector<int64_t>> strides;
  for (const proto::Step& s : exe.kernels(0).program()) {
    if (s.load()) strides.emplace_back(s.strides().begin(), s.strides().end());
  }
  EXPECT_THAT(strides, ::testing::UnorderedElementsAre(std::vector<int64_t>{1, 4}, std::vector<int64_t>{0, 1}));
}

TEST_F(FusionTest, UnitDimReshapesAreViews) {
  // A head of a [2, 3, 1, 3, 2, 2] qkv ([batch, time, group, q/k/v, heads, dim]): sliced, its unit dims
  // dropped and made head-major, plus 1. One kernel reading qkv through the composed view, where a
  // reshape used to cut the chain (the slice materialized, then copied again by the transpose).
  ModuleBuilder b;
  const Dims qkv_dims = {2, 3, 1, 3, 2, 2};
  const int64_t qkv = b.Parameter(0, proto::F32, qkv_dims);
  const int64_t k = b.Slice(qkv, {0, 0, 0, 1, 0, 0}, {2, 3, 1, 2, 2, 2}, {1, 1, 1, 1, 1, 1});
  const int64_t heads = b.Transpose(b.Reshape(k, {2, 3, 2, 2}), {0, 2, 1, 3});
  b.Output(b.Add(heads, b.Constant(1, proto::F32, {2, 2, 3, 2})));
  // A unit-dim reshape that is also a result stays an alias of its (materialized) operand.
  const int64_t t = b.Transpose(b.Parameter(1, proto::F32, {2, 3}), {1, 0});
  const int64_t t1 = b.Reshape(t, {3, 1, 2});
  b.Output(t1);
  b.Output(b.Mul(t1, t1));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  EXPECT_EQ(exe.kernels_size(), 3) << KernelSummary(exe);  // the head, the transpose, the product
  std::vector<float> qkv_values(72), p(6);
  std::iota(qkv_values.begin(), qkv_values.end(), 0.0f);
  std::iota(p.begin(), p.end(), 0.0f);
  for (const CompileOptions& o : {kUnfused, kFused}) {
    const std::vector<HostArray> out = Run(b.module(), o, {F32(qkv_dims, qkv_values), F32({2, 3}, p)});
    ASSERT_EQ(out.size(), 3u);
    // heads[b, h, t, e] = qkv[b, t, 0, 1, h, e] + 1 = (b * 36 + t * 12 + 4 + h * 2 + e) + 1.
    std::vector<float> expected;
    for (int bi = 0; bi < 2; ++bi)
      for (int h = 0; h < 2; ++h)
        for (int ti = 0; ti < 3; ++ti)
          for (int e = 0; e < 2; ++e) expected.push_back(static_cast<float>(bi * 36 + ti * 12 + 4 + h * 2 + e + 1));
    EXPECT_EQ(out[0].values<float>(), expected);
    EXPECT_THAT(out[1].values<float>(), ::testing::ElementsAre(0, 3, 1, 4, 2, 5));
    EXPECT_THAT(out[2].values<float>(), ::testing::ElementsAre(0, 9, 1, 16, 4, 25));
  }
}

// The one kernel computing `op`, or nullptr if none or several do.
const proto::Kernel* KernelComputing(const proto::Executable& exe, Opcode op) {
  const proto::Kernel* found = nullptr;
  for (const proto::Kernel& k : exe.kernels()) {
    if (!Computes(k, op)) continue;
    if (found != nullptr) return nullptr;
    found = &k;
  }
  return found;
}

// A concatenation reads transposes and slices whose rows stay contiguous through views of the arrays
// they view, not through copies kernels of their own make first; an operand whose rows do not (its last
// dim moved) is copied by a loop as before. The bits are those of the unfused graph.
TEST_F(FusionTest, ConcatenationReadsTransposesAndSlicesThroughViews) {
  const Dims d = {4, 4, 4, 4};
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, d), y = b.Parameter(1, proto::F32, d), z = b.Parameter(2, proto::F32, d);
  const int64_t heads = b.Transpose(x, {0, 2, 1, 3});
  const int64_t part = b.Transpose(b.Slice(y, {0, 1, 0, 0}, {4, 3, 4, 4}, {1, 1, 1, 1}), {0, 2, 1, 3});  // [4,4,2,4]
  const int64_t columns = b.Transpose(z, {0, 1, 3, 2});  // its rows are columns of z
  b.Output(b.Op(Opcode::kConcatenate, {heads, part, columns}, proto::F32, {4, 4, 10, 4},
                [](proto::Instruction& i) { i.set_axis(2); }));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  ASSERT_EQ(exe.kernels_size(), 2) << KernelSummary(exe);
  EXPECT_EQ(exe.kernels(0).kind(), proto::Kernel::LOOP);  // the columns' transpose
  const proto::Kernel& concat = exe.kernels(1);
  ASSERT_EQ(concat.kind(), proto::Kernel::CONCATENATE);
  ASSERT_EQ(concat.operand_views_size(), 3);
  EXPECT_THAT(concat.operand_views(0).strides(), ::testing::ElementsAre(64, 4, 16, 1));
  EXPECT_EQ(concat.operand_views(1).offset(), 16);  // y[:, 1:3] from its second row block
  EXPECT_THAT(concat.operand_views(1).dims(), ::testing::ElementsAre(4, 4, 2, 4));
  EXPECT_EQ(concat.operand_views(2).dims_size(), 0);
  ExpectFusedBitsAreUnfusedBits(b.module(), d, 3);
}

TEST_F(FusionTest, ElementwiseValueWithSeveralReadersIsComputedOnceByItsFirstReader) {
  // e is read by two loops: the first computes it as an extra output and stores it for the second.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {5});
  const int64_t e = b.Unary(Opcode::kExp, x);
  b.Output(b.Add(b.Unary(Opcode::kTanh, e), b.Unary(Opcode::kNegate, e)));
  b.Output(b.Mul(e, e));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  ASSERT_EQ(exe.kernels_size(), 2) << KernelSummary(exe);
  const proto::Kernel* first = KernelComputing(exe, Opcode::kExp);
  ASSERT_EQ(first, &exe.kernels(0)) << KernelSummary(exe);
  ASSERT_EQ(first->extra_outputs_size(), 1);
  EXPECT_THAT(exe.kernels(1).inputs(), ::testing::Contains(first->extra_outputs(0)));
  ExpectFusedBitsAreUnfusedBits(b.module(), {5}, 1);
}

TEST_F(FusionTest, BiasAddWithSeveralReadersIsComputedOnceByTheirOneKernel) {
  // v = x + bias is read by a loop and by a reduction (of v itself, or of a product of it), over columns or
  // rows: both are computed by one REDUCE kernel (sibling fusion through the fused v, which each would
  // otherwise compute again from x), which computes v once and writes it nowhere (GELU's input, read by
  // its forward and backward).
  const Dims d = {16, 40};  // the bias an eighth of the sum or less
  for (bool reduce_directly : {false, true}) {
    for (const int64_t dim : {0, 1}) {
      SCOPED_TRACE(absl::StrCat(reduce_directly ? "sum(v)" : "sum(v * v)", " over dim ", dim));
      ModuleBuilder b;
      const int64_t x = b.Parameter(0, proto::F32, d), bias = b.Parameter(1, proto::F32, {40});
      const int64_t v = b.Add(x, b.Broadcast(bias, d, {1}));
      b.Output(b.Unary(Opcode::kTanh, v));
      b.Output(b.Reduce(Combiner::kSum, reduce_directly ? v : b.Mul(v, v), {dim}));
      const proto::Executable exe = CompileToProto(b.module(), kFused);
      ASSERT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
      EXPECT_EQ(exe.kernels(0).kind(), proto::Kernel::REDUCE);
      EXPECT_EQ(KernelsComputing(exe, Opcode::kAdd), 1) << KernelSummary(exe);
      EXPECT_EQ(exe.arena_bytes(), 0);
      ExpectFusedBitsAreUnfusedBits(b.module(), {d, {40}});
    }
  }
}

// The first DOT kernel of `exe`, or null.
const proto::Kernel* DotKernelOf(const proto::Executable& exe) {
  for (const proto::Kernel& k : exe.kernels()) {
    if (k.kind() == proto::Kernel::DOT) return &k;
  }
  return nullptr;
}

// The first DOT kernel of `exe` if it adds `addends` addends (an input and an operand view each, after
// its operands, which have no view), else null.
const proto::Kernel* DotWithAddends(const proto::Executable& exe, int addends) {
  const proto::Kernel* dot = DotKernelOf(exe);
  const bool ok = dot != nullptr && dot->inputs_size() == 2 + addends && dot->operand_views_size() == 2 + addends &&
                  dot->operand_views(0).dims_size() == 0 && dot->operand_views(1).dims_size() == 0;
  EXPECT_TRUE(ok) << KernelSummary(exe);
  return ok ? dot : nullptr;
}

TEST_F(FusionTest, ProductPlusBiasIsComputedByTheDotKernel) {
  // The GPT's h = x W + b, reshaped to [B, T, C] and read by GELU's forward and backward: the DOT adds
  // the bias (a view broadcast along its rows) and stores the sum; no loop reads the product back, and
  // the readers load the sum. With the bias on either side of the add, the same bits as unfused.
  for (bool bias_first : {false, true}) {
    SCOPED_TRACE(bias_first ? "bias + x W" : "x W + bias");
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, {16, 24}), w = b.Parameter(1, proto::F32, {24, 40}),
                  bias = b.Parameter(2, proto::F32, {40});
    const int64_t product = b.Reshape(b.Dot(x, w), {2, 8, 40});
    const int64_t bias_rows = b.Broadcast(bias, {2, 8, 40}, {2});
    const int64_t h = bias_first ? b.Add(bias_rows, product) : b.Add(product, bias_rows);
    b.Output(b.Unary(Opcode::kTanh, h));
    b.Output(b.Mul(h, b.Unary(Opcode::kExp, h)));
    const proto::Executable exe = CompileToProto(b.module(), kFused);
    const proto::Kernel* dot = DotWithAddends(exe, 1);
    ASSERT_NE(dot, nullptr);
    EXPECT_THAT(dot->operand_views(2).dims(), ElementsAre(2, 8, 40));
    EXPECT_THAT(dot->operand_views(2).strides(), ElementsAre(0, 0, 1));
    EXPECT_THAT(dot->label(), ::testing::HasSubstr("+ broadcast"));
    EXPECT_EQ(KernelsComputing(exe, Opcode::kAdd), 0) << KernelSummary(exe);
    EXPECT_EQ(exe.kernels_size(), 3) << KernelSummary(exe);  // the DOT and the two readers
    ExpectFusedBitsAreUnfusedBits(b.module(), {{16, 24}, {24, 40}, {40}});
  }
}

TEST_F(FusionTest, ProductPlusAnArrayOfItsShapeIsComputedByTheDotKernel) {
  // A batch of products plus a stored array of their shape (a gradient accumulated into): the DOT reads
  // the array row-major and adds it to each product.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {3, 6, 5}), w = b.Parameter(1, proto::F32, {3, 7, 5}),
                g = b.Parameter(2, proto::F32, {3, 6, 7});
  b.Output(b.Unary(Opcode::kTanh, b.Add(b.Dot(x, w, false, true), g)));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  const proto::Kernel* dot = DotWithAddends(exe, 1);
  ASSERT_NE(dot, nullptr);
  EXPECT_THAT(dot->operand_views(2).strides(), ElementsAre(42, 7, 1));
  EXPECT_EQ(dot->batch(), 3);
  ExpectFusedBitsAreUnfusedBits(b.module(), {{3, 6, 5}, {3, 7, 5}, {3, 6, 7}});
}

TEST_F(FusionTest, AResidualSumOfABiasedProductIsComputedByTheDotKernel) {
  // A transformer's x + (h W + b): the bias, then the residual x, added by the DOT in that order (the
  // same bits as the two adds' loops), and the sum read by a layer norm and by the next residual add.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {2, 8, 40}), h = b.Parameter(1, proto::F32, {16, 24}),
                w = b.Parameter(2, proto::F32, {24, 40}), bias = b.Parameter(3, proto::F32, {40});
  const int64_t branch = b.Add(b.Reshape(b.Dot(h, w), {2, 8, 40}), b.Broadcast(bias, {2, 8, 40}, {2}));
  const int64_t resid = b.Add(x, branch);
  b.Output(b.Unary(Opcode::kTanh, resid));
  b.Output(b.Add(resid, b.Unary(Opcode::kExp, x)));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  const proto::Kernel* dot = DotWithAddends(exe, 2);
  ASSERT_NE(dot, nullptr);
  EXPECT_THAT(dot->operand_views(2).strides(), ElementsAre(0, 0, 1));     // the bias first
  EXPECT_THAT(dot->operand_views(3).strides(), ElementsAre(320, 40, 1));  // then x
  EXPECT_EQ(dot->label(), "dot(parameter, parameter) + broadcast + parameter");
  ExpectFusedBitsAreUnfusedBits(b.module(), {{2, 8, 40}, {16, 24}, {24, 40}, {40}});
}

TEST_F(FusionTest, ProductPlusAddendStaysALoopWhereTheDotCannotAdd) {
  // The product read by something besides the sum, the product a result itself, 16-bit products (the sum
  // is of their f32 conversion), an addend whose rows are not contiguous (a transpose, a column of
  // means), an addend computed in the sum's own loop: the DOT stores its product and a loop adds.
  const Dims d = {8, 12};
  enum Case { kReadTwice, kResult, kBf16, kTransposed, kColumn, kComputed };
  for (Case c : {kReadTwice, kResult, kBf16, kTransposed, kColumn, kComputed}) {
    SCOPED_TRACE(c);
    ModuleBuilder b;
    const proto::ElementType type = c == kBf16 ? proto::BF16 : proto::F32;
    const int64_t x = b.Parameter(0, type, {8, 6}), w = b.Parameter(1, type, {6, 12});
    const int64_t y = b.Parameter(2, proto::F32, c == kTransposed ? Dims{12, 8} : d);
    int64_t product = b.Dot(x, w);
    if (c == kBf16) product = b.Convert(product, proto::F32);
    const int64_t addend = c == kTransposed ? b.Transpose(y, {1, 0})
                           : c == kColumn   ? b.Broadcast(b.Reduce(Combiner::kSum, y, {1}), d, {0})
                           : c == kComputed ? b.Unary(Opcode::kTanh, y)
                                            : y;
    b.Output(b.Unary(Opcode::kExp, b.Add(product, addend)));
    if (c == kReadTwice) b.Output(b.Unary(Opcode::kTanh, product));
    if (c == kResult) b.Output(product);
    const proto::Executable exe = CompileToProto(b.module(), kFused);
    const proto::Kernel* dot = DotKernelOf(exe);
    ASSERT_NE(dot, nullptr) << KernelSummary(exe);
    EXPECT_EQ(dot->inputs_size(), 2) << KernelSummary(exe);
    EXPECT_EQ(dot->operand_views_size(), 0);
    EXPECT_GE(KernelsComputing(exe, Opcode::kAdd), 1) << KernelSummary(exe);
  }
}

TEST_F(FusionTest, AProductStaysWhereItRunsBestWhenItsSumIsElsewhere) {
  // A weight's gradient plus the one accumulated before (x^T dY + g: a product 16 times smaller than an
  // operand, run right after its operands by the schedule), and a product whose sum comes after 20 MiB of
  // other values: either kernel would have to run at the sum, its operands live until then. Each DOT stores
  // its product, and a loop adds.
  for (bool far : {false, true}) {
    SCOPED_TRACE(far ? "far" : "a gradient");
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, {256, 16}), dy = b.Parameter(1, proto::F32, {256, 32});
    const int64_t g = b.Parameter(2, proto::F32, far ? Dims{256, 32} : Dims{16, 32});
    const int64_t product = far ? b.Dot(x, b.Parameter(3, proto::F32, {16, 32})) : b.Dot(x, dy, true, false);
    int64_t between = b.Parameter(far ? 4 : 3, proto::F32, {1024, 1024});
    for (int i = 0; i < (far ? 5 : 0); ++i) b.Output(between = b.Unary(Opcode::kTanh, between));
    b.Output(b.Add(product, g));
    const proto::Executable exe = CompileToProto(b.module(), kFused);
    const proto::Kernel* dot = DotKernelOf(exe);
    ASSERT_NE(dot, nullptr) << KernelSummary(exe);
    EXPECT_EQ(dot->inputs_size(), 2) << KernelSummary(exe);
    EXPECT_EQ(KernelsComputing(exe, Opcode::kAdd), 1) << KernelSummary(exe);
  }
}

TEST_F(FusionTest, ProductsPlusBiasesKeepTheirBitsInEveryVariant) {
  // Products large enough to be split over the pool by autotuning (rows or columns), each plus a bias:
  // the pieces get their addend where they are, the same bits as a loop adding it to the whole product.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {256, 96}), w = b.Parameter(1, proto::F32, {192, 96}),
                bias = b.Parameter(2, proto::F32, {192}), v = b.Parameter(3, proto::F32, {96, 256});
  const int64_t h = b.Add(b.Dot(x, w, false, true), b.Broadcast(bias, {256, 192}, {1}));
  b.Output(b.Unary(Opcode::kTanh, h));
  const int64_t g = b.Add(b.Dot(v, x, false, false), b.Broadcast(b.Slice(bias, {0}, {96}, {1}), {96, 96}, {1}));
  b.Output(g);
  std::mt19937_64 rng(3);
  std::vector<HostArray> in;
  for (const Dims& dims : std::vector<Dims>{{256, 96}, {192, 96}, {192}, {96, 256}})
    in.push_back(F32(dims, testing::RandomFloats(rng, testing::NumElements(dims), -1, 1)));
  const CompileOptions tuned{.fusion = true, .autotune = true};
  const proto::Executable exe = CompileToProto(b.module(), tuned);
  EXPECT_EQ(CountKernels(exe, proto::Kernel::DOT), 2) << KernelSummary(exe);
  EXPECT_EQ(KernelsComputing(exe, Opcode::kAdd), 0) << KernelSummary(exe);
  const std::vector<HostArray> unfused = Run(b.module(), kUnfused, in);
  for (int compile = 0; compile < 3; ++compile) {  // each compile times the variants again
    const std::vector<HostArray> fused = Run(b.module(), tuned, in);
    ASSERT_EQ(fused.size(), unfused.size());
    for (size_t r = 0; r < fused.size(); ++r) EXPECT_EQ(fused[r].bytes, unfused[r].bytes) << "result " << r;
  }
}

TEST_F(FusionTest, AWidenedProductSummedAndScaledIsOneReduction) {
  // The bf16 step's layer-norm backward: dY = f32(bf16 product) is summed over its rows (the bias's
  // gradient) and multiplied by the weight (the normalization's gradient): one REDUCE kernel loads the
  // product once for both, as the f32 step's does, where dY is the product itself.
  for (const proto::ElementType type : {proto::F32, proto::BF16}) {
    SCOPED_TRACE(type == proto::BF16 ? "bf16" : "f32");
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, type, {64, 32}), y = b.Parameter(1, type, {32, 16});
    const int64_t w = b.Parameter(2, proto::F32, {16});
    int64_t dy = b.Reshape(b.Dot(x, y), {4, 16, 16});
    if (type == proto::BF16) dy = b.Convert(dy, proto::F32);
    b.Output(b.Reduce(Combiner::kSum, dy, {0, 1}));
    b.Output(b.Mul(dy, b.Broadcast(w, {4, 16, 16}, {2})));
    const proto::Executable exe = CompileToProto(b.module(), kFused);
    ASSERT_EQ(exe.kernels_size(), 2) << KernelSummary(exe);
    EXPECT_EQ(exe.kernels(0).kind(), proto::Kernel::DOT);
    EXPECT_EQ(exe.kernels(1).kind(), proto::Kernel::REDUCE);
    EXPECT_EQ(exe.kernels(1).extra_roots_size(), 1) << KernelSummary(exe);
    std::mt19937_64 rng(12);
    const auto operand = [&](const Dims& d) {
      const std::vector<float> v = testing::RandomFloats(rng, testing::NumElements(d), -1, 1);
      if (type == proto::F32) return F32(d, v);
      std::vector<uint16_t> bits;
      for (float f : v) bits.push_back(FloatToBf16(f));
      return MakeArray<uint16_t>(PrimitiveType::kBF16, d, bits);
    };
    const std::vector<HostArray> args = {operand({64, 32}), operand({32, 16}),
                                         F32({16}, testing::RandomFloats(rng, 16, -1, 1))};
    const std::vector<HostArray> fused = Run(b.module(), kFused, args), unfused = Run(b.module(), kUnfused, args);
    for (size_t r = 0; r < fused.size(); ++r) EXPECT_EQ(fused[r].bytes, unfused[r].bytes) << "result " << r;
  }
}

TEST_F(FusionTest, WideningConvertOfAStoredArrayIsNeverStored) {
  // With bf16 products, f32(h) and f32(h) + bias are read by a loop and by a reduction (a layer norm's
  // gradient and its sums; GELU's forward and backward): the bf16 array is loaded and converted by the one
  // kernel computing both (sibling fusion through the converted value), fewer bytes than the stored f32
  // value, which is written nowhere. A narrowing convert (f32 to bf16 of an f32 array) would load more
  // than the stored value: it is computed once.
  const Dims d = {16, 40};
  std::mt19937_64 rng(9);
  std::vector<uint16_t> h_bits;
  for (float v : testing::RandomFloats(rng, testing::NumElements(d), -2, 2)) h_bits.push_back(FloatToBf16(v));
  const HostArray h_array = MakeArray<uint16_t>(PrimitiveType::kBF16, d, h_bits);
  const HostArray bias_array = F32({40}, testing::RandomFloats(rng, 40, -1, 1));
  for (bool add_bias : {false, true}) {
    SCOPED_TRACE(add_bias ? "f32(h) + bias" : "f32(h)");
    ModuleBuilder b;
    const int64_t h = b.Parameter(0, proto::BF16, d), bias = b.Parameter(1, proto::F32, {40});
    const int64_t wide = b.Convert(h, proto::F32);
    const int64_t v = add_bias ? b.Add(wide, b.Broadcast(bias, d, {1})) : wide;
    b.Output(b.Unary(Opcode::kTanh, v));
    b.Output(b.Reduce(Combiner::kSum, b.Mul(v, v), {0}));
    const proto::Executable exe = CompileToProto(b.module(), kFused);
    ASSERT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
    EXPECT_EQ(KernelsComputing(exe, Opcode::kConvert), 1) << KernelSummary(exe);
    EXPECT_EQ(exe.arena_bytes(), 0);
    const std::vector<HostArray> fused = Run(b.module(), kFused, {h_array, bias_array}),
                                 unfused = Run(b.module(), kUnfused, {h_array, bias_array});
    for (size_t r = 0; r < fused.size(); ++r) EXPECT_EQ(fused[r].bytes, unfused[r].bytes) << "result " << r;
  }
  ModuleBuilder b;
  const int64_t narrow = b.Convert(b.Parameter(0, proto::F32, d), proto::BF16);
  b.Output(b.Unary(Opcode::kTanh, narrow));
  b.Output(b.Reduce(Combiner::kSum, b.Mul(narrow, narrow), {0}));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  EXPECT_EQ(KernelsComputing(exe, Opcode::kConvert), 1) << KernelSummary(exe);
}

TEST_F(FusionTest, FunctionOfANarrowArrayIsRecomputedByEachReader) {
  // GELU on a bf16 product: e = erf((f32(h) + bias) * c) is read by the forward's product and by the
  // backward. Each computes e from the bf16 h it loads anyway, so the f32 e is stored nowhere: two
  // kernels compute erf. On an f32 h, recomputing would load as many bytes as the stored e: computed once.
  const Dims d = {16, 40};
  std::mt19937_64 rng(11);
  const std::vector<float> h_values = testing::RandomFloats(rng, testing::NumElements(d), -3, 3);
  std::vector<uint16_t> h_bits;
  for (float v : h_values) h_bits.push_back(FloatToBf16(v));
  const HostArray bias_array = F32({40}, testing::RandomFloats(rng, 40, -1, 1));
  const HostArray dy_array = F32(d, testing::RandomFloats(rng, testing::NumElements(d), -1, 1));
  for (bool bf16 : {true, false}) {
    SCOPED_TRACE(bf16 ? "bf16 h" : "f32 h");
    ModuleBuilder b;
    const int64_t h = b.Parameter(0, bf16 ? proto::BF16 : proto::F32, d);
    const int64_t bias = b.Parameter(1, proto::F32, {40}), dy = b.Parameter(2, proto::F32, d);
    const int64_t x = b.Add(bf16 ? b.Convert(h, proto::F32) : h, b.Broadcast(bias, d, {1}));
    const int64_t e = b.Unary(Opcode::kErf, b.Mul(x, b.Constant(0.70710678, proto::F32, d)));
    const int64_t one = b.Constant(1, proto::F32, d);
    b.Output(b.Mul(x, b.Add(one, e)));                       // the forward's product
    b.Output(b.Mul(dy, b.Add(b.Add(e, one), b.Mul(x, x))));  // the backward's (its shape, not its formula)
    const proto::Executable exe = CompileToProto(b.module(), kFused);
    EXPECT_EQ(KernelsComputing(exe, Opcode::kErf), bf16 ? 2 : 1) << KernelSummary(exe);
    if (bf16) {
      EXPECT_EQ(exe.arena_bytes(), 0) << "x or e stored";
    }
    const std::vector<HostArray> args = {bf16 ? MakeArray<uint16_t>(PrimitiveType::kBF16, d, h_bits) : F32(d, h_values),
                                         bias_array, dy_array};
    const std::vector<HostArray> fused = Run(b.module(), kFused, args), unfused = Run(b.module(), kUnfused, args);
    for (size_t r = 0; r < fused.size(); ++r) EXPECT_EQ(fused[r].bytes, unfused[r].bytes) << "result " << r;
  }
}

TEST_F(FusionTest, FunctionOfAnF32ArrayIsRecomputedByReadersFarApart) {
  // GELU on an f32 h, its forward and backward apart by 24 MiB of other values (a forward's and its
  // backward's, where a stored e would be read back from memory): each computes e from h, which the
  // backward loads anyway, and e is stored nowhere. Close together (the test above) it is computed once.
  const Dims d = {16, 40};
  const int64_t far = 3 << 20;  // elements of the work between: 12 MiB loaded, 12 MiB computed
  std::mt19937_64 rng(12);
  ModuleBuilder b;
  const int64_t h = b.Parameter(0, proto::F32, d), bias = b.Parameter(1, proto::F32, {40});
  const int64_t dy = b.Parameter(2, proto::F32, d);
  const int64_t x = b.Add(h, b.Broadcast(bias, d, {1}));
  const int64_t e = b.Unary(Opcode::kErf, b.Mul(x, b.Constant(0.70710678, proto::F32, d)));
  const int64_t one = b.Constant(1, proto::F32, d);
  b.Output(b.Mul(x, b.Add(one, e)));
  b.Output(b.Unary(Opcode::kTanh, b.Parameter(3, proto::F32, {far})));
  b.Output(b.Mul(dy, b.Add(b.Add(e, one), b.Mul(x, x))));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  EXPECT_EQ(KernelsComputing(exe, Opcode::kErf), 2) << KernelSummary(exe);
  EXPECT_EQ(exe.arena_bytes(), 0) << "x or e stored";
  const std::vector<HostArray> args = {F32(d, testing::RandomFloats(rng, testing::NumElements(d), -3, 3)),
                                       F32({40}, testing::RandomFloats(rng, 40, -1, 1)),
                                       F32(d, testing::RandomFloats(rng, testing::NumElements(d), -1, 1)),
                                       F32({far}, std::vector<float>(static_cast<size_t>(far), 0.5f))};
  const std::vector<HostArray> fused = Run(b.module(), kFused, args), unfused = Run(b.module(), kUnfused, args);
  for (size_t r = 0; r < fused.size(); ++r) EXPECT_EQ(fused[r].bytes, unfused[r].bytes) << "result " << r;
}

TEST_F(FusionTest, FunctionsOfANarrowArrayStoredWhereRecomputingWouldCostMore) {
  // Computed once and stored, each time erf reads a bf16 array through f32 work: read by broadcasts (each
  // reader would compute it per element of its larger space), in f64 (scalar library calls), mixed with
  // a second full-size array, and four functions below the value (past the depth recomputation walks).
  const Dims row = {40}, d = {16, 40};
  // Kernels computing erf when `value` is read twice, at its own shape or through two broadcasts.
  const auto erf_kernels = [&](const std::function<int64_t(ModuleBuilder&)>& value, bool broadcast) {
    ModuleBuilder b;
    const int64_t e = value(b);
    if (broadcast) {
      b.Output(b.Unary(Opcode::kTanh, b.Broadcast(e, {16, 40}, {1})));
      b.Output(b.Unary(Opcode::kTanh, b.Broadcast(e, {40, 16}, {0})));
    } else {
      b.Output(b.Unary(Opcode::kTanh, e));
      b.Output(b.Mul(e, e));
    }
    const proto::Executable exe = CompileToProto(b.module(), kFused);
    return KernelsComputing(exe, Opcode::kErf);
  };
  // erf of `tanhs` nested tanh of f32(h).
  const auto erf_of = [](ModuleBuilder& b, int64_t h, int tanhs) {
    int64_t x = b.Convert(h, proto::F32);
    for (int t = 0; t < tanhs; ++t) x = b.Unary(Opcode::kTanh, x);
    return b.Unary(Opcode::kErf, x);
  };
  // Recomputed by both readers: the rule's own case, at the depth it reaches.
  EXPECT_EQ(erf_kernels([&](ModuleBuilder& b) { return erf_of(b, b.Parameter(0, proto::BF16, d), 3); }, false), 2);
  EXPECT_EQ(erf_kernels([&](ModuleBuilder& b) { return erf_of(b, b.Parameter(0, proto::BF16, d), 4); }, false), 1);
  EXPECT_EQ(erf_kernels([&](ModuleBuilder& b) { return erf_of(b, b.Parameter(0, proto::BF16, row), 0); }, true), 1);
  EXPECT_EQ(
      erf_kernels(
          [&](ModuleBuilder& b) { return b.Unary(Opcode::kErf, b.Convert(b.Parameter(0, proto::F32, d), proto::F64)); },
          false),
      1);
  EXPECT_EQ(erf_kernels(
                [&](ModuleBuilder& b) {
                  const int64_t x = b.Convert(b.Parameter(0, proto::BF16, d), proto::F32);
                  return b.Unary(Opcode::kErf, b.Add(x, b.Parameter(1, proto::F32, d)));
                },
                false),
            1);
}

TEST_F(FusionTest, AConvertOfAReshapedViewIsOneLoop) {
  // bf16(reshape(transpose(x))), the attention's heads put back in order and rounded for the output
  // projection: the simplifier converts before reshaping, so one loop reads x through the transpose
  // and writes bf16; the f32 transpose is not stored. A product's convert stays after its reshape: the
  // product is stored anyway, and its bf16 rounding is computed by the tanh that reads it.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {4, 8, 2, 3}), w = b.Parameter(1, proto::F32, {6, 5});
  const int64_t heads = b.Reshape(b.Transpose(x, {1, 0, 2, 3}), {32, 6});
  b.Output(b.Convert(heads, proto::BF16));
  const int64_t product = b.Reshape(b.Dot(b.Reshape(x, {32, 6}), w), {16, 10});
  b.Output(b.Unary(Opcode::kTanh, b.Convert(product, proto::BF16)));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  ASSERT_EQ(exe.kernels_size(), 3) << KernelSummary(exe);
  EXPECT_EQ(exe.kernels(0).label(), "convert(transpose)");
  EXPECT_EQ(exe.kernels(1).kind(), proto::Kernel::DOT);
  EXPECT_EQ(exe.kernels(2).label(), "tanh(convert)");
  ExpectFusedBitsAreUnfusedBits(b.module(), {{4, 8, 2, 3}, {6, 5}});
}

TEST_F(FusionTest, ANarrowedCopyOfATransposedWeightIsConvertedInOrderAndReadTransposed) {
  // x bf16(W^T), W [out, in] as a linear layer's weight under bf16 products: the simplifier converts W in
  // its own order (a loop reading it contiguously) and the product reads the bf16 copy transposed; the
  // backward's product with bf16(W^T)^T reads the same copy untransposed. The same bits as the loop that
  // converted W^T.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {5, 6}), w = b.Parameter(1, proto::F32, {4, 6});
  const int64_t g = b.Parameter(2, proto::F32, {5, 4});
  const int64_t wt = b.Convert(b.Transpose(w, {1, 0}), proto::BF16);    // [6, 4]
  b.Output(b.Dot(b.Convert(x, proto::BF16), wt));                       // [5, 4]
  b.Output(b.Dot(b.Convert(g, proto::BF16), b.Transpose(wt, {1, 0})));  // [5, 6]
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  int converts_of_w = 0;
  for (const proto::Kernel& k : exe.kernels()) {
    if (k.kind() == proto::Kernel::DOT) continue;
    EXPECT_EQ(KernelsComputing(exe, Opcode::kTranspose), 0) << KernelSummary(exe);
    if (k.label() == "convert(parameter)" && k.iteration_shape().dims(0) == 4) ++converts_of_w;
  }
  EXPECT_EQ(converts_of_w, 1) << KernelSummary(exe);
  int transposed = 0;
  for (const proto::Kernel& k : exe.kernels()) transposed += k.kind() == proto::Kernel::DOT && k.transpose_rhs();
  EXPECT_EQ(transposed, 1) << KernelSummary(exe);
  // Against the same products of W^T given whole (nothing to move): small integers, so that every sum is
  // exact whatever order a layout's GEMM adds in.
  ModuleBuilder given;
  const int64_t gx = given.Parameter(0, proto::F32, {5, 6}), gwt = given.Parameter(1, proto::F32, {6, 4});
  const int64_t gg = given.Parameter(2, proto::F32, {5, 4});
  const int64_t gwt16 = given.Convert(gwt, proto::BF16);
  given.Output(given.Dot(given.Convert(gx, proto::BF16), gwt16));
  given.Output(given.Dot(given.Convert(gg, proto::BF16), given.Transpose(gwt16, {1, 0})));
  std::mt19937_64 rng(21);
  std::uniform_int_distribution<int> small(-4, 4);
  const auto ints = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = static_cast<float>(small(rng));
    return v;
  };
  const std::vector<float> xv = ints(30), wv = ints(24), gv = ints(20);
  std::vector<float> wtv(24);
  for (int64_t o = 0; o < 4; ++o) {
    for (int64_t i = 0; i < 6; ++i) wtv[static_cast<size_t>(i * 4 + o)] = wv[static_cast<size_t>(o * 6 + i)];
  }
  const std::vector<HostArray> moved = Run(b.module(), kFused, {F32({5, 6}, xv), F32({4, 6}, wv), F32({5, 4}, gv)}),
                               whole =
                                   Run(given.module(), kFused, {F32({5, 6}, xv), F32({6, 4}, wtv), F32({5, 4}, gv)});
  ASSERT_EQ(moved.size(), whole.size());
  for (size_t r = 0; r < moved.size(); ++r) EXPECT_EQ(moved[r].bytes, whole[r].bytes) << "result " << r;
}

TEST_F(FusionTest, AConvertStaysAfterAReshapeWhereMovingItCostsMore) {
  // Widening: f32(reshape(-h)) with bf16 h is computed from the stored bf16 -h by the one kernel of its
  // two readers, not stored in f32. Another reader of v: exp(x) is computed once, by the tanh's loop, not
  // again for a convert of its own.
  {
    ModuleBuilder b;
    const int64_t h = b.Parameter(0, proto::BF16, {4, 6});
    const int64_t wide = b.Convert(b.Reshape(b.Unary(Opcode::kNegate, h), {6, 4}), proto::F32);
    b.Output(b.Unary(Opcode::kTanh, wide));
    b.Output(b.Reduce(Combiner::kSum, wide, {0}));
    const proto::Executable exe = CompileToProto(b.module(), kFused);
    EXPECT_EQ(KernelsComputing(exe, Opcode::kConvert), 1) << KernelSummary(exe);
    std::vector<uint16_t> h_bits;
    for (int i = 0; i < 24; ++i) h_bits.push_back(FloatToBf16(static_cast<float>(i % 7) * 0.37f - 1.1f));
    const std::vector<HostArray> args = {MakeArray<uint16_t>(PrimitiveType::kBF16, {4, 6}, h_bits)};
    const std::vector<HostArray> fused = Run(b.module(), kFused, args), unfused = Run(b.module(), kUnfused, args);
    for (size_t r = 0; r < fused.size(); ++r) EXPECT_EQ(fused[r].bytes, unfused[r].bytes) << "result " << r;
  }
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {4, 6});
  const int64_t v = b.Unary(Opcode::kExp, x);
  b.Output(b.Unary(Opcode::kTanh, v));
  b.Output(b.Unary(Opcode::kNegate, b.Convert(b.Reshape(v, {6, 4}), proto::BF16)));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  EXPECT_EQ(exe.kernels_size(), 2) << KernelSummary(exe);
  EXPECT_EQ(KernelsComputing(exe, Opcode::kExp), 1) << KernelSummary(exe);
  ExpectFusedBitsAreUnfusedBits(b.module(), {4, 6}, 1);
}

TEST_F(FusionTest, AConvertOfAValueWithForwardedReadersKeepsThem) {
  // transpose(transpose(r)) is r itself: its readers (a result, and a convert) read r, which must not
  // count as read by the convert alone (it would be rewritten into the convert in place).
  ModuleBuilder b;
  const int64_t r = b.Reshape(b.Unary(Opcode::kExp, b.Parameter(0, proto::F32, {2, 3})), {3, 2});
  const int64_t same = b.Transpose(b.Transpose(r, {1, 0}), {1, 0});
  b.Output(same);
  b.Output(b.Convert(same, proto::BF16));
  const std::vector<HostArray> results = Run(b.module(), kFused, {F32({2, 3}, {0, 1, -1, 2, -2, 0.5})});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].shape, (ArrayShape{PrimitiveType::kF32, {3, 2}}));
  EXPECT_EQ(results[1].shape, (ArrayShape{PrimitiveType::kBF16, {3, 2}}));
  const std::vector<float> values = results[0].values<float>();
  const std::vector<uint16_t> rounded = results[1].values<uint16_t>();
  for (size_t i = 0; i < values.size() && i < rounded.size(); ++i) EXPECT_EQ(rounded[i], FloatToBf16(values[i]));
}

TEST_F(FusionTest, ArithmeticReadingTwoFullArraysIsStillComputedOnce) {
  // Recomputing x + y (or x + a broadcast as large as x) in each reader would load two arrays where the
  // stored sum is one: it is computed once, by its first reader, and stored for the reduction.
  for (bool broadcast : {false, true}) {
    SCOPED_TRACE(broadcast ? "x + broadcast(y)" : "x + y");
    const Dims d = broadcast ? Dims{6, 40, 1} : Dims{6, 40};
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, d);
    const int64_t y =
        broadcast ? b.Broadcast(b.Parameter(1, proto::F32, {6, 40}), d, {0, 1}) : b.Parameter(1, proto::F32, d);
    const int64_t v = b.Add(x, y);
    b.Output(b.Unary(Opcode::kTanh, v));
    b.Output(b.Reduce(Combiner::kSum, b.Mul(v, v), {1}));
    const proto::Executable exe = CompileToProto(b.module(), kFused);
    EXPECT_EQ(KernelsComputing(exe, Opcode::kAdd), 1) << KernelSummary(exe);
    EXPECT_EQ(exe.kernels(0).extra_outputs_size(), 1) << KernelSummary(exe);
  }
}

TEST_F(FusionTest, OptimizerUpdateIsOneMultiOutputKernel) {
  // An AdamW-like update: the new moment m' is a result and is read again by the new weight p'. One
  // loop kernel computes both and writes m' as an extra output; nothing reads m' back from memory.
  ModuleBuilder b;
  const Dims d = {7, 33};
  const int64_t p = b.Parameter(0, proto::F32, d), g = b.Parameter(1, proto::F32, d), m = b.Parameter(2, proto::F32, d);
  const int64_t c = b.Constant(0.9, proto::F32, d), lr = b.Constant(0.01, proto::F32, d);
  const int64_t m2 = b.Add(b.Mul(m, c), b.Mul(g, lr));
  const int64_t p2 = b.Binary(Opcode::kSubtract, p, b.Mul(b.Unary(Opcode::kSqrt, b.Unary(Opcode::kAbs, m2)), lr));
  b.Output(p2);
  b.Output(m2);
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  ASSERT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
  const proto::Kernel& k = exe.kernels(0);
  EXPECT_EQ(k.kind(), proto::Kernel::LOOP);
  ASSERT_EQ(k.extra_outputs_size(), 1);
  EXPECT_EQ(k.extra_outputs(0), exe.outputs(1));
  EXPECT_EQ(k.output(), exe.outputs(0));
  for (int64_t in : k.inputs()) EXPECT_NE(in, k.extra_outputs(0)) << "m' is read back";
  // The same bits as computing each value in a kernel of its own.
  std::mt19937_64 rng(11);
  std::vector<HostArray> args;
  for (int i = 0; i < 3; ++i) args.push_back(F32(d, testing::RandomFloats(rng, testing::NumElements(d), -1, 1)));
  const std::vector<HostArray> fused = Run(b.module(), kFused, args), unfused = Run(b.module(), kUnfused, args);
  for (size_t r = 0; r < 2; ++r) {
    for (int64_t i = 0; i < fused[r].numel(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(fused[r].at<float>(i)), std::bit_cast<uint32_t>(unfused[r].at<float>(i)))
          << "result " << r << " at " << i;
    }
  }
}

TEST_F(FusionTest, ValueReadTwiceByOneKernelIsNeitherStoredNorRecomputed) {
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {9});
  const int64_t e = b.Unary(Opcode::kExp, x);
  b.Output(b.Add(b.Unary(Opcode::kTanh, e), b.Unary(Opcode::kNegate, e)));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  ASSERT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
  EXPECT_EQ(exe.kernels(0).extra_outputs_size(), 0);
  int exps = 0;
  for (const proto::Step& step : exe.kernels(0).program())
    exps += !step.load() && step.opcode() == static_cast<int32_t>(Opcode::kExp);
  EXPECT_EQ(exps, 1);
}

// A value the same at every point, that the stored result reads a block at a time, is held as a block: of
// the space's points where it has fewer than a block. A block's 8 KiB for each of the GPT's 49 gradient-norm
// terms (a scalar sum) spread one kernel's scratch over 97 pages, which cost it 0.4-1.4 ms a step.
TEST_F(FusionTest, RegistersHoldNoMorePointsThanTheSpaceHas) {
  for (const Dims& space : {Dims{}, Dims{1}, Dims{128}, Dims{FusedProgram::kBlock + 3}}) {
    SCOPED_TRACE(::testing::PrintToString(space));
    constexpr int kTerms = 20;
    ModuleBuilder b;
    int64_t sum = -1;
    for (int i = 0; i < kTerms; ++i) {
      const int64_t term = b.Broadcast(b.Parameter(i, proto::F32, {}), space, {});
      sum = sum < 0 ? term : b.Add(sum, term);
    }
    b.Output(sum);
    const proto::Executable exe = CompileToProto(b.module(), kFused);
    ASSERT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
    std::vector<ArrayShape> inputs;
    for (int64_t in : exe.kernels(0).inputs()) inputs.push_back(FromProto(exe.slots(static_cast<int>(in)).shape()));
    const absl::StatusOr<FusedProgram> program = FusedProgram::Build(
        exe.kernels(0).program(), inputs, FromProto(exe.slots(static_cast<int>(exe.kernels(0).output())).shape()), {},
        FusedProgram::Stored::kAllResults);
    ASSERT_TRUE(program.ok()) << program.status();
    // Each step's value pointer, and at most a register of the space's points (8 bytes each, whole lines).
    const int64_t points = std::min<int64_t>(std::max<int64_t>(testing::NumElements(space), 1), FusedProgram::kBlock);
    const int64_t register_bytes = (points * 8 + 63) / 64 * 64;
    EXPECT_LE(program->scratch_bytes(), static_cast<size_t>(exe.kernels(0).program_size() * (8 + register_bytes) + 64));
    ExpectFusedBitsAreUnfusedBits(b.module(), Dims{}, kTerms);
  }
}

TEST_F(FusionTest, LoopAndAReductionOfItsSpaceReadingOneValueAreOnePass) {
  // e is read by a loop (tanh) and by a reduction over rows or over columns, the loop first or the
  // reduction first (the loop then reads nothing written after it): the reduction computes e, and the
  // loop's result beside its sums, in one pass; e is stored nowhere.
  struct Case {
    const char* name;
    int64_t dim;
    bool loop_first;
  };
  for (const Case& c : {Case{"rows, loop first", 1, true}, Case{"columns, loop first", 0, true},
                        Case{"rows, reduction first", 1, false}}) {
    SCOPED_TRACE(c.name);
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, {40, 60});
    const int64_t e = b.Unary(Opcode::kExp, x);
    if (c.loop_first) b.Output(b.Unary(Opcode::kTanh, e));
    b.Output(b.Reduce(Combiner::kSum, e, {c.dim}));
    if (!c.loop_first) b.Output(b.Unary(Opcode::kTanh, e));
    const proto::Executable exe = CompileToProto(b.module(), kFused);
    ASSERT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
    EXPECT_EQ(exe.kernels(0).kind(), proto::Kernel::REDUCE);
    EXPECT_EQ(exe.kernels(0).extra_outputs_size(), 1) << KernelSummary(exe);
    EXPECT_EQ(KernelsComputing(exe, Opcode::kExp), 1) << KernelSummary(exe);
    EXPECT_EQ(exe.arena_bytes(), 0);
    ExpectFusedBitsAreUnfusedBits(b.module(), {40, 60}, 1);
  }
}

TEST_F(FusionTest, LoopAndReductionReadingOneStoredArrayAreOnePass) {
  // The bf16 GPT's qkv bias gradient: the heads' gradients, concatenated and reshaped (a stored array),
  // are summed over the rows and rounded to bf16 for the products: one kernel reads them once.
  ModuleBuilder b;
  const Dims d = {64, 12};
  const int64_t g = b.Reshape(b.Dot(b.Parameter(0, proto::F32, {32, 16}), b.Parameter(1, proto::F32, {16, 24})), d);
  b.Output(b.Convert(g, proto::BF16));
  b.Output(b.Reduce(Combiner::kSum, g, {0}));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  ASSERT_EQ(exe.kernels_size(), 2) << KernelSummary(exe);
  EXPECT_EQ(exe.kernels(1).kind(), proto::Kernel::REDUCE);
  EXPECT_EQ(exe.kernels(1).extra_outputs_size(), 1) << KernelSummary(exe);
  ExpectFusedBitsAreUnfusedBits(b.module(), {{32, 16}, {16, 24}});
}

TEST_F(FusionTest, ReductionOverMiddleDimsLeavesTheLoopAlone) {
  // A reduction over neither rows nor columns walks its space on one thread: the loop keeps its own
  // kernel (in parallel) and stores e for it.
  ModuleBuilder b;
  const Dims d = {4, 6, 5};
  const int64_t x = b.Parameter(0, proto::F32, d);
  const int64_t e = b.Unary(Opcode::kExp, x);
  b.Output(b.Unary(Opcode::kTanh, e));
  b.Output(b.Reduce(Combiner::kSum, e, {1}));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  ASSERT_EQ(exe.kernels_size(), 2) << KernelSummary(exe);
  EXPECT_EQ(exe.kernels(0).kind(), proto::Kernel::LOOP);
  EXPECT_EQ(exe.kernels(0).extra_outputs_size(), 1) << KernelSummary(exe);
  ExpectFusedBitsAreUnfusedBits(b.module(), d, 1);
}

TEST_F(FusionTest, BiasGradientSumsAndRoundsDyInOnePass) {
  // The bf16 GPT's bias gradient: g = f32(dy) * f32(h) is summed over the rows and rounded to bf16 for
  // a product. One REDUCE kernel computes g, its column sums and bf16(g), before the product, whichever
  // of the sums and the product comes first in the module; g is written nowhere (it cost a store and a
  // load of 4 bytes an element).
  const Dims d = {64, 48};
  std::mt19937_64 rng(3);
  auto bf16_array = [&](const Dims& dims) {
    std::vector<uint16_t> bits;
    for (float v : testing::RandomFloats(rng, testing::NumElements(dims), -2, 2)) bits.push_back(FloatToBf16(v));
    return MakeArray<uint16_t>(PrimitiveType::kBF16, dims, bits);
  };
  const std::vector<HostArray> args = {bf16_array(d), bf16_array(d), bf16_array({48, 64})};
  for (bool product_first : {false, true}) {
    SCOPED_TRACE(product_first ? "the product first" : "the sums first");
    ModuleBuilder b;
    const int64_t dy = b.Parameter(0, proto::BF16, d), h = b.Parameter(1, proto::BF16, d),
                  w = b.Parameter(2, proto::BF16, {48, 64});
    const int64_t g = b.Mul(b.Convert(dy, proto::F32), b.Unary(Opcode::kTanh, b.Convert(h, proto::F32)));
    const int64_t product = product_first ? b.Dot(b.Convert(g, proto::BF16), w) : -1;
    b.Output(b.Reduce(Combiner::kSum, g, {0}));
    b.Output(product_first ? product : b.Dot(b.Convert(g, proto::BF16), w));
    const proto::Executable exe = CompileToProto(b.module(), kFused);
    ASSERT_EQ(exe.kernels_size(), 2) << KernelSummary(exe);
    EXPECT_EQ(exe.kernels(0).kind(), proto::Kernel::REDUCE);
    EXPECT_EQ(exe.kernels(0).extra_outputs_size(), 1) << KernelSummary(exe);
    EXPECT_EQ(KernelsComputing(exe, Opcode::kTanh), 1) << KernelSummary(exe);
    EXPECT_GE(exe.arena_bytes(), 64 * 48 * 2);
    EXPECT_LT(exe.arena_bytes(), 64 * 48 * 4) << "bf16(g) is stored, g is not";
    const std::vector<HostArray> fused = Run(b.module(), kFused, args), unfused = Run(b.module(), kUnfused, args);
    for (size_t r = 0; r < fused.size(); ++r) EXPECT_EQ(fused[r].bytes, unfused[r].bytes) << "result " << r;
  }
}

TEST_F(FusionTest, AValueBothStoredAndSummedIsSummedAsStored) {
  // A gradient stored and summed by one REDUCE kernel, its value both the reduction's and an extra result.
  // In bf16 the sums add the rounded values (the stored ones: the unfused bits), though the store rounds
  // too; in f32 the value is computed straight into its array, from where the sums read it. Columns and
  // rows, across blocks and ending mid-block.
  const Dims d = {5, FusedProgram::kBlock + 301};
  std::mt19937_64 rng(4);
  const auto arr = [&] {
    return MakeArray<float>(PrimitiveType::kF32, d, testing::RandomFloats(rng, testing::NumElements(d), -2, 2));
  };
  const std::vector<HostArray> args = {arr(), arr()};
  for (const proto::ElementType type : {proto::BF16, proto::F32}) {
    for (const int64_t dim : {0, 1}) {
      SCOPED_TRACE(absl::StrCat(type == proto::BF16 ? "bf16" : "f32", " sums over dim ", dim));
      ModuleBuilder b;
      const int64_t x = b.Parameter(0, proto::F32, d), y = b.Parameter(1, proto::F32, d);
      const int64_t g = b.Mul(b.Convert(x, type), b.Unary(Opcode::kTanh, b.Convert(y, type)));
      b.Output(b.Reduce(Combiner::kSum, g, {dim}));
      b.Output(g);
      const proto::Executable exe = CompileToProto(b.module(), kFused);
      ASSERT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
      EXPECT_EQ(exe.kernels(0).kind(), proto::Kernel::REDUCE);
      ASSERT_EQ(exe.kernels(0).extra_roots_size(), 1) << KernelSummary(exe);
      EXPECT_EQ(exe.kernels(0).extra_roots(0), exe.kernels(0).program_size() - 1) << "g is the sums' value too";
      const std::vector<HostArray> fused = Run(b.module(), kFused, args), unfused = Run(b.module(), kUnfused, args);
      for (size_t r = 0; r < fused.size(); ++r) EXPECT_EQ(fused[r].bytes, unfused[r].bytes) << "result " << r;
    }
  }
}

TEST_F(FusionTest, SiblingFusionsKeepEveryReadAfterItsWrite) {
  // Modules where sibling fusion once put a kernel before one whose result it reads (found in review):
  // each compiles (TearDown: without undoing any sibling fusion) to the unfused bits.
  struct Case {
    const char* name;
    std::function<void(ModuleBuilder&, int64_t x0, int64_t x1, int64_t w)> build;
  };
  const Case cases[] = {
      {"a reduction moving earlier brings what it took in: the loop v1 + X (at its own place) reads the "
       "product X, which reads l2, the place it would move to",
       [](ModuleBuilder& b, int64_t x0, int64_t x1, int64_t w) {
         const int64_t v1 = b.Unary(Opcode::kExp, x0), v2 = b.Unary(Opcode::kExp, x1);
         const int64_t product = b.Dot(b.Unary(Opcode::kTanh, v2), w);
         b.Output(b.Add(v1, product));
         b.Output(b.Reduce(Combiner::kSum, b.Add(v1, v2), {1}));
       }},
      {"a reduction does not read a stored reshape of its own result: the sum s and the loop x + rs with "
       "rs = reshape(s) are not one kernel",
       [](ModuleBuilder& b, int64_t x0, int64_t, int64_t) {
         const int64_t x = b.Reshape(x0, {64, 1});
         const int64_t rs = b.Reshape(b.Reduce(Combiner::kSum, x, {1}), {64, 1});
         b.Output(rs);
         b.Output(b.Add(x, rs));
       }},
      {"kernels compare where their readers run now: the sum of v2 + k moves to l2's place and reads k "
       "there, so k's loop may not move into the later sum of v3",
       [](ModuleBuilder& b, int64_t x0, int64_t x1, int64_t w) {
         const int64_t v2 = b.Unary(Opcode::kExp, x0), v3 = b.Unary(Opcode::kExp, x1);
         const int64_t k = b.Unary(Opcode::kTanh, v3);
         b.Output(k);
         b.Output(b.Dot(b.Unary(Opcode::kTanh, v2), w));
         b.Output(b.Reduce(Combiner::kSum, v3, {1}));
         b.Output(b.Reduce(Combiner::kSum, b.Add(v2, k), {1}));
       }},
  };
  const Dims d = {8, 8};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ModuleBuilder b;
    c.build(b, b.Parameter(0, proto::F32, d), b.Parameter(1, proto::F32, d), b.Parameter(2, proto::F32, d));
    ExpectFusedBitsAreUnfusedBits(b.module(), d, 3);
  }
}

TEST_F(FusionTest, AReshapesReadersRunWhereTheyMoved) {
  // R (the sum of y + rsh) moves to l1's place, before R2, and loads wl through the stored reshape
  // rsh: wl's loop may then not move into R2 (its reading point, rsh, is read where R runs now).
  ModuleBuilder b;
  const int64_t x0 = b.Parameter(0, proto::F32, {8, 8}), y0 = b.Parameter(1, proto::F32, {4, 16}),
                w = b.Parameter(2, proto::F32, {16, 16});
  const int64_t y = b.Unary(Opcode::kExp, y0);
  const int64_t x = b.Unary(Opcode::kExp, x0);
  const int64_t wl = b.Mul(x, x0);
  const int64_t l1 = b.Unary(Opcode::kTanh, y);
  b.Output(b.Dot(l1, w));
  b.Output(b.Reduce(Combiner::kSum, x, {1}));
  const int64_t rsh = b.Reshape(wl, {4, 16});
  b.Output(b.Reduce(Combiner::kSum, b.Add(y, rsh), {1}));
  ExpectFusedBitsAreUnfusedBits(b.module(), {{8, 8}, {4, 16}, {16, 16}});
}

TEST_F(FusionTest, ReductionsStoreLoopResultsOnEveryPath) {
  // Extras of a reduction over columns in several chunks ([512, 256]: 8 chunks on the pool), over long
  // rows (3000, longer than a block), over rows in parallel (autotuned grain), of bf16 and pred values,
  // and beside a value the same at every point: bit for bit the unfused results.
  struct Case {
    const char* name;
    Dims dims;
    std::vector<int64_t> reduced;
    proto::ElementType extra_type;
  };
  const Case cases[] = {{"columns in chunks", {512, 256}, {0}, proto::F32},
                        {"long rows", {4, 3000}, {1}, proto::BF16},
                        {"rows in parallel", {256, 256}, {1}, proto::PRED},
                        {"a suffix of dims", {8, 16, 300}, {1, 2}, proto::F32}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, c.dims);
    const int64_t e = b.Unary(Opcode::kExp, x);
    const int64_t extra = c.extra_type == proto::PRED ? b.Compare(CompareDirection::kGt, e, b.Unary(Opcode::kTanh, e))
                                                      : b.Convert(b.Unary(Opcode::kTanh, e), c.extra_type);
    b.Output(extra);
    b.Output(b.Reduce(Combiner::kSum, e, c.reduced));
    const proto::Executable exe = CompileToProto(b.module(), kFused);
    ASSERT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
    EXPECT_EQ(exe.kernels(0).extra_outputs_size(), 1) << KernelSummary(exe);
    for (const CompileOptions& options : {kFused, CompileOptions{.fusion = true, .autotune = true}}) {
      ExpectFusedBitsAreUnfusedBits(b.module(), {c.dims}, options);
    }
  }
  // A uniform value: exp of a broadcast scalar, summed over rows beside its tanh.
  ModuleBuilder b;
  const Dims d = {64, 40};
  const int64_t e = b.Unary(Opcode::kExp, b.Broadcast(b.Parameter(0, proto::F32, {}), d, {}));
  b.Output(b.Unary(Opcode::kTanh, e));
  b.Output(b.Reduce(Combiner::kSum, e, {1}));
  ExpectFusedBitsAreUnfusedBits(b.module(), {Dims{}});
}

TEST_F(FusionTest, RandomGraphsOfLoopsReductionsAndProductsKeepTheirBits) {
  // Random graphs over [8, 8] values: elementwise ops, products, and sums over rows or columns
  // broadcast back, several results. Whatever fusion merges, absorbs or moves, each compiles (every
  // kernel reads what an earlier one wrote) and computes the unfused bits.
  const Dims d = {8, 8};
  std::mt19937_64 rng(11);
  for (int graph = 0; graph < 1000; ++graph) {
    SCOPED_TRACE(absl::StrCat("graph ", graph));
    ModuleBuilder b;
    std::vector<int64_t> values = {b.Parameter(0, proto::F32, d), b.Parameter(1, proto::F32, d)};
    // Half the time one of the newest values: long chains and values read by several kernels.
    const auto pick = [&] {
      const size_t newest =
          std::bernoulli_distribution(0.5)(rng) ? std::min<size_t>(3, values.size() - 1) : values.size() - 1;
      return values[values.size() - 1 - std::uniform_int_distribution<size_t>(0, newest)(rng)];
    };
    const int ops = std::uniform_int_distribution<int>(4, 14)(rng);
    for (int op = 0; op < ops; ++op) {
      switch (std::uniform_int_distribution<int>(0, 5)(rng)) {
        case 0: values.push_back(b.Unary(Opcode::kTanh, pick())); break;
        case 1: values.push_back(b.Unary(Opcode::kExp, b.Unary(Opcode::kTanh, pick()))); break;
        case 2: values.push_back(b.Add(pick(), pick())); break;
        case 3: values.push_back(b.Mul(pick(), pick())); break;
        case 4: values.push_back(b.Dot(pick(), pick())); break;
        default: {
          const int64_t dim = std::uniform_int_distribution<int64_t>(0, 1)(rng);
          values.push_back(b.Broadcast(b.Reduce(Combiner::kSum, pick(), {dim}), d, {1 - dim}));
        }
      }
    }
    for (size_t v = 2; v < values.size(); ++v) {
      if (v + 1 == values.size() || std::bernoulli_distribution(0.3)(rng)) b.Output(values[v]);
    }
    ExpectFusedBitsAreUnfusedBits(b.module(), d, 2);
  }
}

TEST_F(FusionTest, ValueReadThroughAViewKeepsItsOwnKernel) {
  // The first loop reads e both as it is and transposed: computing e there would compute it at two
  // points of the loop, so e is a kernel of its own.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {5, 5});
  const int64_t e = b.Unary(Opcode::kExp, x);
  b.Output(b.Add(e, b.Transpose(e, {1, 0})));
  b.Output(b.Unary(Opcode::kTanh, e));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  EXPECT_EQ(exe.kernels_size(), 3) << KernelSummary(exe);
  const proto::Kernel* exp = KernelComputing(exe, Opcode::kExp);
  ASSERT_NE(exp, nullptr) << KernelSummary(exe);
  EXPECT_EQ(exp->extra_outputs_size(), 0) << KernelSummary(exe);
  ExpectFusedBitsAreUnfusedBits(b.module(), {5, 5}, 1);
}

TEST_F(FusionTest, KernelStoringAValueStaysBeforeItsLaterReaders) {
  // The loop computing a = tanh(e) also stores e for the reduction s. Moving that loop into z, the
  // only reader of a, would store e after s has read it: so it does not. It moves into s instead
  // (which computes e itself, and a beside its sums), still before z.
  ModuleBuilder b;
  const Dims d = {4, 6};
  const int64_t x = b.Parameter(0, proto::F32, d);
  const int64_t e = b.Unary(Opcode::kExp, x);
  const int64_t a = b.Unary(Opcode::kTanh, e);
  const int64_t s = b.Reduce(Combiner::kSum, e, {1});
  b.Output(b.Add(b.Mul(a, a), b.Broadcast(s, d, {0})));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  ASSERT_EQ(exe.kernels_size(), 2) << KernelSummary(exe);
  const proto::Kernel* first = KernelComputing(exe, Opcode::kExp);
  ASSERT_EQ(first, &exe.kernels(0)) << KernelSummary(exe);
  EXPECT_EQ(first->kind(), proto::Kernel::REDUCE);
  EXPECT_EQ(first->extra_outputs_size(), 1);
  ExpectFusedBitsAreUnfusedBits(b.module(), d, 1);
}

TEST_F(FusionTest, LoopAndReductionApartStayApart) {
  // a = tanh(e) is read by a product f before the reduction of e * f: the loop cannot wait for the
  // reduction (f reads a first), nor the reduction run at the loop (it reads f). The loop stays, and
  // stores e for the reduction.
  ModuleBuilder b;
  const Dims d = {6, 6};
  const int64_t x = b.Parameter(0, proto::F32, d), w = b.Parameter(1, proto::F32, d);
  const int64_t e = b.Unary(Opcode::kExp, x);
  const int64_t f = b.Dot(b.Unary(Opcode::kTanh, e), w);
  b.Output(b.Reduce(Combiner::kSum, b.Mul(e, f), {1}));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  ASSERT_EQ(exe.kernels_size(), 3) << KernelSummary(exe);
  EXPECT_EQ(exe.kernels(0).kind(), proto::Kernel::LOOP);
  EXPECT_EQ(exe.kernels(0).extra_outputs_size(), 1) << KernelSummary(exe);
  EXPECT_EQ(KernelsComputing(exe, Opcode::kExp), 1) << KernelSummary(exe);
  ExpectFusedBitsAreUnfusedBits(b.module(), d, 2);
}

TEST_F(FusionTest, ValueWhoseLaterReaderJoinsItsKernelIsNotStored) {
  // g is computed by q's loop and would be stored for r; q then moves into r, so r computes g, q and
  // itself: g is stored nowhere, q (a result) as r's extra output.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {6});
  const int64_t g = b.Unary(Opcode::kExp, x);
  const int64_t q = b.Unary(Opcode::kTanh, g);
  b.Output(q);
  b.Output(b.Add(q, g));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  ASSERT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
  ASSERT_EQ(exe.kernels(0).extra_outputs_size(), 1) << KernelSummary(exe);
  EXPECT_EQ(exe.kernels(0).extra_outputs(0), exe.outputs(0));
  ExpectFusedBitsAreUnfusedBits(b.module(), {6}, 1);
}

TEST_F(FusionTest, KernelMovesWithTheValuesItStoresForItself) {
  // v is computed in j's loop and stored for k; j moves into k, and k into the final product: every
  // read of v moves along, so one loop computes everything and stores nothing but the result.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {6});
  const int64_t v = b.Unary(Opcode::kExp, x);
  const int64_t j = b.Unary(Opcode::kTanh, v);
  const int64_t k = b.Add(b.Mul(j, j), v);
  b.Output(b.Mul(k, k));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  ASSERT_EQ(exe.kernels_size(), 1) << KernelSummary(exe);
  EXPECT_EQ(exe.kernels(0).extra_outputs_size(), 0) << KernelSummary(exe);
  EXPECT_EQ(exe.arena_bytes(), 0);
  ExpectFusedBitsAreUnfusedBits(b.module(), {6}, 1);
}

TEST_F(FusionTest, LongChainsAreCutAtTheStepLimit) {
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {7});
  int64_t v = x;
  for (int i = 0; i < 100; ++i) v = b.Unary(i % 2 ? Opcode::kTanh : Opcode::kNegate, v);
  b.Output(v);
  for (int64_t limit : {10, 48}) {
    const proto::Executable exe =
        CompileToProto(b.module(), {.fusion = true, .autotune = false, .max_fusion_steps = limit});
    EXPECT_GE(exe.kernels_size(), 100 / limit) << limit;
    EXPECT_LE(exe.kernels_size(), 100 / limit + 2) << limit;
    for (const proto::Kernel& k : exe.kernels()) {
      int computed = 0;
      for (const proto::Step& s : k.program()) computed += !s.load();
      EXPECT_LE(computed, limit) << k.label();
    }
  }
}

TEST_F(FusionTest, ACutAtAUnitDimReshapeStoresTheValueItAliases) {
  // add(reshape(tanh(x)), a chain of 9 on y) is 12 steps: the cut at 10 stores both operands. A stored
  // reshape is an alias of its operand's slot, so tanh(x) must be stored too (it was left without a slot,
  // and the alias pointed at none).
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {7, 1}), y = b.Parameter(1, proto::F32, {7});
  int64_t w = y;
  for (int i = 0; i < 9; ++i) w = b.Unary(i % 2 ? Opcode::kTanh : Opcode::kNegate, w);
  b.Output(b.Add(b.Reshape(b.Unary(Opcode::kTanh, x), {7}), w));
  const CompileOptions cut{.fusion = true, .autotune = false, .max_fusion_steps = 10};
  const proto::Executable exe = CompileToProto(b.module(), cut);
  for (const proto::Slot& slot : exe.slots()) {
    if (slot.kind() == proto::Slot::ALIAS) {
      EXPECT_GE(slot.index(), 0) << KernelSummary(exe);
    }
  }
  ExpectFusedBitsAreUnfusedBits(b.module(), {{7, 1}, {7}}, cut);
}

TEST_F(FusionTest, ReduceInputFusionPutsExpIntoTheReduceKernel) {
  // logsumexp: log(sum(exp(x - max))) + max. The whole exp(x - broadcast(max)) has one reader, the
  // sum, so the REDUCE kernel computes it from x and max; nothing is materialized in between.
  const Dims d = {8, 10};
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, d);
  const int64_t mx = b.Reduce(Combiner::kMax, x, {1});
  const int64_t e = b.Unary(Opcode::kExp, b.Binary(Opcode::kSubtract, x, b.Broadcast(mx, d, {0})));
  b.Output(b.Add(b.Unary(Opcode::kLog, b.Reduce(Combiner::kSum, e, {1})), mx));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  ASSERT_EQ(exe.kernels_size(), 3) << KernelSummary(exe);  // max, sum(exp(x - max)), log(.) + max
  const proto::Kernel& sum = exe.kernels(1);
  EXPECT_EQ(sum.kind(), proto::Kernel::REDUCE) << KernelSummary(exe);
  EXPECT_EQ(sum.combiner(), static_cast<int32_t>(Combiner::kSum));
  EXPECT_TRUE(Computes(sum, Opcode::kExp)) << KernelSummary(exe);
  EXPECT_TRUE(Computes(sum, Opcode::kSubtract)) << KernelSummary(exe);
  EXPECT_EQ(KernelsComputing(exe, Opcode::kExp), 1);
  // Unfused, the same work takes a kernel per instruction.
  EXPECT_EQ(CompileToProto(b.module(), kUnfused).kernels_size(), 7);
  std::vector<float> v(80);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 10) * 0.5f;
  const std::vector<HostArray> out = Run(b.module(), kFused, {F32(d, v)});
  double want = 0;
  for (int c = 0; c < 10; ++c) want += std::exp(c * 0.5 - 4.5);
  EXPECT_THAT(out[0].values<float>(),
              ::testing::Each(::testing::FloatNear(static_cast<float>(std::log(want) + 4.5), 1e-5f)));
}

TEST_F(FusionTest, LogSoftmaxFusesExpIntoTheReduceKernel) {
  // x - max - log(sum(exp(x - max))): x - max has two readers and is materialized; exp, read only by
  // the sum, is computed inside the REDUCE kernel.
  const Dims d = {8, 10};
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, d);
  const int64_t shifted = b.Binary(Opcode::kSubtract, x, b.Broadcast(b.Reduce(Combiner::kMax, x, {1}), d, {0}));
  const int64_t sum = b.Reduce(Combiner::kSum, b.Unary(Opcode::kExp, shifted), {1});
  b.Output(b.Binary(Opcode::kSubtract, shifted, b.Broadcast(b.Unary(Opcode::kLog, sum), d, {0})));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  int reduce_with_exp = 0;
  for (const proto::Kernel& k : exe.kernels()) {
    if (k.kind() == proto::Kernel::REDUCE && k.combiner() == static_cast<int32_t>(Combiner::kSum))
      reduce_with_exp += Computes(k, Opcode::kExp);
  }
  EXPECT_EQ(reduce_with_exp, 1) << KernelSummary(exe);
  EXPECT_EQ(KernelsComputing(exe, Opcode::kExp), 1) << KernelSummary(exe);
}

TEST_F(FusionTest, AFunctionRepeatedByItsBroadcastsIsComputedOnceAtItsOwnShape) {
  // x - broadcast(log(sum(exp(x)))): the log, fused into the subtraction, would be taken at every point of
  // x's rows. Computed once per row where that saves many evaluations; left fused where it saves few, and for a
  // scalar (its reader's program computes that once per run). The same bits either way.
  // log_first: broadcast(log(sum)); else log(broadcast(sum)), as the lowering of log_softmax writes it, which
  // SimplifyAlgebra turns into the first.
  for (const Dims& d : {Dims{512, 114}, Dims{8, 10}, Dims{64, 1024}}) {
    for (bool rows : {true, false}) {
      for (bool log_first : {true, false}) {
        ModuleBuilder b;
        const int64_t x = b.Parameter(0, proto::F32, d);
        const int64_t sum = b.Reduce(Combiner::kSum, b.Unary(Opcode::kExp, x),
                                     rows ? std::vector<int64_t>{1} : std::vector<int64_t>{0, 1});
        const std::vector<int64_t> kept = rows ? std::vector<int64_t>{0} : std::vector<int64_t>{};
        b.Output(b.Binary(Opcode::kSubtract, x,
                          log_first ? b.Broadcast(b.Unary(Opcode::kLog, sum), d, kept)
                                    : b.Unary(Opcode::kLog, b.Broadcast(sum, d, kept))));
        const proto::Executable exe = CompileToProto(b.module(), kFused);
        const int64_t once = rows ? d[0] : 1, everywhere = d[0] * d[1];
        const bool saves_much = rows && everywhere - once >= (int64_t{1} << 15);
        EXPECT_THAT(PointsComputing(exe, Opcode::kLog), ::testing::ElementsAre(saves_much ? once : everywhere))
            << d[0] << "x" << d[1] << (rows ? " by rows" : " whole") << (log_first ? ", log first\n" : "\n")
            << KernelSummary(exe);
        ExpectFusedBitsAreUnfusedBits(b.module(), d, 1);
      }
    }
  }
}

TEST_F(FusionTest, SoftmaxComputesExpOnce) {
  // softmax: exp(x - max) is read by both the sum and the division, so it is materialized once, by the
  // REDUCE kernel of the sum, rather than computed twice.
  const Dims d = {8, 10};
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, d);
  const int64_t e =
      b.Unary(Opcode::kExp, b.Binary(Opcode::kSubtract, x, b.Broadcast(b.Reduce(Combiner::kMax, x, {1}), d, {0})));
  b.Output(b.Binary(Opcode::kDivide, e, b.Broadcast(b.Reduce(Combiner::kSum, e, {1}), d, {0})));
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  EXPECT_EQ(KernelsComputing(exe, Opcode::kExp), 1) << KernelSummary(exe);
  EXPECT_EQ(CountKernels(exe, proto::Kernel::REDUCE), 2) << KernelSummary(exe);
  EXPECT_EQ(exe.kernels_size(), 3) << KernelSummary(exe);
  ExpectFusedBitsAreUnfusedBits(b.module(), d, 1);
}

TEST_F(FusionTest, ReduceStoresAnOperandThatIsAResult) {
  // sq is a result and the reduction's operand: the reduction computes it once and stores it.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {4, 6});
  const int64_t sq = b.Mul(x, x);
  b.Output(b.Reduce(Combiner::kSum, sq, {1}));
  b.Output(sq);
  const proto::Executable exe = CompileToProto(b.module(), kFused);
  EXPECT_EQ(KernelsComputing(exe, Opcode::kMultiply), 1) << KernelSummary(exe);
  ASSERT_EQ(exe.kernels_size(), 1);
  EXPECT_EQ(exe.kernels(0).extra_outputs_size(), 1);
  ExpectFusedBitsAreUnfusedBits(b.module(), {4, 6}, 1);
}

}  // namespace fusion_test
}  // namespace lazyrt::pjrt
