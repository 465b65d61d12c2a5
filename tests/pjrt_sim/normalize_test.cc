// The normalization opcodes (LAYER_NORM, RMS_NORM and their gradients): verifier rules for malformed
// instructions, the NORMALIZE kernel against a reference loop (one kernel), and the loader's checks of
// the kernel's fields.
#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pjrt_sim/executable.h"
#include "pjrt_sim/kernels/kernels.h"
#include "pjrt_sim/module_verifier.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace normalize_test {

using ::testing::HasSubstr;
using testing::ModuleBuilder;

int64_t Normalize(ModuleBuilder& b, Opcode op, std::vector<int64_t> operands, int64_t axis, double eps) {
  return b.Op(op, std::move(operands), b.type(0), b.dims(0), [&](proto::Instruction& i) {
    i.set_axis(axis);
    i.set_value(eps);
  });
}

std::string VerifyError(const proto::Module& m) { return std::string(VerifyModule(m).message()); }

TEST(NormalizeOpcodes, VerifierAcceptsWellFormedAndRejectsMalformed) {
  for (Opcode op : {Opcode::kLayerNorm, Opcode::kRmsNorm, Opcode::kLayerNormGrad, Opcode::kRmsNormGrad}) {
    SCOPED_TRACE(OpcodeName(op));
    const bool backward = op == Opcode::kLayerNormGrad || op == Opcode::kRmsNormGrad;
    const std::vector<int64_t> operands = backward ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0};
    auto with = [&](const std::function<void(ModuleBuilder&)>& tweak) {
      ModuleBuilder b;
      b.Parameter(0, proto::F32, {2, 3, 4});
      b.Parameter(1, proto::F32, {2, 3, 4});
      tweak(b);
      return b.module();
    };
    EXPECT_TRUE(VerifyModule(with([&](ModuleBuilder& b) { Normalize(b, op, operands, 1, 1e-5); })).ok());
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) { Normalize(b, op, operands, 3, 1e-5); })),
                HasSubstr("axis out of range"));
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) { Normalize(b, op, operands, -1, 1e-5); })),
                HasSubstr("axis out of range"));
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) { Normalize(b, op, operands, 2, -1); })), HasSubstr("epsilon"));
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) {
                  Normalize(b, op, operands, 2, std::numeric_limits<double>::quiet_NaN());
                })),
                HasSubstr("epsilon"));
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) {
                  Normalize(b, op, {0, 1, 0}, 2, 0);
                })),
                HasSubstr("operand(s)"));
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) {
                  b.Op(op, operands, proto::F32, {2, 3, 5}, [](proto::Instruction& i) { i.set_axis(1); });
                })),
                HasSubstr("must be the result's"));
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) {
                  const int64_t i = b.Convert(0, proto::S32);
                  b.Op(op, backward ? std::vector<int64_t>{i, i} : std::vector<int64_t>{i}, proto::S32, {2, 3, 4},
                       [](proto::Instruction& inst) { inst.set_axis(1); });
                })),
                HasSubstr("floating"));
  }
}

TEST(NormalizeOpcodes, KernelMatchesReferenceInOneKernel) {
  auto client = testing::MakeClient();
  ModuleBuilder b;
  const testing::Dims dims = {3, 2, 5};
  const int64_t x = b.Parameter(0, proto::F64, dims);
  const int64_t scaled = b.Mul(x, b.Constant(2, proto::F64, dims));
  b.Output(b.Op(Opcode::kLayerNorm, {scaled}, proto::F64, dims, [](proto::Instruction& i) {
    i.set_axis(1);
    i.set_value(0.25);
  }));
  std::vector<double> in(30);
  for (size_t i = 0; i < in.size(); ++i) in[i] = std::sin(static_cast<double>(i) * 1.7) * 3;
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(b.module(), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  int normalize_kernels = 0;
  for (const proto::Kernel& k : (*exe)->proto().kernels()) {
    if (k.kind() != proto::Kernel::NORMALIZE) continue;
    ++normalize_kernels;
    // What the profile and `lazyrt cache show` print for it: the array it writes, not "scalar".
    EXPECT_EQ(KernelIterationText((*exe)->proto(), k), "3x2x5");
  }
  EXPECT_EQ(normalize_kernels, 1);
  absl::StatusOr<std::vector<testing::HostArray>> out =
      testing::ExecuteOnHost(*client, **exe, {testing::MakeArray(PrimitiveType::kF64, dims, in)});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int64_t row = 0; row < 3; ++row) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < 10; ++i) mean += 2 * in[static_cast<size_t>(row * 10 + i)] / 10;
    for (int64_t i = 0; i < 10; ++i) var += std::pow(2 * in[static_cast<size_t>(row * 10 + i)] - mean, 2) / 10;
    for (int64_t i = 0; i < 10; ++i) {
      const double want = (2 * in[static_cast<size_t>(row * 10 + i)] - mean) / std::sqrt(var + 0.25);
      EXPECT_NEAR((*out)[0].at<double>(row * 10 + i), want, 1e-14);
    }
  }
}

TEST(NormalizeOpcodes, LoaderRejectsBadKernelFields) {
  const ArrayShape shape{PrimitiveType::kF32, {2, 3}};
  const std::vector<ArrayShape> one = {shape}, two = {shape, shape};
  proto::Kernel k;
  k.set_kind(proto::Kernel::NORMALIZE);
  k.set_opcode(static_cast<int32_t>(Opcode::kRmsNorm));
  k.set_axis(1);
  k.set_epsilon(1e-6);
  EXPECT_TRUE(BuildKernel(k, one, shape).ok());
  auto error_of = [&](const proto::Kernel& bad, std::span<const ArrayShape> inputs, const ArrayShape& out) {
    absl::StatusOr<std::unique_ptr<Kernel>> r = BuildKernel(bad, inputs, out);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  proto::Kernel bad = k;
  bad.set_opcode(static_cast<int32_t>(Opcode::kAdd));
  EXPECT_THAT(error_of(bad, one, shape), HasSubstr("bad opcode"));
  bad.set_opcode(12345);
  EXPECT_THAT(error_of(bad, one, shape), HasSubstr("bad opcode"));
  EXPECT_THAT(error_of(k, two, shape), HasSubstr("number of inputs"));
  bad = k;
  bad.set_opcode(static_cast<int32_t>(Opcode::kRmsNormGrad));
  EXPECT_TRUE(BuildKernel(bad, two, shape).ok());
  EXPECT_THAT(error_of(bad, one, shape), HasSubstr("number of inputs"));
  bad = k;
  bad.set_axis(2);
  EXPECT_THAT(error_of(bad, one, shape), HasSubstr("axis"));
  bad = k;
  bad.set_epsilon(std::numeric_limits<double>::infinity());
  EXPECT_THAT(error_of(bad, one, shape), HasSubstr("epsilon"));
  EXPECT_THAT(error_of(k, std::vector<ArrayShape>{{PrimitiveType::kF32, {3, 2}}}, shape), HasSubstr("shape"));
  const ArrayShape ints{PrimitiveType::kS32, {2, 3}};
  EXPECT_THAT(error_of(k, std::vector<ArrayShape>{ints}, ints), HasSubstr("floating"));
}

}  // namespace normalize_test
}  // namespace lazyrt::pjrt
