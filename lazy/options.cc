#include "lazy/options.h"

#include <climits>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pjrt_sim/all_reduce_combiner.h"

extern char** environ;

namespace lazyrt {
namespace {

absl::StatusOr<bool> ParseBool(absl::string_view text) {
  const std::string v = absl::AsciiStrToLower(text);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a boolean (use 0 or 1)"));
}

template <typename T>
absl::StatusOr<T> ParseInt(absl::string_view text, T min, T max = std::numeric_limits<T>::max()) {
  T v;
  if (!absl::SimpleAtoi(text, &v) || v < min || v > max) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not an integer in [", min, ", ", max, "]"));
  }
  return v;
}

// Every device is a stream thread and a memory pool: more than this is a typo, not a machine.
constexpr int kMaxDevices = 1024;
// A simulated device's memory is host memory; more than this no host has.
constexpr int64_t kMaxDeviceMemory = int64_t{1} << 44;
// The highest LAZYRT_DEBUG level.
constexpr int kMaxDebugLevel = 3;
// The most kernels LAZYRT_KERNEL_PROFILE prints: more than any executable here has (the GPT's step ~200).
constexpr int64_t kMaxKernelRows = 1'000'000;

absl::StatusOr<int64_t> ParseAllReduceCombineBytes(absl::string_view text) {
  absl::StatusOr<int64_t> bytes = ParseByteSize(text);
  if (bytes.ok() && *bytes > pjrt::kMaxAllReduceCombineBytes) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is more than the largest bucket, 4G (0 to 4G)"));
  }
  return bytes;
}

absl::StatusOr<int64_t> ParseDeviceMemory(absl::string_view text) {
  absl::StatusOr<int64_t> bytes = ParseByteSize(text);
  if (bytes.ok() && *bytes > kMaxDeviceMemory) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is more than the 16T a simulated device can have"));
  }
  return bytes;
}

// A path: no NUL byte, shorter than PATH_MAX.
absl::StatusOr<std::string> ParsePath(absl::string_view t) {
  if (t.size() >= PATH_MAX || absl::StrContains(t, '\0')) {
    return absl::InvalidArgumentError(
        absl::StrCat("a path of ", t.size(), " bytes is not a valid path (at most ", PATH_MAX - 1, " bytes, no NUL)"));
  }
  return std::string(t);
}

// One row per setting: its environment name, what it means, how to parse it, how to print it.
struct Setting {
  absl::string_view name;
  absl::string_view help;
  std::function<absl::Status(Options&, absl::string_view)> parse;
  std::function<std::string(const Options&)> print;
};

template <typename T, typename Parser>
Setting Declare(absl::string_view name, absl::string_view help, T Options::*field, Parser parser) {
  return Setting{name, help,
                 [field, parser](Options& o, absl::string_view text) -> absl::Status {
                   auto parsed = parser(text);
                   if (!parsed.ok()) return parsed.status();
                   o.*field = static_cast<T>(*parsed);
                   return absl::OkStatus();
                 },
                 [field](const Options& o) -> std::string { return absl::StrCat(o.*field); }};
}

absl::StatusOr<double> ParseMs(absl::string_view t) {
  double v;
  if (!absl::SimpleAtod(t, &v) || !(v >= 0) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrCat("'", t, "' is not a finite number of milliseconds >= 0"));
  }
  return v;
}

// A bounded wait: at most a day, which no compile takes (a typo such as an extra zero is refused).
constexpr double kMaxWaitMs = 86'400'000;

absl::StatusOr<double> ParseWaitMs(absl::string_view t) {
  absl::StatusOr<double> ms = ParseMs(t);
  if (ms.ok() && *ms > kMaxWaitMs) {
    return absl::InvalidArgumentError(absl::StrCat("'", t, "' is more than a day (", kMaxWaitMs, " ms)"));
  }
  return ms;
}

