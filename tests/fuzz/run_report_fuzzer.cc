// Fuzzes reading the run reports `lazyrt diag` is pointed at (tools/cli/run_report_reader.h): the
// input is written to a file and read back. Checked, besides never crashing, hanging or allocating
// without bound: what is accepted obeys the documented bounds, and every accepted finding prints
// (ReportText, DumpReportJson) without throwing, whatever bytes its strings hold.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "tests/fuzz/fuzz_execution.h"
#include "tools/cli/run_report_reader.h"

namespace lazyrt::fuzz {
namespace {

constexpr const char* kName = "run_report_fuzzer";

FuzzStats& Stats() {
  static FuzzStats* stats = new FuzzStats(kName, {"accepted", "with findings"});
  return *stats;
}

const std::string& ScratchFile() {
  static const std::string* path = [] {
    std::string name = "/tmp/lazyrt-report-fuzz-XXXXXX";
    const int fd = mkstemp(name.data());
    if (fd < 0) Violation(kName, "mkstemp failed");
    close(fd);
    auto* p = new std::string(name);
    std::atexit([] { unlink(ScratchFile().c_str()); });
    return p;
  }();
  return *path;
}

void Check(const std::string& bytes) {
  {
    std::ofstream out(ScratchFile(), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.good()) Violation(kName, "cannot write the scratch file");
  }
  absl::StatusOr<std::vector<cli::ReportFinding>> findings = cli::ReadReportFindings(ScratchFile());
  if (!findings.ok()) {
    if (!absl::StrContains(findings.status().message(), ScratchFile())) {
      Violation(kName, "an error that does not name the file: " + std::string(findings.status().message()));
    }
    return;
  }
  Stats().Count(0);
  if (findings->size() > cli::kMaxReportFindings) Violation(kName, "too many findings accepted");
  if (!findings->empty()) Stats().Count(1);
  for (const cli::ReportFinding& f : *findings) {
    if (f.count < 0 || f.count > cli::kMaxFindingCount) Violation(kName, "a count out of bounds accepted");
    if (f.kind.empty()) Violation(kName, "an empty kind accepted");
    const std::string text = cli::DumpReportJson(f.json, 2) + cli::ReportText(f.json);
    if (text.empty()) Violation(kName, "a finding printed as nothing");
  }
}

}  // namespace
}  // namespace lazyrt::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lazyrt::fuzz::Check(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
