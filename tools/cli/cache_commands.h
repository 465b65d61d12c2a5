// "lazyrt cache ...": what is in the persistent cache, what hit and missed, whether anything is
// damaged, and making room.
#pragma once

#include <span>

#include "tools/cli/command.h"

namespace lazyrt::cli {

// The summary line of the "cache" group, for the top-level --help.
inline constexpr absl::string_view kCacheSummary = "inspect, check and trim the persistent executable cache";

// Runs "lazyrt cache <argv...>".
int RunCacheCommand(std::span<char* const> argv);

// "cache show", which has a file of its own.
Command CacheShowCommand();

}  // namespace lazyrt::cli
