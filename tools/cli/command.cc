#include "tools/cli/command.h"

#include <algorithm>
#include <iostream>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace lazyrt::cli {

std::optional<std::string> Args::value(absl::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

class ArgsParser {
 public:
  static absl::StatusOr<Args> Parse(const CommandSpec& spec, std::span<char* const> argv) {
    Args args;
    bool options_ended = false;
    for (size_t i = 0; i < argv.size(); ++i) {
      const std::string word = argv[i];
      if (options_ended || !absl::StartsWith(word, "-") || word == "-") {
        args.positionals_.push_back(word);
        continue;
      }
      if (word == "--") {
        options_ended = true;
        continue;
      }
      const size_t eq = word.find('=');
      const std::string name = word.substr(0, eq);
      if (Lists(spec.flags, name)) {
        if (eq != std::string::npos) return absl::InvalidArgumentError(absl::StrCat(name, " takes no value"));
        args.flags_.insert(name);
      } else if (Lists(spec.value_options, name)) {
        std::string value;
        if (eq != std::string::npos) {
          value = word.substr(eq + 1);
        } else if (i + 1 < argv.size()) {
          value = argv[++i];
        } else {
          return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
        }
        // A repeated option is more likely a mistake than an override: refuse rather than guess.
        if (!args.values_.emplace(name, std::move(value)).second) {
          return absl::InvalidArgumentError(absl::StrCat(name, " given twice"));
        }
      } else {
        return absl::InvalidArgumentError(absl::StrCat("unknown option ", name));
      }
    }
    for (const std::string& name : spec.required_options) {
      if (!args.values_.contains(name)) return absl::InvalidArgumentError(absl::StrCat(name, " is required"));
    }
    const size_t n = args.positionals_.size();
    if (n < spec.arguments.size()) {
      return absl::InvalidArgumentError(absl::StrCat("missing ", spec.arguments[n]));
    }
    if (n > spec.arguments.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", args.positionals_[spec.arguments.size()], "'"));
    }
    return args;
  }

 private:
  static bool Lists(const std::vector<std::string>& names, absl::string_view name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  }
};

namespace {

bool IsHelp(absl::string_view word) { return word == "--help" || word == "-h"; }

}  // namespace

int RunCommand(const Command& command, std::span<char* const> argv) {
  // --help wins over everything else on the line, so a half-typed command can still ask for help.
  for (char* word : argv) {
    if (IsHelp(word)) {
      std::cout << command.spec.usage;
      return kExitOk;
    }
    if (absl::string_view(word) == "--") break;
  }
  absl::StatusOr<Args> args = ArgsParser::Parse(command.spec, argv);
  if (!args.ok()) return UsageError(command.spec.name, args.status().message());
  return command.run(*args);
}

int RunSubcommand(absl::string_view name, absl::string_view usage, std::span<const Command> commands,
                  std::span<char* const> argv) {
  if (argv.empty() || IsHelp(argv[0])) {
    (argv.empty() ? std::cerr : std::cout) << usage << '\n' << CommandList(commands);
    return argv.empty() ? kExitError : kExitOk;
  }
  const absl::string_view wanted = argv[0];
  for (const Command& command : commands) {
    if (command.spec.name == absl::StrCat(name, " ", wanted)) return RunCommand(command, argv.subspan(1));
  }
  return UsageError(name, absl::StrCat("unknown command '", wanted, "'"));
}

int Fail(const absl::Status& status) { return Fail(status.message()); }

int Fail(absl::string_view message) {
  std::cerr << "lazyrt: " << message << '\n';
  return kExitError;
}

int UsageError(absl::string_view command, absl::string_view message) {
  std::cerr << "lazyrt " << command << ": " << message << "\n(run 'lazyrt " << command << " --help' for usage)\n";
  return kExitError;
}

std::string CommandList(std::span<const Command> commands) {
  size_t width = 0;
  for (const Command& command : commands) width = std::max(width, command.spec.name.size());
  std::string text = "commands:\n";
  for (const Command& command : commands) {
    absl::StrAppend(&text, "  ", command.spec.name, std::string(width - command.spec.name.size() + 2, ' '),
                    command.spec.summary, "\n");
  }
  return text;
}

}  // namespace lazyrt::cli
