// SCATTER_ADD and INDEX_ADD: verifier rules, the kernels against reference loops, the loader's checks,
// and the index error named by the executable's site namer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pjrt_sim/executable.h"
#include "pjrt_sim/kernels/kernels.h"
#include "pjrt_sim/module_verifier.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace scatter_test {

using ::testing::HasSubstr;
using testing::ModuleBuilder;

// x f32[3,4], index s64[index_dims], src f32[src_dims] -> op along axis.
proto::Module ScatterModule(Opcode op, const testing::Dims& index_dims, const testing::Dims& src_dims, int64_t axis,
                            int64_t site = 1) {
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {3, 4});
  const int64_t index = b.Parameter(1, proto::S64, index_dims);
  const int64_t src = b.Parameter(2, proto::F32, src_dims);
  b.Output(b.Op(op, {x, index, src}, proto::F32, {3, 4}, [&](proto::Instruction& i) {
    i.set_axis(axis);
    i.set_site(site);
  }));
  return b.module();
}

std::string VerifyError(const proto::Module& m) { return std::string(VerifyModule(m).message()); }

TEST(ScatterOpcodes, VerifierRules) {
  EXPECT_TRUE(VerifyModule(ScatterModule(Opcode::kScatterAdd, {2, 4}, {2, 4}, 0)).ok());
  EXPECT_TRUE(VerifyModule(ScatterModule(Opcode::kIndexAdd, {5}, {3, 5}, 1)).ok());
  EXPECT_THAT(VerifyError(ScatterModule(Opcode::kScatterAdd, {2, 4}, {2, 3}, 0)), HasSubstr("src's dims"));
  EXPECT_THAT(VerifyError(ScatterModule(Opcode::kScatterAdd, {2, 5}, {2, 5}, 0)), HasSubstr("larger"));
  EXPECT_THAT(VerifyError(ScatterModule(Opcode::kScatterAdd, {2, 4}, {2, 4}, 2)), HasSubstr("axis"));
  EXPECT_THAT(VerifyError(ScatterModule(Opcode::kIndexAdd, {5}, {3, 4}, 1)), HasSubstr("src dims"));
  EXPECT_THAT(VerifyError(ScatterModule(Opcode::kIndexAdd, {5, 1}, {3, 5}, 1)), HasSubstr("1-D"));
  EXPECT_THAT(VerifyError(ScatterModule(Opcode::kIndexAdd, {5}, {3, 5}, 1, -1)), HasSubstr("bad site"));
  EXPECT_THAT(VerifyError(ScatterModule(Opcode::kIndexAdd, {5}, {3, 5}, 1, 99)), HasSubstr("bad site"));
}

TEST(ScatterOpcodes, KernelsMatchReferenceLoopsAndNameTheirSite) {
  auto client = testing::MakeClient();
  std::vector<float> x(12), src(15);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(100 * (i + 1));
  const std::vector<int64_t> index = {3, 0, 3, 3, 1};
  absl::StatusOr<std::shared_ptr<Executable>> exe =
      client->Compile(ScatterModule(Opcode::kIndexAdd, {5}, {3, 5}, 1), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto args = [&](const std::vector<int64_t>& idx) {
    return std::vector<testing::HostArray>{testing::MakeArray(PrimitiveType::kF32, {3, 4}, x),
                                           testing::MakeArray(PrimitiveType::kS64, {5}, idx),
                                           testing::MakeArray(PrimitiveType::kF32, {3, 5}, src)};
  };
  absl::StatusOr<std::vector<testing::HostArray>> out = testing::ExecuteOnHost(*client, **exe, args(index));
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<float> want = x;
  for (int64_t o = 0; o < 3; ++o) {
    for (int64_t j = 0; j < 5; ++j)
      want[static_cast<size_t>(o * 4 + index[static_cast<size_t>(j)])] += src[static_cast<size_t>(o * 5 + j)];
  }
  EXPECT_EQ((*out)[0].values<float>(), want);
  // Without a namer the opcode names the error; with one, the caller's name for the site.
  out = testing::ExecuteOnHost(*client, **exe, args({0, 1, 4, 0, 0}));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("index_add: index 4 is out of range for a dimension of size 4 (valid: [0, 4)), at position 2"));
  std::vector<std::shared_ptr<Buffer>> buffers;
  for (const testing::HostArray& a : args({0, 1, 4, 0, 0})) {
    buffers.push_back(*client->BufferFromHost(a.bytes.data(), a.shape, client->device(0)));
  }
  absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> r =
      (*exe)->Execute(buffers, client->device(0), [](int64_t site) { return absl::StrCat("my_op#", site); });
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(std::string((*r)[0]->ready()->Wait().message()), HasSubstr("my_op#1: index 4"));
}

TEST(ScatterOpcodes, LoaderRejectsBadKernelFields) {
  const ArrayShape x{PrimitiveType::kF32, {3, 4}};
  const std::vector<ArrayShape> ok = {x, {PrimitiveType::kS32, {2, 4}}, {PrimitiveType::kF32, {2, 4}}};
  proto::Kernel k;
  k.set_kind(proto::Kernel::SCATTER);
  k.set_opcode(static_cast<int32_t>(Opcode::kScatterAdd));
  EXPECT_TRUE(BuildKernel(k, ok, x).ok());
  proto::Kernel bad = k;
  bad.set_opcode(static_cast<int32_t>(Opcode::kGather));
  EXPECT_FALSE(BuildKernel(bad, ok, x).ok());
  bad = k;
  bad.set_site(-2);
  EXPECT_FALSE(BuildKernel(bad, ok, x).ok());
  bad = k;
  bad.set_axis(2);
  EXPECT_FALSE(BuildKernel(bad, ok, x).ok());
  EXPECT_FALSE(
      BuildKernel(k, std::vector<ArrayShape>{x, {PrimitiveType::kF32, {2, 4}}, {PrimitiveType::kF32, {2, 4}}}, x).ok());
  EXPECT_FALSE(
      BuildKernel(k, std::vector<ArrayShape>{x, {PrimitiveType::kS32, {2, 5}}, {PrimitiveType::kF32, {2, 5}}}, x).ok());
  bad = k;
  bad.set_opcode(static_cast<int32_t>(Opcode::kIndexAdd));
  EXPECT_FALSE(BuildKernel(bad, ok, x).ok());  // index_add wants a 1-D index
  EXPECT_TRUE(
      BuildKernel(bad, std::vector<ArrayShape>{x, {PrimitiveType::kS64, {2}}, {PrimitiveType::kF32, {2, 4}}}, x).ok());
}

}  // namespace scatter_test
}  // namespace lazyrt::pjrt
