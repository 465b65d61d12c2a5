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
// (neither group nor others), and no one else can replace it either: every directory on its path,
// symlinks followed, is owned by root or this user and writable by no one else, or sticky (as /tmp
// is). An error when `dir` or a component of its path cannot be examined.
absl::StatusOr<DirectoryTrust> CheckDirectoryTrust(absl::string_view dir);

// The cache directory's mark (https://bford.info/cachedir/): lazyrt deletes, evicts and rewrites
// files only in a directory that carries it, so that a cache directory pointed at $HOME or "/" by
// mistake never loses a file the cache did not write.
inline constexpr absl::string_view kCacheDirTagFileName = "CACHEDIR.TAG";
inline constexpr absl::string_view kCacheDirTagSignature = "Signature: 8a477f597d28d172789f06886806bc55";

// Whether `dir` holds a regular CACHEDIR.TAG (not a symlink) starting with the signature.
bool IsMarkedCacheDir(absl::string_view dir);

// Writes CACHEDIR.TAG into `dir` (atomically, replacing one that is there).
absl::Status MarkCacheDir(absl::string_view dir);

}  // namespace lazyrt::cache
