#include "cache/layout.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

#include "cache/entry_format.h"

namespace lazyrt::cache {
namespace layout_test {

TEST(Layout, KeysAreSafeFileNames) {
  EXPECT_TRUE(ValidateKey("graph-0123abcdef_v1.2").ok());
  EXPECT_TRUE(ValidateKey(std::string(kMaxKeyBytes, 'k')).ok());
  for (const char* bad : {"", ".hidden", "a/b", "../up", "with space", "nul\n"}) {
    EXPECT_EQ(ValidateKey(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(ValidateKey(std::string(kMaxKeyBytes + 1, 'k')).ok());
}

TEST(Layout, OnlyEntryFilesHaveKeys) {
  EXPECT_EQ(KeyFromEntryFileName(EntryFileName("abc")), "abc");
  EXPECT_FALSE(KeyFromEntryFileName("events.jsonl").has_value());
  EXPECT_FALSE(KeyFromEntryFileName(".lzc").has_value());
  EXPECT_FALSE(KeyFromEntryFileName(UniqueTempFileName(EntryFileName("abc"))).has_value());
}

TEST(Layout, TempFileNamesAreUniqueHiddenAndRecognized) {
  std::set<std::string> names;
  for (int i = 0; i < 100; ++i) names.insert(UniqueTempFileName(EntryFileName("abc")));
  EXPECT_EQ(names.size(), 100u);
  for (const std::string& name : names) {
    EXPECT_EQ(name.front(), '.');
    EXPECT_TRUE(IsTempFileName(name));
  }
  EXPECT_FALSE(IsTempFileName(EntryFileName("abc")));
  EXPECT_LE(UniqueTempFileName(EntryFileName(std::string(kMaxKeyBytes, 'k'))).size(), 255u);
}

}  // namespace layout_test
}  // namespace lazyrt::cache
