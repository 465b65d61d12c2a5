// The bytes of one cache entry: a self-checking binary header, then the zstd-compressed payload.
// Encoding and decoding only, no I/O, so every damaged-entry path is testable on bytes in memory.
//
// Layout; every integer little-endian and fixed width:
//   offset      size  field
//        0         8  magic "LZRTCACH"
//        8         4  format version (u32)
//       12         4  producer version length P (u32)
//       16         4  key length K (u32)
//       20         4  metadata length M (u32)
//       24         8  raw (uncompressed) payload size (u64)
//       32         8  compressed payload size C (u64)
//       40         8  XXH3-64 of the compressed payload (u64)
//       48         8  compile time this entry saves, ms (IEEE-754 double)
//       56         8  creation time, unix ms (i64)
//       64         8  prefix checksum: XXH3-64 of bytes [0, 64)
//       72   P, K, M  producer version, key, metadata
//   72+P+K+M       8  header checksum: XXH3-64 of every header byte before it
//   then the C payload bytes, and the file ends.
// The prefix checksum lets a reader trust the three lengths before it reads the strings, so a
// flipped bit in a length is reported as header damage instead of being mistaken for truncation.
// The magic and the format version come first and are checked before anything else, so a future
// format may change everything after them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cache/miss_reason.h"

namespace lazyrt::cache {

inline constexpr absl::string_view kEntryMagic = "LZRTCACH";
// Bump when the layout above changes; entries of another version are misses (format_version).
inline constexpr uint32_t kEntryFormatVersion = 1;
inline constexpr uint64_t kFixedHeaderSize = 72;

// Limits that bound what a reader allocates, whatever a crafted file claims. The key limit keeps
// "<key>.lzc" and its temporary sibling names within a file name's 255 bytes.
inline constexpr uint64_t kMaxKeyBytes = 200;
inline constexpr uint64_t kMaxProducerVersionBytes = 1024;
inline constexpr uint64_t kMaxMetadataBytes = uint64_t{64} << 10;
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 30;
// No valid header is longer: a reader that reads this many bytes (or the whole file, if shorter)
// has every header byte.
inline constexpr uint64_t kMaxHeaderSize =
    kFixedHeaderSize + kMaxProducerVersionBytes + kMaxKeyBytes + kMaxMetadataBytes + 8;

struct EntryHeader {
  uint32_t format_version = kEntryFormatVersion;
  // The version of whatever produced the payload (the compiler); another version's entry is a miss.
  std::string producer_version;
  std::string key;
  // The compile time a hit on this entry saves.
  double compile_ms = 0;
  int64_t created_unix_ms = 0;
  // Free text for listings; the runtime stores a small JSON summary of the graph.
  std::string metadata;
  // Derived from the payload by EncodeEntry.
  uint64_t raw_size = 0;
  uint64_t compressed_size = 0;
  uint64_t payload_checksum = 0;
};

// A decoded value, or the miss that the bytes amount to.
template <typename T>
using Decoded = std::variant<T, Miss>;

// The whole entry file for `payload`. Fills the derived fields of `header` (raw_size,
// compressed_size, payload_checksum) from the payload and keeps the rest as given.
// INVALID_ARGUMENT when a field is out of the limits above or compile_ms is negative or not finite.
absl::StatusOr<std::string> EncodeEntry(EntryHeader header, absl::string_view payload);

// The header bytes alone, exactly as given (tests use it to craft entries whose checksums are
// right but whose contents are not). Same errors as EncodeEntry.
absl::StatusOr<std::string> EncodeHeader(const EntryHeader& header);

// How many bytes EncodeHeader produces for `header`: the offset of the payload.
uint64_t EncodedHeaderSize(const EntryHeader& header);

// The checksum stored in the header for these compressed payload bytes.
uint64_t PayloadChecksum(absl::string_view compressed_payload);

// Decodes and validates the header of a file of `file_size` bytes, given its first
// min(file_size, kMaxHeaderSize) bytes in `file_start`. Checks the magic, the format version, both
// header checksums, the limits, and that the file is exactly header plus payload long (shorter:
// truncated; longer: payload_checksum). Does not look at the payload bytes.
Decoded<EntryHeader> DecodeHeader(absl::string_view file_start, uint64_t file_size);

// The miss, if a valid header belongs to another producer version or another key (checked in
// that order); nullopt when it is the entry asked for.
std::optional<Miss> CheckEntryIdentity(const EntryHeader& header, absl::string_view key,
                                       absl::string_view producer_version);

// The raw payload from the compressed bytes that follow `header` in its file: checks their size
// (truncated), their checksum (payload_checksum), and that they decompress to exactly
// header.raw_size bytes (decompress). Never allocates more than the compressed bytes can expand to.
Decoded<std::string> DecodePayload(const EntryHeader& header, absl::string_view compressed_payload);

}  // namespace lazyrt::cache
