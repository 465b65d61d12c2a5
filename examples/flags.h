// The examples' command-line values: each bounded, each error naming the flag, what it takes and what it
// got, then the usage, exit status 2; and the runtime's options with the flags that override them.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lazy/options.h"
#include "lazy/runtime.h"

namespace lazyrt::examples {

class FlagParser {
 public:
  FlagParser(const char* program, const char* usage) : program_(program), usage_(usage) {}

  [[noreturn]] void Fail(const std::string& error) const {
    std::fprintf(stderr, "%s: %s\n%s", program_, error.c_str(), usage_);
    std::exit(2);
  }

  int64_t Integer(const std::string& flag, const std::string& value, int64_t min, int64_t max) const {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno == ERANGE || v < min || v > max) {
      Fail(absl::StrCat(flag, " needs an integer from ", min, " to ", max, ", got '", value, "'"));
    }
    return static_cast<int64_t>(v);
  }

  double Real(const std::string& flag, const std::string& value, double min, double max) const {
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(v) || v < min || v > max) {
      Fail(absl::StrCat(flag, " needs a number from ", min, " to ", max, ", got '", value, "'"));
    }
    return v;
  }

  // `value` if it is one of `choices`.
  std::string Choice(const std::string& flag, const std::string& value,
                     std::initializer_list<const char*> choices) const {
    for (const char* c : choices) {
      if (value == c) return value;
    }
    Fail(absl::StrCat(flag, " is ", absl::StrJoin(choices, " or "), ", got '", value, "'"));
  }

 private:
  const char* program_;
  const char* usage_;
};

// Configures the runtime from the environment (LAZYRT_*), with the flags --cache-dir and --report (when
// given) over it. False after printing why the environment is refused.
// `devices` > 0: that many simulated devices (a mesh's), whatever LAZYRT_DEVICES says.
inline bool ConfigureRuntime(const char* program, const std::string& cache_dir, const std::string& report,
                             int devices = 0) {
  absl::StatusOr<Options> options = Options::FromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "%s: %s\n", program, std::string(options.status().message()).c_str());
    return false;
  }
  if (!cache_dir.empty()) options->cache_dir = cache_dir;
  if (!report.empty()) options->report = report;
  if (devices > 0) options->devices = devices;
  configure(*options);
  return true;
}

}  // namespace lazyrt::examples
