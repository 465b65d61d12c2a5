// Why a cache lookup did not produce a usable payload. The names are stable: logs, counters, the
// event log and the CLI all use them, so renaming one breaks reading old event logs.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace lazyrt::cache {

enum class MissReason : int {
  kNotFound,            // no entry under the key
  kTruncated,           // the file is shorter than its header says, or cannot be read
  kBadMagic,            // not a cache entry at all
  kFormatVersion,       // written with another entry format version
  kProducerVersion,     // written by another compiler version
  kKeyMismatch,         // the file holds another key's entry (renamed or copied)
  kHeaderChecksum,      // the header is damaged, or holds impossible values
  kPayloadChecksum,     // the compressed payload is damaged
  kDecompress,          // the payload does not decompress to the size the header promises
  kUnloadable,          // the caller could not load the payload (Store::ReportUnloadable)
  kUntrustedDirectory,  // the directory is writable by others, so nothing in it is loaded
  kGraphMismatch,       // a sound entry whose graph signature does not fit the graph being run
  kKeyChanged,          // no entry under the key, but the same graph is stored under a key made of
                        // other ingredients (compiler version, compile options, device count, ...)
};

inline constexpr std::array kAllMissReasons = {
    MissReason::kNotFound,       MissReason::kTruncated,          MissReason::kBadMagic,
    MissReason::kFormatVersion,  MissReason::kProducerVersion,    MissReason::kKeyMismatch,
    MissReason::kHeaderChecksum, MissReason::kPayloadChecksum,    MissReason::kDecompress,
    MissReason::kUnloadable,     MissReason::kUntrustedDirectory, MissReason::kGraphMismatch,
    MissReason::kKeyChanged};
inline constexpr size_t kNumMissReasons = kAllMissReasons.size();

// The stable lowercase name, e.g. "payload_checksum".
absl::string_view MissReasonName(MissReason reason);
// The reason whose MissReasonName is `name`; nullopt for any other text.
std::optional<MissReason> MissReasonFromName(absl::string_view name);

// A miss: the reason, and a sentence for humans saying what exactly was wrong.
struct Miss {
  MissReason reason;
  std::string detail;
};

}  // namespace lazyrt::cache
