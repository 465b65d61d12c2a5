// AdamW's fused update loop: recognized in a LOOP kernel's program (kernels/adamw_update.h) and run with
// the interpreter's bits, in place or not; programs that only resemble it are left to the interpreter.
#include "pjrt_sim/kernels/adamw_update.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "tests/pjrt_sim/compiler_test_util.h"

namespace lazyrt::pjrt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Shape {
  bool decay = true;
  bool v_read = false;           // the second moment an input (computed by another kernel), not computed here
  bool reversed_root = false;    // (m s) / denom - p d: not an update
  bool multiplied_root = false;  // ... (m s) * denom: not an update
  // The step size computed from f64 scalars inside the loop, as AdamW's lr / (1 - b1^t) where one
  // parameter's update reads it.
  bool step_size_in_loop = false;
};

// The module of one update over [rows, cols] as AdamW's lowering writes it (lowering/lower.cc): parameters
// p, m, v, g, the f32 scalars step size, sqrt(1 - beta2^t) and decay factor, and the f64 scalars lr and
// 1 - beta1^t (whose quotient is the step size with step_size_in_loop).
proto::Module UpdateModule(const Shape& shape, const Dims& dims) {
  ModuleBuilder b;
  const int64_t p = b.Parameter(0, proto::F32, dims), m = b.Parameter(1, proto::F32, dims);
  const int64_t v = b.Parameter(2, proto::F32, dims), g = b.Parameter(3, proto::F32, dims);
  const auto uniform = [&](int64_t number) { return b.Broadcast(b.Parameter(number, proto::F32, {}), dims, {}); };
  const auto constant = [&](double value) { return b.Constant(value, proto::F32, dims); };
  const int64_t correction = uniform(5), decay = uniform(6);
  const int64_t given_step_size = uniform(4);
  const int64_t lr = b.Parameter(7, proto::F64, {}), one_minus_b1t = b.Parameter(8, proto::F64, {});
  const int64_t step_size =
      shape.step_size_in_loop
          ? b.Broadcast(b.Convert(b.Binary(Opcode::kDivide, lr, one_minus_b1t), proto::F32), dims, {})
          : given_step_size;
  const int64_t decayed = shape.decay ? b.Mul(p, decay) : p;
  const int64_t m1 = b.Add(b.Mul(m, constant(0.9)), b.Mul(g, constant(1 - 0.9)));
  const int64_t v1 = shape.v_read ? v : b.Add(b.Mul(v, constant(0.999)), b.Mul(b.Mul(g, g), constant(1 - 0.999)));
  const int64_t denom = b.Add(b.Binary(Opcode::kDivide, b.Unary(Opcode::kSqrt, v1), correction), constant(1e-8));
  const int64_t step = b.Mul(m1, step_size);
  const int64_t quotient = b.Binary(shape.multiplied_root ? Opcode::kMultiply : Opcode::kDivide, step, denom);
  b.Output(shape.reversed_root ? b.Binary(Opcode::kSubtract, quotient, decayed)
                               : b.Binary(Opcode::kSubtract, decayed, quotient));
  b.Output(m1);
  if (!shape.v_read) b.Output(v1);
  return b.module();
}

// Random arrays with the values that test an update's arithmetic among them: zeros (sqrt(0)), a negative
// second moment (NaN), infinities, subnormals.
std::vector<HostArray> Arguments(const Dims& dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<HostArray> args;
  for (int a = 0; a < 4; ++a) {
    std::vector<float> x = testing::RandomFloats(rng, testing::NumElements(dims), a == 2 ? 0 : -1, 1);
    x[0] = 0;
    x[1] = a == 2 ? -1e-3f : 1e-40f;
    x[2] = a == 3 ? kInf : 0.5f;
    x[3] = -kInf;
    args.push_back(F32(dims, x));
  }
  for (float scalar : {1e-3f / 0.1f, 0.0316f, 1 - 1e-3f * 0.05f}) args.push_back(F32({}, {scalar}));
  for (double scalar : {1e-3, 1 - 0.9 * 0.9}) args.push_back(MakeArray<double>(PrimitiveType::kF64, {}, {scalar}));
  return args;
}

