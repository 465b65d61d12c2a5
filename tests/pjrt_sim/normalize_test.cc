// The normalization opcodes (LAYER_NORM, RMS_NORM and their gradients): verifier rules for malformed
// instructions, the NORMALIZE kernel against a reference loop (one kernel), and the loader's checks of
// the kernel's fields.
#include <bit>
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
                HasSubstr("axis 3 out of range for the result f32[2,3,4]"));
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) { Normalize(b, op, operands, -1, 1e-5); })),
                HasSubstr("axis -1 out of range"));
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) { Normalize(b, op, operands, 2, -1); })), HasSubstr("epsilon"));
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) {
                  Normalize(b, op, operands, 2, std::numeric_limits<double>::quiet_NaN());
                })),
                HasSubstr("epsilon"));
    // Three operands are layer norm's affine form, whose third is a weight or a bias (below).
    const bool layer_norm = op == Opcode::kLayerNorm || op == Opcode::kLayerNormGrad;
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) {
                  Normalize(b, op, {0, 1, 0, 1}, 2, 0);
                })),
                HasSubstr("operand(s)"));
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) {
                  Normalize(b, op, {0, 1, 0}, 2, 0);
                })),
                HasSubstr(layer_norm ? "must be the normalized dims" : "operand(s)"));
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) {
                  b.Op(op, operands, proto::F32, {2, 3, 5}, [](proto::Instruction& i) { i.set_axis(1); });
                })),
                HasSubstr("must be [2,3,4]"));
    EXPECT_THAT(VerifyError(with([&](ModuleBuilder& b) {
                  const int64_t i = b.Convert(0, proto::S32);
                  b.Op(op, backward ? std::vector<int64_t>{i, i} : std::vector<int64_t>{i}, proto::S32, {2, 3, 4},
                       [](proto::Instruction& inst) { inst.set_axis(1); });
                })),
                HasSubstr("floating"));
  }
}

// Layer norm with its affine: LAYER_NORM (x, weight, bias) and LAYER_NORM_GRAD (x, dy, weight), the gradient
// packed [..., T + 2, C] (each group of T rows of dx, then the group's sums of dy x_hat and of dy).
TEST(NormalizeOpcodes, VerifierChecksTheAffineForms) {
  auto with = [&](const std::function<void(ModuleBuilder&)>& add) {
    ModuleBuilder b;
    b.Parameter(0, proto::F32, {2, 3, 4});
    b.Parameter(1, proto::F32, {2, 3, 4});
    b.Parameter(2, proto::F32, {4});
    add(b);
    return b.module();
  };
  auto forward = [](std::vector<int64_t> operands, testing::Dims dims, int64_t axis) {
    return [=](ModuleBuilder& b) {
      b.Op(Opcode::kLayerNorm, operands, proto::F32, dims, [&](proto::Instruction& i) { i.set_axis(axis); });
    };
  };
  auto gradient = [](std::vector<int64_t> operands, testing::Dims dims, int64_t axis) {
    return [=](ModuleBuilder& b) {
      b.Op(Opcode::kLayerNormGrad, operands, proto::F32, dims, [&](proto::Instruction& i) { i.set_axis(axis); });
    };
  };
  EXPECT_TRUE(VerifyModule(with(forward({0, 2, 2}, {2, 3, 4}, 2))).ok());
  EXPECT_TRUE(VerifyModule(with(gradient({0, 1, 2}, {2, 5, 4}, 2))).ok());
  EXPECT_THAT(VerifyError(with(forward({0, 1, 2}, {2, 3, 4}, 2))),
              HasSubstr("operand 1 f32[2,3,4] must be the normalized dims"));
  EXPECT_THAT(VerifyError(with(gradient({0, 2, 2}, {2, 5, 4}, 2))), HasSubstr("operand 1 f32[4] must be of the shape"));
  EXPECT_THAT(VerifyError(with(gradient({0, 1, 2}, {2, 3, 4}, 2))), HasSubstr("must be [2,5,4]"));
  EXPECT_THAT(VerifyError(with(gradient({0, 1, 2}, {2, 5, 4}, 0))), HasSubstr("the affine's gradient needs axis >= 1"));
  EXPECT_THAT(VerifyError(with([](ModuleBuilder& b) {
                b.Op(Opcode::kRmsNorm, {0, 2, 2}, proto::F32, {2, 3, 4}, [](proto::Instruction& i) { i.set_axis(2); });
              })),
              HasSubstr("operand(s)"));
  EXPECT_THAT(
      VerifyError(with([](ModuleBuilder& b) {
        const int64_t x = b.Convert(0, proto::BF16), w = b.Convert(2, proto::BF16);
        b.Op(Opcode::kLayerNorm, {x, w, w}, proto::BF16, {2, 3, 4}, [](proto::Instruction& i) { i.set_axis(2); });
      })),
      HasSubstr("takes f32 or f64"));
}

