// LAZYRT_ALL_REDUCE_COMBINE_BYTES: a size from 0 (never combine) to the combiner's bound, anything else
// refused naming the setting and the range.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lazy/options.h"
#include "pjrt_sim/all_reduce_combiner.h"

namespace lazyrt {
namespace all_reduce_combine_option_test {

using ::testing::HasSubstr;

TEST(AllReduceCombineOption, DefaultsToTheCompilersBucketSize) {
  EXPECT_EQ(Options{}.all_reduce_combine_bytes, pjrt::kDefaultAllReduceCombineBytes);
}

TEST(AllReduceCombineOption, TakesSizesUpToTheBound) {
  Options o;
  ASSERT_TRUE(o.Set("LAZYRT_ALL_REDUCE_COMBINE_BYTES", "0").ok());
  EXPECT_EQ(o.all_reduce_combine_bytes, 0);
  ASSERT_TRUE(o.Set("LAZYRT_ALL_REDUCE_COMBINE_BYTES", "25M").ok());
  EXPECT_EQ(o.all_reduce_combine_bytes, int64_t{25} << 20);
  ASSERT_TRUE(o.Set("LAZYRT_ALL_REDUCE_COMBINE_BYTES", "4G").ok());
  EXPECT_EQ(o.all_reduce_combine_bytes, pjrt::kMaxAllReduceCombineBytes);
}

TEST(AllReduceCombineOption, RefusesWhatIsNotASizeInRange) {
  for (const char* bad : {"4097M", "1T", "-1", "lots", ""}) {
    Options o;
    const absl::Status s = o.Set("LAZYRT_ALL_REDUCE_COMBINE_BYTES", bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_THAT(s.message(), HasSubstr("LAZYRT_ALL_REDUCE_COMBINE_BYTES=")) << bad;
    EXPECT_EQ(o.all_reduce_combine_bytes, pjrt::kDefaultAllReduceCombineBytes) << bad;
  }
}

}  // namespace all_reduce_combine_option_test
}  // namespace lazyrt
