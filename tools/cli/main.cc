// lazyrt: the operator's command-line tool. Dispatches to the command groups; each command parses
// its own options (tools/cli/command.h).
#include <iostream>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "cache/entry_format.h"
#include "pjrt_sim/executable.h"
#include "pjrt_sim/version.h"
#include "tools/cli/cache_commands.h"
#include "tools/cli/command.h"
#include "tools/cli/diag_command.h"

namespace lazyrt::cli {
namespace {

int RunVersion(const Args&) {
  std::cout << "lazyrt " << LAZYRT_VERSION << '\n'
            << "compiler " << pjrt::kCompilerVersion << '\n'
            << "executable format " << pjrt::Executable::kFormatVersion << '\n'
            << "cache entry format " << cache::kEntryFormatVersion << '\n';
  return kExitOk;
}

Command VersionCommand() {
  return {{.name = "version",
           .summary = "the versions of lazyrt, its compiler and its cache format",
           .usage = "usage: lazyrt version\n"
                    "\n"
                    "Prints the lazyrt version, the compiler version and the executable and cache entry\n"
                    "formats. Cache entries written by another compiler or format version are misses.\n"},
          RunVersion};
}

std::string Usage() {
  const Command diag = DiagCommand();
  const Command version = VersionCommand();
  return absl::StrCat(
      "usage: lazyrt <command> [options]    (lazyrt <command> --help for each)\n"
      "\n"
      "commands:\n"
      "  cache       ",
      kCacheSummary, "\n",
      "                ls, show, stats, verify, gc, clear\n"
      "  diag        ",
      diag.spec.summary, "\n", "  version     ", version.spec.summary, "\n",
      "\n"
      "Exit status: 0 ok, 1 findings or bad cache entries, 2 usage or I/O error (reason on stderr).\n");
}

int Main(std::span<char* const> argv) {
  if (argv.empty()) {
    std::cerr << Usage();
    return kExitError;
  }
  const std::string command = argv[0];
  const std::span<char* const> rest = argv.subspan(1);
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << Usage();
    return kExitOk;
  }
  if (command == "cache") return RunCacheCommand(rest);
  if (command == "diag") return RunCommand(DiagCommand(), rest);
  if (command == "version" || command == "--version") return RunCommand(VersionCommand(), rest);
  std::cerr << "lazyrt: unknown command '" << command << "'\n(run 'lazyrt --help' for usage)\n";
  return kExitError;
}

}  // namespace
}  // namespace lazyrt::cli

int main(int argc, char** argv) { return lazyrt::cli::Main(std::span<char* const>(argv + 1, argc - 1)); }
