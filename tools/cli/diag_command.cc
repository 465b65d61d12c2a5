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
constexpr const char* kDetailFields[] = {"cause", "what", "before", "now"};

// Read and validated by run_report_reader.h.
using Finding = ReportFinding;

struct FindingGroup {
  std::string kind;
  int64_t total = 0;
  std::vector<Finding> findings;
};

std::string StringField(const Json& object, const char* name) {
  auto it = object.find(name);
  return it == object.end() ? "" : ReportText(*it);
}

// Groups by kind. The worst first: groups by how often their kind occurred in all, findings within
// a group by count; ties by name and location, so the order never depends on the report's.
std::vector<FindingGroup> GroupWorstFirst(std::vector<Finding> findings) {
  std::map<std::string, FindingGroup> by_kind;
  for (Finding& finding : findings) {
    FindingGroup& group = by_kind[finding.kind];
    group.kind = finding.kind;
    group.total += finding.count;  // kMaxReportFindings x kMaxFindingCount < 2^57: no overflow
    group.findings.push_back(std::move(finding));
  }
  std::vector<FindingGroup> groups;
  for (auto& [kind, group] : by_kind) {
    std::stable_sort(group.findings.begin(), group.findings.end(), [](const Finding& a, const Finding& b) {
      return a.count != b.count ? a.count > b.count : a.location < b.location;
    });
    groups.push_back(std::move(group));
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const FindingGroup& a, const FindingGroup& b) { return a.total > b.total; });
  return groups;
}

void PrintGroups(const std::string& path, const std::vector<FindingGroup>& groups, size_t count) {
  std::cout << count << (count == 1 ? " finding" : " findings") << " in " << path << ", worst first\n";
  for (const FindingGroup& group : groups) {
    std::cout << '\n'
              << group.kind << ": " << group.total << (group.total == 1 ? " time" : " times") << " at "
              << group.findings.size() << (group.findings.size() == 1 ? " place" : " places") << '\n';
    size_t location_width = 0, count_width = 0;
    for (const Finding& finding : group.findings) {
      location_width = std::max(location_width, finding.location.size());
      count_width = std::max(count_width, absl::StrCat(finding.count).size());
    }
    for (const Finding& finding : group.findings) {
      const std::string count_text = absl::StrCat(finding.count, "x");
      std::cout << "  " << finding.location << std::string(location_width - finding.location.size(), ' ')
                << std::string(count_width + 3 - count_text.size(), ' ') << count_text << "  "
                << finding.message << '\n';
      std::vector<std::string> details;
      for (const char* field : kDetailFields) {
        if (finding.json.contains(field)) {
          details.push_back(absl::StrCat(field, ": ", StringField(finding.json, field)));
        }
      }
      if (!details.empty()) {
        std::cout << std::string(2 + location_width + count_width + 3 + 2, ' ')
                  << absl::StrJoin(details, "; ") << '\n';
      }
    }
  }
}

int RunDiag(const Args& args) {
  const std::string& path = args.positionals()[0];
  absl::StatusOr<std::vector<Finding>> findings = ReadReportFindings(path);
  if (!findings.ok()) return Fail(findings.status());
  const size_t count = findings->size();
  const std::vector<FindingGroup> groups = GroupWorstFirst(*std::move(findings));

  if (args.flag("--json")) {
    Json sorted = Json::array();
    for (const FindingGroup& group : groups) {
      for (const Finding& finding : group.findings) sorted.push_back(finding.json);
    }
    std::cout << DumpReportJson(Json{{"findings", std::move(sorted)}}, 2) << '\n';
  } else if (count == 0) {
    std::cout << "no findings in " << path << '\n';
  } else {
    PrintGroups(path, groups, count);
  }
  return count == 0 ? kExitOk : kExitFindings;
}

}  // namespace

Command DiagCommand() {
  return {{.name = "diag",
           .summary = "the findings of a run report (extra syncs, recompiles), worst first",
           .usage =
               "usage: lazyrt diag REPORT.json [--json]\n"
               "\n"
               "Reads a run report and prints its findings for a human: grouped by kind (extra_sync,\n"
               "recompile, ...), the kind that occurred most often first, each finding with the\n"
               "file:line it points at, how many times it occurred and what it means (and, when the\n"
               "report says, what caused it and what changed). Exit status 1 when there are findings,\n"
               "0 when there are none, 2 when the report cannot be read.\n"
               "\n"
               "  --json        {\"findings\": [...]}: the report's findings as written, in the same order\n",
           .flags = {"--json"},
           .arguments = {"REPORT.json"}},
          RunDiag};
}

}  // namespace lazyrt::cli
