// Where the cache directory is, creating it, and whether its contents may be trusted: an entry is
// input the executor runs, so a directory others can write to must not feed it.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lazyrt::cache {

// The cache directory: `explicit_dir` (from --cache-dir or Options) if non-empty, else
// $LAZYRT_CACHE_DIR, else $XDG_CACHE_HOME/lazyrt, else $HOME/.cache/lazyrt. An empty variable counts
// as unset, and so does a relative XDG_CACHE_HOME (as the XDG spec says). FAILED_PRECONDITION when
// none of them is set.
absl::StatusOr<std::string> ResolveCacheDir(absl::string_view explicit_dir);

// Creates `dir` and its missing parents with mode 0700; directories that exist are left as they are.
absl::Status CreateCacheDir(absl::string_view dir);

struct DirectoryTrust {
  bool trusted = false;
  // Why not, for the user, when not trusted.
  std::string warning;
};

// Trusted when `dir` is owned by this process's effective user and writable by no one else
// (neither group nor others). An error when `dir` cannot be examined.
absl::StatusOr<DirectoryTrust> CheckDirectoryTrust(absl::string_view dir);

}  // namespace lazyrt::cache
