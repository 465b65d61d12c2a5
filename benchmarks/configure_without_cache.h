// Configures the runtime of a benchmark program from the environment, with the persistent cache off:
// every compile a benchmark makes is a measurement (or happens outside the timed region), so nothing
// may come from, or go to, a user's cache directory.
#pragma once

#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "lazy/options.h"
#include "lazy/runtime.h"

namespace lazyrt::bench {

// False (after saying why on stderr, as `program: ...`) when a LAZYRT_* setting is invalid.
inline bool ConfigureWithoutPersistentCache(const char* program) {
  absl::StatusOr<Options> options = Options::FromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "%s: %s\n", program, std::string(options.status().message()).c_str());
    return false;
  }
  options->persistent_cache = false;
  configure(*options);
  return true;
}

}  // namespace lazyrt::bench