class AdamWUpdateTest : public CompilerTest {
 protected:
  // The update kernel of `exe` (its only LOOP kernel with more than the parameter as results).
  static const proto::Kernel* UpdateKernel(const proto::Executable& exe) {
    for (const proto::Kernel& k : exe.kernels()) {
      if (k.kind() == proto::Kernel::LOOP && k.extra_outputs_size() > 0) return &k;
    }
    return nullptr;
  }
  static ArrayShape SlotShape(const proto::Executable& exe, int64_t slot) {
    return FromProto(exe.slots(static_cast<int>(slot)).shape());
  }
  static std::vector<ArrayShape> InputShapes(const proto::Executable& exe, const proto::Kernel& k) {
    std::vector<ArrayShape> shapes;
    for (int i = 0; i < k.inputs_size(); ++i) shapes.push_back(InputShape(k, i, SlotShape(exe, k.inputs(i))));
    return shapes;
  }
  // The update kernel k of `exe` computes, as the kernel loader matches it.
  static std::optional<AdamWUpdateLoop> Match(const proto::Executable& exe, const proto::Kernel& k) {
    const ArrayShape output = SlotShape(exe, k.output());
    const std::vector<int64_t> extra_roots(k.extra_roots().begin(), k.extra_roots().end());
    absl::StatusOr<FusedProgram> program =
        FusedProgram::Build(k.program(), InputShapes(exe, k), output, extra_roots, FusedProgram::Stored::kAllResults);
    EXPECT_TRUE(program.ok()) << program.status();
    if (!program.ok()) return std::nullopt;
    return MatchAdamWUpdate(*program);
  }
};

TEST_F(AdamWUpdateTest, RecognizedWithAndWithoutDecayWithAMomentReadOrScalarsComputedAndGivesTheInterpretersBits) {
  const Dims dims = {37, 129};  // a chunk boundary and a tail inside a block of points
  for (const Shape shape : {Shape{}, Shape{.decay = false}, Shape{.v_read = true}, Shape{.step_size_in_loop = true}}) {
    SCOPED_TRACE(::testing::Message() << "decay " << shape.decay << ", v read " << shape.v_read
                                      << ", step size in the loop " << shape.step_size_in_loop);
    const proto::Module module = UpdateModule(shape, dims);
    const proto::Executable exe = CompileToProto(module, kFused);
    const proto::Kernel* k = UpdateKernel(exe);
    ASSERT_NE(k, nullptr) << KernelSummary(exe);
    const std::optional<AdamWUpdateLoop> loop = Match(exe, *k);
    ASSERT_TRUE(loop.has_value()) << KernelSummary(exe);
    EXPECT_EQ(loop->decay >= 0, shape.decay);
    EXPECT_GE(loop->m.result, 1);
    EXPECT_EQ(loop->v.result < 0, shape.v_read);
    EXPECT_EQ(loop->v.c >= 0, !shape.v_read) << "g g in the second moment";
    EXPECT_EQ(Computes(*k, Opcode::kConvert), shape.step_size_in_loop) << KernelSummary(exe);
    for (uint64_t seed : {1, 2}) {
      const std::vector<HostArray> args = Arguments(dims, seed);
      const std::vector<HostArray> fused = Run(module, kFused, args), unfused = Run(module, kUnfused, args);
      ASSERT_EQ(fused.size(), unfused.size());
      for (size_t r = 0; r < fused.size(); ++r) EXPECT_EQ(fused[r].bytes, unfused[r].bytes) << "result " << r;
    }
  }
}

