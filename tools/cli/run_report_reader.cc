#include "tools/cli/run_report_reader.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "cache/file_io.h"
#include "pjrt_sim/status_macros.h"

namespace lazyrt::cli {
namespace {

using Json = nlohmann::ordered_json;

// How deeply `text` nests arrays and objects, counted outside strings; stops past `limit`. The JSON
// parser and the destruction of what it builds recurse once per level, so a report of a million
// '[' would overflow the stack before any other check could run.
int NestingDepth(const std::string& text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

absl::Status FindingError(const std::string& path, size_t index, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": finding ", index, " ", what));
}

absl::StatusOr<std::string> OptionalText(const Json& finding, const char* name, const std::string& path, size_t index) {
  auto it = finding.find(name);
  if (it == finding.end() || it->is_null()) return std::string();
  if (!it->is_string() || it->get_ref<const std::string&>().size() > kMaxFindingTextBytes) {
    return FindingError(
        path, index,
        absl::StrCat("has a \"", name, "\" that is not a string of at most ", kMaxFindingTextBytes, " bytes"));
  }
  return it->get<std::string>();
}

}  // namespace

std::string DumpReportJson(const Json& value, int indent) {
  return value.dump(indent, ' ', false, Json::error_handler_t::replace);
}

std::string ReportText(const Json& value) {
  if (!value.is_string()) return DumpReportJson(value, -1);
  // Through dump and back, so that bytes that are not UTF-8 are replaced as everywhere else.
  const std::string quoted = DumpReportJson(value, -1);
  const Json clean = Json::parse(quoted, nullptr, /*allow_exceptions=*/false);
  return clean.is_string() ? clean.get<std::string>() : quoted;
}

absl::StatusOr<std::vector<ReportFinding>> ReadReportFindings(const std::string& path) {
  // The cache's file helpers: a regular file, never a symlink's surprise of a FIFO or a device.
  cache::UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  struct stat info;
  if (!fd.valid() || fstat(fd.get(), &info) != 0) return cache::ErrnoError(errno, "cannot read run report", path);
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file, so not a run report"));
  }
  if (static_cast<uint64_t>(info.st_size) > kMaxReportBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", info.st_size, " bytes; a run report is at most ", kMaxReportBytes));
  }
  ASSIGN_OR_RETURN(std::string text, cache::ReadRange(fd.get(), 0, static_cast<uint64_t>(info.st_size), path));
  if (NestingDepth(text, kMaxReportNesting) > kMaxReportNesting) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " nests deeper than ", kMaxReportNesting, " levels, so it is not a run report"));
  }
  const Json report = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, " is not JSON"));
  if (!report.is_object() || !report.contains("findings") || !report.at("findings").is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a run report: it has no \"findings\" array"));
  }
  const Json& list = report.at("findings");
  if (list.size() > kMaxReportFindings) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " has ", list.size(), " findings; a run report has at most ", kMaxReportFindings));
  }
  std::vector<ReportFinding> findings;
  for (size_t index = 0; index < list.size(); ++index) {
    const Json& json = list[index];
    if (!json.is_object()) return FindingError(path, index, "is not an object");
    auto kind = json.find("kind");
    if (kind == json.end() || !kind->is_string() || kind->get_ref<const std::string&>().empty() ||
        kind->get_ref<const std::string&>().size() > 256) {
      return FindingError(path, index, "needs a string \"kind\" of 1 to 256 bytes");
    }
    auto count = json.find("count");
    if (count == json.end() || !count->is_number_integer() ||
        (count->is_number_unsigned() ? count->get<uint64_t>() > static_cast<uint64_t>(kMaxFindingCount)
                                     : (count->get<int64_t>() < 0 || count->get<int64_t>() > kMaxFindingCount))) {
      return FindingError(path, index, absl::StrCat("needs an integer \"count\" from 0 to ", kMaxFindingCount));
    }
    ASSIGN_OR_RETURN(std::string location, OptionalText(json, "location", path, index));
    ASSIGN_OR_RETURN(std::string message, OptionalText(json, "message", path, index));
    findings.push_back(ReportFinding{.kind = ReportText(*kind),
                                     .location = ReportText(Json(std::move(location))),
                                     .count = count->get<int64_t>(),
                                     .message = ReportText(Json(std::move(message))),
                                     .json = json});
  }
  return findings;
}

}  // namespace lazyrt::cli
