#include "cache/miss_reason.h"

namespace lazyrt::cache {

absl::string_view MissReasonName(MissReason reason) {
  switch (reason) {
    case MissReason::kNotFound: return "not_found";
    case MissReason::kTruncated: return "truncated";
    case MissReason::kBadMagic: return "bad_magic";
    case MissReason::kFormatVersion: return "format_version";
    case MissReason::kProducerVersion: return "producer_version";
    case MissReason::kKeyMismatch: return "key_mismatch";
    case MissReason::kHeaderChecksum: return "header_checksum";
    case MissReason::kPayloadChecksum: return "payload_checksum";
    case MissReason::kDecompress: return "decompress";
    case MissReason::kUnloadable: return "unloadable";
    case MissReason::kUntrustedDirectory: return "untrusted_directory";
    case MissReason::kGraphMismatch: return "graph_mismatch";
    case MissReason::kKeyChanged: return "key_changed";
  }
  return "unknown";
}

std::optional<MissReason> MissReasonFromName(absl::string_view name) {
  for (MissReason reason : kAllMissReasons) {
    if (MissReasonName(reason) == name) return reason;
  }
  return std::nullopt;
}

}  // namespace lazyrt::cache
