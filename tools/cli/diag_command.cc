#include "tools/cli/diag_command.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tools/cli/run_report_reader.h"

namespace lazyrt::cli {
namespace {

// Keeps the report's own key order, so --json passes each finding through as written.
using Json = nlohmann::ordered_json;

// The optional fields a finding may carry about what changed, in the order they read best.
constexpr const char* kDetailFields[] = {"cause",    "what",   "before",     "now",   "sync_site",
                                         "sharding", "needed", "suggestion", "stack", "also_at"};

// How bad a finding is; a report written before findings had a severity says nothing, and every
// finding of it counts as a warning.
enum class Severity { kInfo, kWarning };

// Read and validated by run_report_reader.h.
using Finding = ReportFinding;

struct FindingGroup {
  Severity severity = Severity::kWarning;
  std::string kind;
  int64_t total = 0;
  std::vector<Finding> findings;
};

std::string StringField(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return "";
  if (it->is_array()) {
    // A list of places (a call stack, other sites): innermost or first first.
    std::vector<std::string> items;
    for (const Json& item : *it) items.push_back(ReportText(item));
    return absl::StrJoin(items, " <- ");
  }
  return ReportText(*it);
}

Severity SeverityOf(const Finding& finding) {
  return StringField(finding.json, "severity") == "info" ? Severity::kInfo : Severity::kWarning;
}

// Groups by severity and kind. The worst first: warnings before information, then groups by how often
// their kind occurred in all, findings within a group by count; ties by name and location, so the order
// never depends on the report's.
std::vector<FindingGroup> GroupWorstFirst(std::vector<Finding> findings) {
  std::map<std::pair<Severity, std::string>, FindingGroup> by_kind;
  for (Finding& finding : findings) {
    const Severity severity = SeverityOf(finding);
    FindingGroup& group = by_kind[{severity, finding.kind}];
    group.severity = severity;
    group.kind = finding.kind;
    group.total += finding.count;  // kMaxReportFindings x kMaxFindingCount < 2^57: no overflow
    group.findings.push_back(std::move(finding));
  }
  std::vector<FindingGroup> groups;
  for (auto& [key, group] : by_kind) {
    std::stable_sort(group.findings.begin(), group.findings.end(), [](const Finding& a, const Finding& b) {
      return a.count != b.count ? a.count > b.count : a.location < b.location;
    });
    groups.push_back(std::move(group));
  }
  std::stable_sort(groups.begin(), groups.end(), [](const FindingGroup& a, const FindingGroup& b) {
    return a.severity != b.severity ? a.severity > b.severity : a.total > b.total;
  });
  return groups;
}

void PrintGroups(const std::string& path, const std::vector<FindingGroup>& groups, size_t count) {
  std::cout << count << (count == 1 ? " finding" : " findings") << " in " << path << ", worst first\n";
  for (const FindingGroup& group : groups) {
    std::cout << '\n'
              << group.kind << (group.severity == Severity::kWarning ? " (warning)" : " (information)") << ": "
              << group.total << (group.total == 1 ? " time" : " times") << " at " << group.findings.size()
              << (group.findings.size() == 1 ? " place" : " places") << '\n';
    size_t location_width = 0, count_width = 0;
    for (const Finding& finding : group.findings) {
      location_width = std::max(location_width, finding.location.size());
      count_width = std::max(count_width, absl::StrCat(finding.count).size());
    }
    for (const Finding& finding : group.findings) {
      const std::string count_text = absl::StrCat(finding.count, "x");
      std::cout << "  " << finding.location << std::string(location_width - finding.location.size(), ' ')
                << std::string(count_width + 3 - count_text.size(), ' ') << count_text << "  " << finding.message
                << '\n';
      std::vector<std::string> details;
      for (const char* field : kDetailFields) {
        if (!StringField(finding.json, field).empty()) {
          details.push_back(absl::StrCat(field, ": ", StringField(finding.json, field)));
        }
      }
      if (!details.empty()) {
        std::cout << std::string(2 + location_width + count_width + 3 + 2, ' ') << absl::StrJoin(details, "; ") << '\n';
      }
    }
  }
}

int RunDiag(const Args& args) {
  const std::string& path = args.positionals()[0];
  absl::StatusOr<std::vector<Finding>> findings = ReadReportFindings(path);
  if (!findings.ok()) return Fail(findings.status());
  const size_t count = findings->size();
  const bool warnings = std::any_of(findings->begin(), findings->end(),
                                    [](const Finding& f) { return SeverityOf(f) == Severity::kWarning; });

  if (args.flag("--json")) {
    // As documented: the report's findings as written, in the report's order.
    Json list = Json::array();
    for (const Finding& finding : *findings) list.push_back(finding.json);
    std::cout << DumpReportJson(Json{{"findings", std::move(list)}}, 2) << '\n';
  } else if (count == 0) {
    std::cout << "no findings in " << path << '\n';
  } else {
    PrintGroups(path, GroupWorstFirst(*std::move(findings)), count);
  }
  // Information alone (a single recompile, an intended barrier) is not a failure.
  return warnings ? kExitFindings : kExitOk;
}

}  // namespace

Command DiagCommand() {
  return {
      {.name = "diag",
       .summary = "the findings of a run report (extra syncs, recompiles, reshardings), worst first",
       .usage = "usage: lazyrt diag REPORT.json [--json]\n"
                "\n"
                "Reads a run report and prints its findings for a human: warnings first, then information;\n"
                "within each, grouped by kind (extra_sync, host_wait, recompile, resharding), the kind that occurred\n"
                "most often first, each finding with the file:line it points at, how many times it\n"
                "occurred and what it means (and, when the report says, what caused it, what changed, the\n"
                "sync site and the call stack). Exit status 1 when there is a warning, 0 when there are\n"
                "only information findings or none, 2 when the report cannot be read.\n"
                "\n"
                "  --json        {\"findings\": [...]}: the report's findings as written, in the same order\n",
       .flags = {"--json"},
       .arguments = {"REPORT.json"}},
      RunDiag};
}

}  // namespace lazyrt::cli