const std::vector<Setting>& Settings() {
  static const std::vector<Setting> settings = {
      Declare("LAZYRT_DEVICES", "number of simulated devices", &Options::devices,
              [](absl::string_view t) { return ParseInt<int>(t, 1, kMaxDevices); }),
      Declare("LAZYRT_DEVICE_MEMORY", "memory per device, e.g. 16G", &Options::device_memory_bytes, ParseDeviceMemory),
      Declare("LAZYRT_SPECIAL_SCALARS", "bake host scalars 0 and 1 into graphs (0/1)", &Options::special_scalars,
              ParseBool),
      Declare("LAZYRT_SEED", "seed of the device random number generator", &Options::seed,
              [](absl::string_view t) { return ParseInt<uint64_t>(t, 0); }),
      Declare("LAZYRT_GRAPH_LIMIT", "sync after this many traced ops without a sync (0: never)", &Options::graph_limit,
              [](absl::string_view t) { return ParseInt<int64_t>(t, 0); }),
      Declare("LAZYRT_COLLECTIVE_TIMEOUT_MS", "how long a partition waits at a collective for the others",
              &Options::collective_timeout_ms, ParseMs),
      Declare("LAZYRT_ALL_REDUCE_COMBINE_BYTES",
              "combine a step's independent all-reduces into collectives of up to this size, e.g. 32M (0: never)",
              &Options::all_reduce_combine_bytes, ParseAllReduceCombineBytes),
      Declare("LAZYRT_RANK", "this process's rank in a job of LAZYRT_WORLD_SIZE processes", &Options::rank,
              [](absl::string_view t) { return ParseInt<int>(t, 0, kMaxProcesses - 1); }),
      Declare("LAZYRT_WORLD_SIZE", "the number of processes of the job", &Options::world_size,
              [](absl::string_view t) { return ParseInt<int>(t, 1, kMaxProcesses); }),
      Declare("LAZYRT_COORDINATOR", "where the processes of a job meet: file:///shared/dir", &Options::coordinator,
              ParsePath),
      Declare("LAZYRT_PERSISTENT_CACHE", "use the persistent executable cache (0/1)", &Options::persistent_cache,
              ParseBool),
      Declare("LAZYRT_CACHE_DIR", "directory of the persistent cache", &Options::cache_dir, ParsePath),
      Declare("LAZYRT_GEMM_TUNING_FILE", "the machine's record of the fastest GEMM library per shape",
              &Options::gemm_tuning_file, ParsePath),
      Declare("LAZYRT_CACHE_READ_ONLY", "use cache entries but never write (0/1)", &Options::cache_read_only,
              ParseBool),
      Declare("LAZYRT_CACHE_MAX_BYTES", "evict the cache down to this size, e.g. 10G (0: no limit)",
              &Options::cache_max_bytes, ParseByteSize),
      Declare("LAZYRT_CACHE_MIN_COMPILE_MS", "do not store results that compiled faster than this",
              &Options::cache_min_compile_ms, ParseMs),
      Declare("LAZYRT_COMPILE_WAIT_MS",
              "how long to wait for another process compiling the same graph before compiling it here (at most a "
              "day)",
              &Options::compile_wait_ms, ParseWaitMs),
      Declare("LAZYRT_DEBUG",
              "diagnostics: 0 off, 1 analysis at exit, 2 also a line per sync, 3 also device time by kernel",
              &Options::debug, [](absl::string_view t) { return ParseInt<int>(t, 0, kMaxDebugLevel); }),
      Declare("LAZYRT_DEBUG_FILE", "where diagnostics go instead of stderr", &Options::debug_file, ParsePath),
      Declare("LAZYRT_KERNEL_PROFILE", "time every kernel and print the N longest at exit (0: off)",
              &Options::kernel_profile, [](absl::string_view t) { return ParseInt<int64_t>(t, 0, kMaxKernelRows); }),
      Declare("LAZYRT_KERNEL_PROFILE_RERUNS",
              "with the kernel profile (LAZYRT_KERNEL_PROFILE=N or LAZYRT_DEBUG=3), run each kernel again at once and "
              "time that too (0/1)",
              &Options::kernel_profile_reruns, ParseBool),
      Declare("LAZYRT_REPORT", "write the run report (JSON) to this file at exit", &Options::report, ParsePath),
      Declare("LAZYRT_TRACE", "write a Chrome trace to this file at exit", &Options::trace, ParsePath),
  };
  return settings;
}

}  // namespace

absl::Status Options::Set(absl::string_view name, absl::string_view value) {
  for (const Setting& s : Settings()) {
    if (s.name != name) continue;
    absl::Status status = s.parse(*this, value);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, "=", value, ": ", status.message(), " (", s.help, ")"));
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown setting ", name, "; the valid settings are ", ValidNames()));
}

absl::StatusOr<Options> Options::FromEnvironment() {
  Options options;
  for (char** env = environ; env != nullptr && *env != nullptr; ++env) {
    absl::string_view entry(*env);
    if (!absl::StartsWith(entry, "LAZYRT_")) continue;
    const size_t eq = entry.find('=');
    absl::Status status = options.Set(entry.substr(0, eq), eq == absl::string_view::npos ? "" : entry.substr(eq + 1));
    if (!status.ok()) return status;
  }
  if (absl::Status status = options.Check(); !status.ok()) return status;
  return options;
}

absl::Status Options::Check() const {
  if (kernel_profile_reruns && kernel_profile <= 0 && debug < 3) {
    return absl::InvalidArgumentError(
        "LAZYRT_KERNEL_PROFILE_RERUNS=1 (kernel_profile_reruns) adds to the kernel profile, which is off: set "
        "LAZYRT_KERNEL_PROFILE=N (kernel_profile) or LAZYRT_DEBUG=3 (debug) too");
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, std::string>> Options::Resolved() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Setting& s : Settings()) out.emplace_back(std::string(s.name), s.print(*this));
  return out;
}

std::string Options::ValidNames() {
  std::vector<absl::string_view> names;
  for (const Setting& s : Settings()) names.push_back(s.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < t.size() && (absl::ascii_isdigit(t[digits]) || t[digits] == '.')) ++digits;
  double number;
  if (digits == 0 || !absl::SimpleAtod(t.substr(0, digits), &number)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a size (e.g. 512M, 10G)"));
  }
  std::string unit = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(t.substr(digits)));
  if (unit.ends_with("IB")) unit.erase(unit.size() - 2);
  if (unit.size() == 2 && unit.back() == 'B') unit.pop_back();
  int shift = 0;
  if (unit == "" || unit == "B") {
    shift = 0;
  } else if (unit == "K") {
    shift = 10;
  } else if (unit == "M") {
    shift = 20;
  } else if (unit == "G") {
    shift = 30;
  } else if (unit == "T") {
    shift = 40;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' has an unknown unit (use B, K, M, G or T)"));
  }
  const double bytes = std::ldexp(number, shift);
  if (bytes >= 9.2e18) return absl::InvalidArgumentError(absl::StrCat("'", text, "' is too large"));
  return static_cast<int64_t>(bytes);
}

}  // namespace lazyrt