TEST_F(AdamWUpdateTest, ProgramsThatOnlyResembleAnUpdateAreLeftToTheInterpreter) {
  const Dims dims = {8, 40};
  for (const Shape shape : {Shape{.reversed_root = true}, Shape{.multiplied_root = true}}) {
    const proto::Module module = UpdateModule(shape, dims);
    const proto::Executable exe = CompileToProto(module, kFused);
    const proto::Kernel* k = UpdateKernel(exe);
    ASSERT_NE(k, nullptr) << KernelSummary(exe);
    EXPECT_FALSE(Match(exe, *k).has_value()) << KernelSummary(exe);
    const std::vector<HostArray> args = Arguments(dims, 3);
    const std::vector<HostArray> fused = Run(module, kFused, args), unfused = Run(module, kUnfused, args);
    for (size_t r = 0; r < fused.size(); ++r) EXPECT_EQ(fused[r].bytes, unfused[r].bytes) << "result " << r;
  }
}

// The update stored over its inputs (p' over p, m' over m, v' over v, as a donated parameter's update is)
// gives what it gives into arrays of its own.
TEST_F(AdamWUpdateTest, UpdatesInPlace) {
  const Dims dims = {3, 1000};
  const proto::Executable exe = CompileToProto(UpdateModule(Shape{}, dims), kFused);
  const proto::Kernel* k = UpdateKernel(exe);
  ASSERT_NE(k, nullptr);
  const std::vector<ArrayShape> input_shapes = InputShapes(exe, *k);
  std::vector<ArrayShape> extra_shapes;
  for (int64_t slot : k->extra_outputs()) extra_shapes.push_back(SlotShape(exe, slot));
  absl::StatusOr<std::unique_ptr<Kernel>> kernel =
      BuildKernel(*k, input_shapes, SlotShape(exe, k->output()), extra_shapes);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  const std::optional<AdamWUpdateLoop> loop = Match(exe, *k);
  ASSERT_TRUE(loop.has_value());
  // The kernel's inputs as their slots hold them: the arrays and scalars the test's arguments give.
  std::mt19937_64 rng(4);
  std::vector<std::vector<float>> held;
  for (const ArrayShape& s : input_shapes) held.push_back(testing::RandomFloats(rng, s.numel(), 0.01f, 1));
  const auto pointers = [](std::vector<std::vector<float>>& arrays) {
    std::vector<const void*> p;
    for (std::vector<float>& a : arrays) p.push_back(a.data());
    return p;
  };
  // Apart: into arrays of their own.
  std::vector<std::vector<float>> inputs = held, apart(3, std::vector<float>(static_cast<size_t>(3 * 1000)));
  std::vector<void*> outs = {apart[0].data(), apart[1].data(), apart[2].data()};
  ASSERT_TRUE((*kernel)->Run(pointers(inputs), outs).ok());
  // In place: each result over the input it updates.
  std::vector<std::vector<float>> in_place = held;
  const int64_t updated[] = {loop->param, loop->m.a, loop->v.a};
  std::vector<void*> over;
  for (int64_t input : updated) over.push_back(in_place[static_cast<size_t>(input)].data());
  // Results 1 and 2 are the moments in the kernel's order of extra roots.
  std::vector<void*> ordered(3);
  ordered[0] = over[0];
  ordered[static_cast<size_t>(loop->m.result)] = over[1];
  ordered[static_cast<size_t>(loop->v.result)] = over[2];
  ASSERT_TRUE((*kernel)->Run(pointers(in_place), ordered).ok());
  EXPECT_EQ(in_place[static_cast<size_t>(loop->param)], apart[0]);
  EXPECT_EQ(in_place[static_cast<size_t>(loop->m.a)], apart[static_cast<size_t>(loop->m.result)]);
  EXPECT_EQ(in_place[static_cast<size_t>(loop->v.a)], apart[static_cast<size_t>(loop->v.result)]);
}

}  // namespace
}  // namespace lazyrt::pjrt
