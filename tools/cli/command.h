// What every lazyrt command shares: its options, parsing them, --help, and the exit codes.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace lazyrt::cli {

// The exit codes every command keeps to, so scripts can tell "it ran and found problems" from
// "it could not run".
inline constexpr int kExitOk = 0;
inline constexpr int kExitFindings = 1;  // findings in a report, bad cache entries
inline constexpr int kExitError = 2;     // usage or I/O error; the reason is on stderr

// What a command accepts. Options are "--name VALUE" (or "--name=VALUE") when listed in
// `value_options`, bare "--name" when listed in `flags`; anything else is a usage error.
struct CommandSpec {
  std::string name = {};     // as typed: "cache ls"
  std::string summary = {};  // one line, for the parent's --help
  std::string usage = {};    // the whole --help text
  std::vector<std::string> value_options = {};
  std::vector<std::string> flags = {};
  // Value options that must be given.
  std::vector<std::string> required_options = {};
  // The names of the arguments, all required, in order ("KEY").
  std::vector<std::string> arguments = {};
};

class Args {
 public:
  bool flag(absl::string_view name) const { return flags_.contains(name); }
  // The value given for a value option, if it was given.
  std::optional<std::string> value(absl::string_view name) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  friend class ArgsParser;
  std::set<std::string, std::less<>> flags_;
  std::map<std::string, std::string, std::less<>> values_;
  std::vector<std::string> positionals_;
};

struct Command {
  CommandSpec spec;
  // Runs with parsed arguments; returns the exit code. Prints its own errors.
  int (*run)(const Args& args);
};

// Parses `argv` (the words after the command's name) for `command` and runs it: --help prints the
// usage to stdout (exit 0), a usage error prints the reason and a pointer to --help (exit 2).
int RunCommand(const Command& command, std::span<char* const> argv);

// For a command with subcommands ("cache"): picks the subcommand named by argv[0] and runs it.
// No subcommand or --help prints `usage` followed by the subcommands' summaries.
int RunSubcommand(absl::string_view name, absl::string_view usage, std::span<const Command> commands,
                  std::span<char* const> argv);

// Prints "lazyrt: <message>" to stderr and returns kExitError.
int Fail(const absl::Status& status);
int Fail(absl::string_view message);

// A usage error of `command`: the reason, and where to find the usage; returns kExitError.
int UsageError(absl::string_view command, absl::string_view message);

// The one-line summaries of `commands`, aligned under a "commands:" heading, for a --help text.
std::string CommandList(std::span<const Command> commands);

}  // namespace lazyrt::cli
