#include "cache/miss_reason.h"

#include <gtest/gtest.h>

namespace lazyrt::cache {
namespace miss_reason_test {

TEST(MissReason, NamesAreTheStableLowercaseOnes) {
  EXPECT_EQ(MissReasonName(MissReason::kNotFound), "not_found");
  EXPECT_EQ(MissReasonName(MissReason::kTruncated), "truncated");
  EXPECT_EQ(MissReasonName(MissReason::kBadMagic), "bad_magic");
  EXPECT_EQ(MissReasonName(MissReason::kFormatVersion), "format_version");
  EXPECT_EQ(MissReasonName(MissReason::kProducerVersion), "producer_version");
  EXPECT_EQ(MissReasonName(MissReason::kKeyMismatch), "key_mismatch");
  EXPECT_EQ(MissReasonName(MissReason::kHeaderChecksum), "header_checksum");
  EXPECT_EQ(MissReasonName(MissReason::kPayloadChecksum), "payload_checksum");
  EXPECT_EQ(MissReasonName(MissReason::kDecompress), "decompress");
  EXPECT_EQ(MissReasonName(MissReason::kUnloadable), "unloadable");
  EXPECT_EQ(MissReasonName(MissReason::kUntrustedDirectory), "untrusted_directory");
}

TEST(MissReason, NamesParseBack) {
  for (MissReason reason : kAllMissReasons) {
    EXPECT_EQ(MissReasonFromName(MissReasonName(reason)), reason);
  }
  EXPECT_FALSE(MissReasonFromName("no_such_reason").has_value());
}

}  // namespace miss_reason_test
}  // namespace lazyrt::cache
