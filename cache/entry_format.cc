#include "cache/entry_format.h"

#include <xxhash.h>
#include <zstd.h>
#include <bit>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace lazyrt::cache {
namespace {

// A trade of write time for size that suits executables; decompression speed barely depends on it.
constexpr int kCompressionLevel = 3;
// A zstd block holds at most 128 KiB of content and the smallest block (an RLE block) takes 4 bytes,
// so no zstd frame expands by more than this factor. It bounds what a crafted raw size can allocate.
constexpr uint64_t kZstdMaxExpansion = (uint64_t{128} << 10) / 4;
// No entry EncodeEntry writes has more compressed bytes; a larger claim is crafted, and reading it
// would allocate that much.
constexpr uint64_t kMaxCompressedSize = ZSTD_COMPRESSBOUND(kMaxPayloadBytes);

constexpr uint64_t kFormatVersionOffset = 8;
constexpr uint64_t kPrefixChecksumOffset = 64;
constexpr uint64_t kChecksumSize = 8;

void AppendLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// Reads a little-endian integer of `bytes` bytes; the caller has checked the bounds.
uint64_t LoadLittleEndian(absl::string_view data, uint64_t offset, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= uint64_t{static_cast<unsigned char>(data[offset + static_cast<uint64_t>(i)])} << (8 * i);
  }
  return value;
}

uint64_t Checksum(absl::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

Miss Truncated(uint64_t have, uint64_t need) {
  return Miss{MissReason::kTruncated, absl::StrCat("the entry needs ", need, " bytes but the file has ", have)};
}

absl::Status CheckLimit(absl::string_view field, uint64_t size, uint64_t limit) {
  if (size <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("cache entry ", field, " is ", size, " bytes; the limit is ", limit));
}

}  // namespace

uint64_t EncodedHeaderSize(const EntryHeader& header) {
  return kFixedHeaderSize + header.producer_version.size() + header.key.size() + header.metadata.size() + kChecksumSize;
}

uint64_t PayloadChecksum(absl::string_view compressed_payload) { return Checksum(compressed_payload); }

absl::StatusOr<std::string> EncodeHeader(const EntryHeader& header) {
  for (const absl::Status& status :
       {CheckLimit("producer version", header.producer_version.size(), kMaxProducerVersionBytes),
        CheckLimit("key", header.key.size(), kMaxKeyBytes),
        CheckLimit("metadata", header.metadata.size(), kMaxMetadataBytes),
        CheckLimit("payload", header.raw_size, kMaxPayloadBytes)}) {
    if (!status.ok()) return status;
  }
  if (!std::isfinite(header.compile_ms) || header.compile_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache entry compile time must be finite and >= 0, got ", header.compile_ms));
  }
  std::string out(kEntryMagic);
  out.reserve(EncodedHeaderSize(header));
  AppendLittleEndian(out, header.format_version, 4);
  AppendLittleEndian(out, header.producer_version.size(), 4);
  AppendLittleEndian(out, header.key.size(), 4);
  AppendLittleEndian(out, header.metadata.size(), 4);
  AppendLittleEndian(out, header.raw_size, 8);
  AppendLittleEndian(out, header.compressed_size, 8);
  AppendLittleEndian(out, header.payload_checksum, 8);
  AppendLittleEndian(out, std::bit_cast<uint64_t>(header.compile_ms), 8);
  AppendLittleEndian(out, static_cast<uint64_t>(header.created_unix_ms), 8);
  AppendLittleEndian(out, Checksum(out), 8);
  absl::StrAppend(&out, header.producer_version, header.key, header.metadata);
  AppendLittleEndian(out, Checksum(out), 8);
  return out;
}

absl::StatusOr<std::string> EncodeEntry(EntryHeader header, absl::string_view payload) {
  if (absl::Status status = CheckLimit("payload", payload.size(), kMaxPayloadBytes); !status.ok()) {
    return status;
  }
  std::string compressed(ZSTD_compressBound(payload.size()), '\0');
  const size_t compressed_size =
      ZSTD_compress(compressed.data(), compressed.size(), payload.data(), payload.size(), kCompressionLevel);
  if (ZSTD_isError(compressed_size)) {
    return absl::InternalError(absl::StrCat("zstd compression failed: ", ZSTD_getErrorName(compressed_size)));
  }
  compressed.resize(compressed_size);
  header.raw_size = payload.size();
  header.compressed_size = compressed.size();
  header.payload_checksum = PayloadChecksum(compressed);
  absl::StatusOr<std::string> entry = EncodeHeader(header);
  if (!entry.ok()) return entry.status();
  entry->append(compressed);
  return entry;
}

