// An executable's tuned choices are measurements on the CPU it was compiled on: it records that CPU's
// ISA features, and a loader on a CPU with other features refuses it (the caller compiles again)
// rather than run choices no one examined there.
#include "pjrt_sim/cpu_isa.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pjrt_sim/executable.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace cpu_isa_test {

using ::testing::HasSubstr;

proto::Executable CompiledProduct(Client& client) {
  testing::ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {64, 48});
  const int64_t y = b.Parameter(1, proto::F32, {48, 32});
  b.Output(b.Dot(x, y));
  absl::StatusOr<std::shared_ptr<Executable>> exe = client.Compile(b.module(), {.autotune = true});
  EXPECT_TRUE(exe.ok()) << exe.status();
  return exe.ok() ? (*exe)->proto() : proto::Executable();
}

TEST(CpuIsaTest, TheHostsFeaturesAreNamedOnceInAFixedForm) {
  const std::string& isa = HostIsa();
  EXPECT_FALSE(isa.empty());
  EXPECT_EQ(&isa, &HostIsa());
#if defined(__x86_64__)
  EXPECT_THAT(isa, ::testing::StartsWith("x86_64"));
#endif
  // Whole names only: "avx" is not found inside "avx2".
  EXPECT_FALSE(HostHas("x86"));
  EXPECT_FALSE(HostHas("avx51"));
  EXPECT_EQ(HostHas("avx2"), isa.find(" avx2") != std::string::npos);
}

TEST(CpuIsaTest, AnExecutableRecordsTheFeaturesItWasTunedOn) {
  std::unique_ptr<Client> client = testing::MakeClient();
  const proto::Executable exe = CompiledProduct(*client);
  EXPECT_EQ(exe.cpu_isa(), HostIsa());
  ASSERT_TRUE(Executable::Load(exe).ok());
}

TEST(CpuIsaTest, AnExecutableTunedOnOtherFeaturesIsRefused) {
  std::unique_ptr<Client> client = testing::MakeClient();
  // An AVX2 machine's features and an AVX-512 one's: at least one of the two is another CPU's.
  for (const std::string& other : {std::string("x86_64 avx fma avx2"), std::string("x86_64 avx fma avx2 avx512f"),
                                   HostIsa() + " amx_fp8", std::string()}) {
    if (other == HostIsa()) continue;
    proto::Executable exe = CompiledProduct(*client);
    exe.set_cpu_isa(other);
    absl::StatusOr<std::shared_ptr<Executable>> loaded = Executable::Load(exe);
    ASSERT_FALSE(loaded.ok()) << "claimed '" << other << "'";
    EXPECT_TRUE(absl::IsFailedPrecondition(loaded.status())) << loaded.status();
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("tuned on a CPU with '" + other + "'"));
    // The same through the bytes a persistent cache entry holds.
    std::shared_ptr<Executable> good = *Executable::Load(CompiledProduct(*client));
    proto::Executable reparsed = *Executable::Parse(good->Serialize());
    reparsed.set_cpu_isa(other);
    absl::StatusOr<std::shared_ptr<Executable>> from_bytes = Executable::Load(*Executable::Parse(good->Serialize()));
    ASSERT_TRUE(from_bytes.ok()) << from_bytes.status();
    EXPECT_FALSE(Executable::Load(reparsed).ok());
  }
}

}  // namespace cpu_isa_test
}  // namespace lazyrt::pjrt