// The affine forms give the bits of the ops they stand for: x_hat rounded, times the weight, plus the bias;
// dx from dy * weight rounded; each group's sums of the rounded terms dy x_hat and of dy, in f64 over its rows.
TEST(NormalizeOpcodes, AffineFormsGiveTheBitsOfTheirOps) {
  auto client = testing::MakeClient();
  // [700, 7, 5]: two tasks of the pool, each of whole groups.
  for (const testing::Dims& dims : {testing::Dims{3, 7, 5}, testing::Dims{2, 2, 9, 6}, testing::Dims{700, 7, 5}}) {
    SCOPED_TRACE(testing::Dims(dims).size());
    const int64_t rank = static_cast<int64_t>(dims.size()), axis = rank - 1, width = dims.back();
    const int64_t rows = testing::NumElements(dims) / width, group = dims[static_cast<size_t>(axis - 1)];
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, dims);
    const int64_t dy = b.Parameter(1, proto::F32, dims);
    const int64_t w = b.Parameter(2, proto::F32, {width});
    const int64_t bias = b.Parameter(3, proto::F32, {width});
    auto attrs = [&](proto::Instruction& i) {
      i.set_axis(axis);
      i.set_value(1e-3);
    };
    b.Output(b.Op(Opcode::kLayerNorm, {x, w, bias}, proto::F32, dims, attrs));
    b.Output(b.Op(Opcode::kLayerNorm, {x}, proto::F32, dims, attrs));  // x_hat, for the references
    testing::Dims packed = dims;
    packed[static_cast<size_t>(axis - 1)] += 2;
    b.Output(b.Op(Opcode::kLayerNormGrad, {x, dy, w}, proto::F32, packed, attrs));
    const int64_t w_all = b.Broadcast(w, dims, {axis});
    b.Output(b.Op(Opcode::kLayerNormGrad, {x, b.Mul(dy, w_all)}, proto::F32, dims, attrs));
    absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(b.module(), {});
    ASSERT_TRUE(exe.ok()) << exe.status();
    const int64_t n = testing::NumElements(dims);
    std::vector<float> xs(static_cast<size_t>(n)), dys(static_cast<size_t>(n)), ws(static_cast<size_t>(width)),
        bs(static_cast<size_t>(width));
    for (int64_t i = 0; i < n; ++i) {
      xs[static_cast<size_t>(i)] = static_cast<float>(std::sin(static_cast<double>(i) * 1.3) * 2 + 0.1 * (i % 7));
      dys[static_cast<size_t>(i)] = static_cast<float>(std::cos(static_cast<double>(i) * 0.7));
    }
    for (int64_t i = 0; i < width; ++i) {
      ws[static_cast<size_t>(i)] = static_cast<float>(0.5 + 0.3 * i);
      bs[static_cast<size_t>(i)] = static_cast<float>(0.1 * i - 0.2);
    }
    absl::StatusOr<std::vector<testing::HostArray>> out = testing::ExecuteOnHost(
        *client, **exe,
        {testing::MakeArray(PrimitiveType::kF32, dims, xs), testing::MakeArray(PrimitiveType::kF32, dims, dys),
         testing::MakeArray(PrimitiveType::kF32, {width}, ws), testing::MakeArray(PrimitiveType::kF32, {width}, bs)});
    ASSERT_TRUE(out.ok()) << out.status();
    const testing::HostArray &y = (*out)[0], &x_hat = (*out)[1], &grads = (*out)[2], &dx = (*out)[3];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < width; ++i) {
        const int64_t at = r * width + i;
        const float product = x_hat.at<float>(at) * ws[static_cast<size_t>(i)];
        EXPECT_EQ(y.at<float>(at), product + bs[static_cast<size_t>(i)]) << at;
        EXPECT_EQ(grads.at<float>((r + 2 * (r / group)) * width + i), dx.at<float>(at)) << at;
      }
    }
    for (int64_t g = 0; g < rows / group; ++g) {
      for (int64_t i = 0; i < width; ++i) {
        double dy_x_hat = 0, sum_dy = 0;
        for (int64_t r = g * group; r < (g + 1) * group; ++r) {
          const int64_t at = r * width + i;
          dy_x_hat += static_cast<float>(dys[static_cast<size_t>(at)] * x_hat.at<float>(at));
          sum_dy += dys[static_cast<size_t>(at)];
        }
        const int64_t sums = (g * (group + 2) + group) * width + i;
        EXPECT_EQ(grads.at<float>(sums), static_cast<float>(dy_x_hat)) << g << " " << i;
        EXPECT_EQ(grads.at<float>(sums + width), static_cast<float>(sum_dy)) << g << " " << i;
      }
    }
  }
}

