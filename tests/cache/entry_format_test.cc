#include "cache/entry_format.h"

#include <xxhash.h>

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include <gtest/gtest.h>

namespace lazyrt::cache {
namespace entry_format_test {

constexpr absl::string_view kProducer = "test-compiler/1";
constexpr absl::string_view kKey = "graph-0123abcd";

EntryHeader TestHeader() {
  EntryHeader header;
  header.producer_version = std::string(kProducer);
  header.key = std::string(kKey);
  header.compile_ms = 12.5;
  header.created_unix_ms = 1700000000123;
  header.metadata = R"({"nodes":7,"parameters":2,"outputs":1})";
  return header;
}

std::string Encode(const EntryHeader& header, absl::string_view payload) {
  absl::StatusOr<std::string> file = EncodeEntry(header, payload);
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? *file : std::string();
}

std::string TestPayload() {
  std::string payload;
  for (int i = 0; i < 300; ++i) payload.push_back(static_cast<char>((i * 7) % 256));
  payload += std::string(100, '\0');
  return payload;
}

// Decodes a whole file the way the store reads one: header, identity, payload.
Decoded<std::string> DecodeFile(absl::string_view file, absl::string_view key = kKey) {
  Decoded<EntryHeader> header = DecodeHeader(file.substr(0, kMaxHeaderSize), file.size());
  if (const Miss* miss = std::get_if<Miss>(&header)) return *miss;
  const EntryHeader& valid = std::get<EntryHeader>(header);
  if (std::optional<Miss> miss = CheckEntryIdentity(valid, key, kProducer)) return *miss;
  return DecodePayload(valid, file.substr(EncodedHeaderSize(valid)));
}

// The miss reason, or nullopt for a successful decode.
std::optional<MissReason> ReasonOf(const Decoded<std::string>& decoded) {
  const Miss* miss = std::get_if<Miss>(&decoded);
  return miss == nullptr ? std::nullopt : std::optional<MissReason>(miss->reason);
}

void StoreLittleEndian(std::string& file, size_t offset, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) file[offset + static_cast<size_t>(i)] = static_cast<char>(value >> (8 * i));
}

// Rewrites the prefix checksum so that a crafted fixed header passes it.
void ResealPrefix(std::string& file) { StoreLittleEndian(file, 64, XXH3_64bits(file.data(), 64), 8); }

TEST(EntryFormat, RoundTripKeepsPayloadBytesAndHeaderFields) {
  const std::string payload = TestPayload();
  const std::string file = Encode(TestHeader(), payload);
  ASSERT_EQ(file.substr(0, 8), "LZRTCACH");

  Decoded<EntryHeader> decoded = DecodeHeader(file, file.size());
  ASSERT_TRUE(std::holds_alternative<EntryHeader>(decoded)) << std::get<Miss>(decoded).detail;
  const EntryHeader& header = std::get<EntryHeader>(decoded);
  EXPECT_EQ(header.format_version, kEntryFormatVersion);
  EXPECT_EQ(header.producer_version, kProducer);
  EXPECT_EQ(header.key, kKey);
  EXPECT_EQ(header.compile_ms, 12.5);
  EXPECT_EQ(header.created_unix_ms, 1700000000123);
  EXPECT_EQ(header.metadata, TestHeader().metadata);
  EXPECT_EQ(header.raw_size, payload.size());
  EXPECT_EQ(EncodedHeaderSize(header) + header.compressed_size, file.size());
  EXPECT_EQ(header.payload_checksum, PayloadChecksum(file.substr(EncodedHeaderSize(header))));

  Decoded<std::string> raw = DecodeFile(file);
  ASSERT_TRUE(std::holds_alternative<std::string>(raw)) << std::get<Miss>(raw).detail;
  EXPECT_EQ(std::get<std::string>(raw), payload);
}

TEST(EntryFormat, RoundTripOfAnEmptyPayload) {
  Decoded<std::string> raw = DecodeFile(Encode(TestHeader(), ""));
  ASSERT_TRUE(std::holds_alternative<std::string>(raw)) << std::get<Miss>(raw).detail;
  EXPECT_EQ(std::get<std::string>(raw), "");
}

TEST(EntryFormat, EncodingRejectsFieldsBeyondTheLimits) {
  EntryHeader long_key = TestHeader();
  long_key.key = std::string(kMaxKeyBytes + 1, 'k');
  EXPECT_EQ(EncodeEntry(long_key, "x").status().code(), absl::StatusCode::kInvalidArgument);
  EntryHeader long_metadata = TestHeader();
  long_metadata.metadata = std::string(kMaxMetadataBytes + 1, 'm');
  EXPECT_EQ(EncodeEntry(long_metadata, "x").status().code(), absl::StatusCode::kInvalidArgument);
  EntryHeader negative_time = TestHeader();
  negative_time.compile_ms = -1;
  EXPECT_EQ(EncodeEntry(negative_time, "x").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EntryFormat, TruncationAtEveryOffsetIsTruncated) {
  const std::string file = Encode(TestHeader(), TestPayload());
  for (size_t size = 0; size < file.size(); ++size) {
    EXPECT_EQ(ReasonOf(DecodeFile(file.substr(0, size))), MissReason::kTruncated) << "size " << size;
  }
}

TEST(EntryFormat, EveryFlippedByteIsDetectedWithTheReasonOfItsRegion) {
  const std::string file = Encode(TestHeader(), TestPayload());
  const size_t header_size = EncodedHeaderSize(std::get<EntryHeader>(DecodeHeader(file, file.size())));
  for (size_t offset = 0; offset < file.size(); ++offset) {
    std::string damaged = file;
    damaged[offset] = static_cast<char>(damaged[offset] ^ 0x01);
    const MissReason expected = offset < 8             ? MissReason::kBadMagic
                                : offset < 12          ? MissReason::kFormatVersion
                                : offset < header_size ? MissReason::kHeaderChecksum
                                                       : MissReason::kPayloadChecksum;
    EXPECT_EQ(ReasonOf(DecodeFile(damaged)), expected) << "offset " << offset;
  }
}

TEST(EntryFormat, ZeroedHeaderIsBadMagic) {
  std::string file = Encode(TestHeader(), TestPayload());
  std::fill(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(kFixedHeaderSize), '\0');
  EXPECT_EQ(ReasonOf(DecodeFile(file)), MissReason::kBadMagic);
}

TEST(EntryFormat, AnotherFormatVersionIsFormatVersionEvenWithValidChecksums) {
  const std::string current = Encode(TestHeader(), TestPayload());
  EntryHeader header = std::get<EntryHeader>(DecodeHeader(current, current.size()));
  header.format_version = kEntryFormatVersion + 1;
  absl::StatusOr<std::string> file = EncodeHeader(header);
  ASSERT_TRUE(file.ok());
  file->append(current.substr(EncodedHeaderSize(header)));
  EXPECT_EQ(ReasonOf(DecodeFile(*file)), MissReason::kFormatVersion);
}

TEST(EntryFormat, IdentityChecksProducerVersionThenKey) {
  const std::string file = Encode(TestHeader(), TestPayload());
  const EntryHeader header = std::get<EntryHeader>(DecodeHeader(file, file.size()));
  EXPECT_FALSE(CheckEntryIdentity(header, kKey, kProducer).has_value());
  EXPECT_EQ(CheckEntryIdentity(header, kKey, "test-compiler/2")->reason, MissReason::kProducerVersion);
  EXPECT_EQ(CheckEntryIdentity(header, "other-key", kProducer)->reason, MissReason::kKeyMismatch);
  EXPECT_EQ(CheckEntryIdentity(header, "other-key", "test-compiler/2")->reason, MissReason::kProducerVersion);
}

TEST(EntryFormat, TrailingBytesArePayloadDamage) {
  EXPECT_EQ(ReasonOf(DecodeFile(Encode(TestHeader(), TestPayload()) + "x")), MissReason::kPayloadChecksum);
}

TEST(EntryFormat, CraftedLengthsBeyondTheLimitsAreRejectedBeforeAnyRead) {
  std::string file = Encode(TestHeader(), TestPayload());
  StoreLittleEndian(file, 20, 0xffffffff, 4);  // metadata length
  ResealPrefix(file);
  EXPECT_EQ(ReasonOf(DecodeFile(file)), MissReason::kHeaderChecksum);
}

TEST(EntryFormat, CraftedLengthsBeyondTheFileAreTruncated) {
  std::string file = Encode(TestHeader(), TestPayload());
  StoreLittleEndian(file, 20, kMaxMetadataBytes, 4);  // within the limit, past the end of the file
  ResealPrefix(file);
  EXPECT_EQ(ReasonOf(DecodeFile(file)), MissReason::kTruncated);
}

TEST(EntryFormat, CraftedCompressedSizeBeyondAnyEntryIsRejectedBeforeAnyRead) {
  EntryHeader header = TestHeader();
  header.compressed_size = uint64_t{1} << 40;
  absl::StatusOr<std::string> file = EncodeHeader(header);
  ASSERT_TRUE(file.ok());
  // The file size agrees with the claim, as a sparse file's would.
  Decoded<EntryHeader> decoded = DecodeHeader(*file, file->size() + header.compressed_size);
  ASSERT_TRUE(std::holds_alternative<Miss>(decoded));
  EXPECT_EQ(std::get<Miss>(decoded).reason, MissReason::kHeaderChecksum);
}

TEST(EntryFormat, CraftedRawSizeBeyondWhatTheBytesCanHoldIsDecompressWithoutAllocating) {
  const std::string current = Encode(TestHeader(), TestPayload());
  EntryHeader header = std::get<EntryHeader>(DecodeHeader(current, current.size()));
  header.raw_size = kMaxPayloadBytes;  // a 1 GiB claim from a few hundred bytes
  absl::StatusOr<std::string> file = EncodeHeader(header);
  ASSERT_TRUE(file.ok());
  file->append(current.substr(EncodedHeaderSize(header)));
  EXPECT_EQ(ReasonOf(DecodeFile(*file)), MissReason::kDecompress);
}

TEST(EntryFormat, RawSizeOtherThanTheFramesIsDecompress) {
  const std::string current = Encode(TestHeader(), TestPayload());
  EntryHeader header = std::get<EntryHeader>(DecodeHeader(current, current.size()));
  header.raw_size -= 1;
  absl::StatusOr<std::string> file = EncodeHeader(header);
  ASSERT_TRUE(file.ok());
  file->append(current.substr(EncodedHeaderSize(header)));
  EXPECT_EQ(ReasonOf(DecodeFile(*file)), MissReason::kDecompress);
}

TEST(EntryFormat, GarbagePayloadWithAValidChecksumIsDecompress) {
  const std::string garbage = "this is not a zstd frame at all";
  EntryHeader header = TestHeader();
  header.raw_size = 10;
  header.compressed_size = garbage.size();
  header.payload_checksum = PayloadChecksum(garbage);
  absl::StatusOr<std::string> file = EncodeHeader(header);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(ReasonOf(DecodeFile(*file + garbage)), MissReason::kDecompress);
}

}  // namespace entry_format_test
}  // namespace lazyrt::cache