Decoded<EntryHeader> DecodeHeader(absl::string_view file_start, uint64_t file_size) {
  const uint64_t have = file_start.size();
  if (!absl::StartsWith(kEntryMagic, file_start.substr(0, kEntryMagic.size()))) {
    return Miss{MissReason::kBadMagic, "the file does not start with the cache entry magic"};
  }
  if (have < kFormatVersionOffset + 4) return Truncated(have, kFormatVersionOffset + 4);
  EntryHeader header;
  header.format_version = static_cast<uint32_t>(LoadLittleEndian(file_start, kFormatVersionOffset, 4));
  if (header.format_version != kEntryFormatVersion) {
    return Miss{MissReason::kFormatVersion, absl::StrCat("entry format version ", header.format_version,
                                                         ", this build reads ", kEntryFormatVersion)};
  }
  if (have < kFixedHeaderSize) return Truncated(have, kFixedHeaderSize);
  if (Checksum(file_start.substr(0, kPrefixChecksumOffset)) != LoadLittleEndian(file_start, kPrefixChecksumOffset, 8)) {
    return Miss{MissReason::kHeaderChecksum, "the fixed part of the header fails its checksum"};
  }
  const uint64_t producer_size = LoadLittleEndian(file_start, 12, 4);
  const uint64_t key_size = LoadLittleEndian(file_start, 16, 4);
  const uint64_t metadata_size = LoadLittleEndian(file_start, 20, 4);
  header.raw_size = LoadLittleEndian(file_start, 24, 8);
  header.compressed_size = LoadLittleEndian(file_start, 32, 8);
  header.payload_checksum = LoadLittleEndian(file_start, 40, 8);
  header.compile_ms = std::bit_cast<double>(LoadLittleEndian(file_start, 48, 8));
  header.created_unix_ms = static_cast<int64_t>(LoadLittleEndian(file_start, 56, 8));
  // The checksum only proves the bytes are as written; a crafted file can carry any values.
  if (producer_size > kMaxProducerVersionBytes || key_size > kMaxKeyBytes || metadata_size > kMaxMetadataBytes ||
      header.compressed_size > kMaxCompressedSize || !std::isfinite(header.compile_ms) || header.compile_ms < 0) {
    return Miss{MissReason::kHeaderChecksum,
                "the header's checksum holds but its sizes or compile time are impossible"};
  }
  const uint64_t strings_end = kFixedHeaderSize + producer_size + key_size + metadata_size;
  const uint64_t header_size = strings_end + kChecksumSize;
  if (have < header_size) return Truncated(have, header_size);
  if (Checksum(file_start.substr(0, strings_end)) != LoadLittleEndian(file_start, strings_end, 8)) {
    return Miss{MissReason::kHeaderChecksum, "the header fails its checksum"};
  }
  absl::string_view strings = file_start.substr(kFixedHeaderSize);
  header.producer_version = std::string(strings.substr(0, producer_size));
  header.key = std::string(strings.substr(producer_size, key_size));
  header.metadata = std::string(strings.substr(producer_size + key_size, metadata_size));
  if (file_size < header_size) return Truncated(file_size, header_size);
  const uint64_t payload_bytes_in_file = file_size - header_size;
  if (payload_bytes_in_file < header.compressed_size) {
    return Truncated(file_size, header_size + header.compressed_size);
  }
  if (payload_bytes_in_file > header.compressed_size) {
    return Miss{
        MissReason::kPayloadChecksum,
        absl::StrCat("the file has ", payload_bytes_in_file - header.compressed_size, " bytes after the payload")};
  }
  return header;
}

std::optional<Miss> CheckEntryIdentity(const EntryHeader& header, absl::string_view key,
                                       absl::string_view producer_version) {
  if (header.producer_version != producer_version) {
    return Miss{MissReason::kProducerVersion, absl::StrCat("written by producer version \"", header.producer_version,
                                                           "\", this one is \"", producer_version, "\"")};
  }
  if (header.key != key) {
    return Miss{MissReason::kKeyMismatch, absl::StrCat("the file holds the entry of key \"", header.key, "\"")};
  }
  return std::nullopt;
}

Decoded<std::string> DecodePayload(const EntryHeader& header, absl::string_view compressed_payload) {
  if (compressed_payload.size() != header.compressed_size) {
    return Truncated(compressed_payload.size(), header.compressed_size);
  }
  if (PayloadChecksum(compressed_payload) != header.payload_checksum) {
    return Miss{MissReason::kPayloadChecksum, "the compressed payload fails its checksum"};
  }
  if (header.raw_size > kMaxPayloadBytes || header.raw_size / kZstdMaxExpansion > header.compressed_size) {
    return Miss{MissReason::kDecompress, absl::StrCat("a raw size of ", header.raw_size, " bytes cannot come from ",
                                                      header.compressed_size, " compressed bytes")};
  }
  const unsigned long long frame_size = ZSTD_getFrameContentSize(compressed_payload.data(), compressed_payload.size());
  if (frame_size != header.raw_size) {
    return Miss{MissReason::kDecompress, "the zstd frame does not declare the raw size the header promises"};
  }
  std::string raw(header.raw_size, '\0');
  const size_t written = ZSTD_decompress(raw.data(), raw.size(), compressed_payload.data(), compressed_payload.size());
  if (ZSTD_isError(written)) {
    return Miss{MissReason::kDecompress, absl::StrCat("zstd decompression failed: ", ZSTD_getErrorName(written))};
  }
  if (written != raw.size()) {
    return Miss{MissReason::kDecompress,
                absl::StrCat("the payload decompressed to ", written, " bytes, the header says ", raw.size())};
  }
  return raw;
}

}  // namespace lazyrt::cache
