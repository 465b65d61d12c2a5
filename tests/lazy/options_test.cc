#include "lazy/options.h"

#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace lazyrt {
namespace options_test {

using ::testing::HasSubstr;

TEST(Options, UnknownSettingIsRefusedNamingTheValidOnes) {
  ::setenv("LAZYRT_DEVICEZ", "2", 1);
  absl::StatusOr<Options> o = Options::FromEnvironment();
  ::unsetenv("LAZYRT_DEVICEZ");
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(o.status().message(), HasSubstr("LAZYRT_DEVICEZ"));
  EXPECT_THAT(o.status().message(), HasSubstr("LAZYRT_DEVICES"));
}

TEST(Options, UnparsableValueIsRefused) {
  ::setenv("LAZYRT_DEVICES", "many", 1);
  absl::StatusOr<Options> o = Options::FromEnvironment();
  ::unsetenv("LAZYRT_DEVICES");
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(o.status().message(), HasSubstr("LAZYRT_DEVICES=many"));
}

TEST(Options, KernelReRunsWithoutTheKernelProfileAreRefused) {
  ::setenv("LAZYRT_KERNEL_PROFILE_RERUNS", "1", 1);
  absl::StatusOr<Options> alone = Options::FromEnvironment();
  ::setenv("LAZYRT_KERNEL_PROFILE", "10", 1);
  absl::StatusOr<Options> with_profile = Options::FromEnvironment();
  ::unsetenv("LAZYRT_KERNEL_PROFILE");
  ::setenv("LAZYRT_DEBUG", "3", 1);
  absl::StatusOr<Options> with_debug = Options::FromEnvironment();
  ::unsetenv("LAZYRT_DEBUG");
  ::unsetenv("LAZYRT_KERNEL_PROFILE_RERUNS");
  ASSERT_FALSE(alone.ok());
  EXPECT_THAT(alone.status().message(), HasSubstr("LAZYRT_KERNEL_PROFILE_RERUNS=1"));
  EXPECT_THAT(alone.status().message(), HasSubstr("LAZYRT_KERNEL_PROFILE=N"));
  ASSERT_TRUE(with_profile.ok()) << with_profile.status();
  EXPECT_TRUE(with_profile->kernel_profile_reruns);
  EXPECT_TRUE(with_debug.ok()) << with_debug.status();
  // Set in code, the same (configure() checks them so).
  Options in_code;
  in_code.kernel_profile_reruns = true;
  EXPECT_THAT(in_code.Check().message(), HasSubstr("kernel_profile_reruns"));
  in_code.kernel_profile = 10;
  EXPECT_TRUE(in_code.Check().ok());
  in_code.kernel_profile = 0;
  in_code.debug = 3;
  EXPECT_TRUE(in_code.Check().ok());
}

TEST(Options, EnvironmentOverridesDefaults) {
  ::setenv("LAZYRT_DEVICES", "8", 1);
  ::setenv("LAZYRT_DEVICE_MEMORY", "512M", 1);
  absl::StatusOr<Options> o = Options::FromEnvironment();
  ::unsetenv("LAZYRT_DEVICES");
  ::unsetenv("LAZYRT_DEVICE_MEMORY");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->devices, 8);
  EXPECT_EQ(o->device_memory_bytes, int64_t{512} << 20);
}

TEST(Options, ResolvedListsEverySetting) {
  Options o;
  auto resolved = o.Resolved();
  ASSERT_FALSE(resolved.empty());
  EXPECT_EQ(resolved[0].first, "LAZYRT_DEVICES");
  EXPECT_EQ(resolved[0].second, "1");
}

TEST(ParseByteSize, Units) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096);
  EXPECT_EQ(*ParseByteSize("512M"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("10G"), int64_t{10} << 30);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), int64_t{3} << 29);
  EXPECT_EQ(*ParseByteSize("2KB"), 2048);
  EXPECT_FALSE(ParseByteSize("ten").ok());
  EXPECT_FALSE(ParseByteSize("5X").ok());
}

}  // namespace options_test
}  // namespace lazyrt