// Groups of no rows: dx is empty, and each group's sums are of nothing, +0 (not whatever the memory held: the
// packed array takes the arena bytes of a layer norm of the same size that died before it).
TEST(NormalizeOpcodes, PackedGradientOfEmptyGroupsHasZeroSums) {
  auto client = testing::MakeClient();
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {3, 0, 4});
  const int64_t dy = b.Parameter(1, proto::F32, {3, 0, 4});
  const int64_t w = b.Parameter(2, proto::F32, {4});
  const int64_t other = b.Parameter(3, proto::F32, {3, 2, 4});
  auto attrs = [](proto::Instruction& i) {
    i.set_axis(2);
    i.set_value(1e-5);
  };
  const int64_t before = b.Op(Opcode::kLayerNorm, {other}, proto::F32, {3, 2, 4}, attrs);
  b.Output(b.Reduce(Combiner::kSum, before, {0, 1, 2}));
  const int64_t packed = b.Op(Opcode::kLayerNormGrad, {x, dy, w}, proto::F32, {3, 2, 4}, attrs);
  b.Output(b.Add(packed, b.Constant(0, proto::F32, {3, 2, 4})));
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(b.module(), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  std::vector<float> others(24);
  for (size_t i = 0; i < others.size(); ++i) others[i] = static_cast<float>(i % 5) - 1.5f;
  absl::StatusOr<std::vector<testing::HostArray>> out =
      testing::ExecuteOnHost(*client, **exe,
                             {testing::MakeArray(PrimitiveType::kF32, {3, 0, 4}, std::vector<float>{}),
                              testing::MakeArray(PrimitiveType::kF32, {3, 0, 4}, std::vector<float>{}),
                              testing::MakeArray(PrimitiveType::kF32, {4}, std::vector<float>{1, 2, 3, 4}),
                              testing::MakeArray(PrimitiveType::kF32, {3, 2, 4}, others)});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(std::bit_cast<uint32_t>((*out)[1].at<float>(i)), 0U) << i;
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
  EXPECT_THAT(error_of(k, two, shape), HasSubstr("operand(s)"));
  bad = k;
  bad.set_opcode(static_cast<int32_t>(Opcode::kRmsNormGrad));
  EXPECT_TRUE(BuildKernel(bad, two, shape).ok());
  EXPECT_THAT(error_of(bad, one, shape), HasSubstr("operand(s)"));
  bad = k;
  bad.set_axis(2);
  EXPECT_THAT(error_of(bad, one, shape), HasSubstr("axis"));
  bad = k;
  bad.set_epsilon(std::numeric_limits<double>::infinity());
  EXPECT_THAT(error_of(bad, one, shape), HasSubstr("epsilon"));
  EXPECT_THAT(error_of(k, std::vector<ArrayShape>{{PrimitiveType::kF32, {3, 2}}}, shape),
              HasSubstr("result f32[2,3] must be [3,2]"));
  const ArrayShape ints{PrimitiveType::kS32, {2, 3}};
  EXPECT_THAT(error_of(k, std::vector<ArrayShape>{ints}, ints), HasSubstr("floating"));
}

}  // namespace normalize_test
}  // namespace lazyrt::pjrt
