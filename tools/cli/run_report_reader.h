// Reading a run report (LAZYRT_REPORT) that `lazyrt diag` was pointed at: a file from anywhere, so
// every size, type and depth in it is checked before use, and the errors name the file and the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace lazyrt::cli {

// Bounds on what a report may hold; no run writes near them.
inline constexpr uint64_t kMaxReportBytes = uint64_t{64} << 20;
inline constexpr int kMaxReportNesting = 64;
inline constexpr size_t kMaxReportFindings = 100000;
inline constexpr size_t kMaxFindingTextBytes = 64 << 10;
// No run syncs 2^40 times; the bound also keeps the sum of every finding's count within int64.
inline constexpr int64_t kMaxFindingCount = int64_t{1} << 40;

// One finding as a report holds it.
struct ReportFinding {
  std::string kind;
  std::string location;  // "" when absent
  int64_t count = 0;
  std::string message;  // "" when absent
  // The finding's object (key order kept), so --json can pass it through as written.
  nlohmann::ordered_json json;
};

// The findings of the run report at `path`. Reads only a regular file of at most kMaxReportBytes
// (a FIFO or a device is refused, not waited on), nested at most kMaxReportNesting deep, with at
// most kMaxReportFindings findings, each an object with a string "kind" (1 to 256 bytes), an integer
// "count" in [0, kMaxFindingCount], and, when present, "location" and "message" strings of at most
// kMaxFindingTextBytes. INVALID_ARGUMENT naming the file and the finding otherwise.
absl::StatusOr<std::vector<ReportFinding>> ReadReportFindings(const std::string& path);

// The text of a report value for a human: a string as it is, anything else as JSON. Never throws
// (bytes that are not UTF-8 are replaced).
std::string ReportText(const nlohmann::ordered_json& value);

// `value` as JSON text, with bytes that are not UTF-8 replaced rather than thrown on.
std::string DumpReportJson(const nlohmann::ordered_json& value, int indent);

}  // namespace lazyrt::cli
