#include "cache/location.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cache/file_io.h"

namespace lazyrt::cache {
namespace {

absl::string_view GetEnv(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? absl::string_view() : absl::string_view(value);
}

absl::Status MakeDirectory(const std::string& path) {
  if (mkdir(path.c_str(), 0700) == 0) return absl::OkStatus();
  const int error = errno;
  struct stat info;
  if (error == EEXIST && stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    return absl::OkStatus();
  }
  return ErrnoError(error, "cannot create directory", path);
}

}  // namespace

absl::StatusOr<std::string> ResolveCacheDir(absl::string_view explicit_dir) {
  if (!explicit_dir.empty()) return std::string(explicit_dir);
  if (absl::string_view dir = GetEnv("LAZYRT_CACHE_DIR"); !dir.empty()) return std::string(dir);
  if (absl::string_view xdg = GetEnv("XDG_CACHE_HOME"); absl::StartsWith(xdg, "/")) {
    return absl::StrCat(xdg, "/lazyrt");
  }
  if (absl::string_view home = GetEnv("HOME"); !home.empty()) {
    return absl::StrCat(home, "/.cache/lazyrt");
  }
  return absl::FailedPreconditionError(
      "no cache directory: pass one explicitly or set LAZYRT_CACHE_DIR, XDG_CACHE_HOME or HOME");
}

absl::Status CreateCacheDir(absl::string_view dir) {
  // Each prefix ending before a '/' is a parent; the root and empty components need no mkdir.
  for (size_t slash = dir.find('/', 1); slash != absl::string_view::npos; slash = dir.find('/', slash + 1)) {
    if (dir[slash - 1] == '/') continue;
    if (absl::Status status = MakeDirectory(std::string(dir.substr(0, slash))); !status.ok()) {
      return status;
    }
  }
  return MakeDirectory(std::string(dir));
}

namespace {

// Why the directory `path` (stat `info`), one of the cache directory's ancestors, lets another user
// replace what lies below it; empty when it does not. Like OpenSSH's check of a key's path: an
// ancestor is safe when root or this user owns it and nobody else may write it, or when it is
// sticky (as /tmp is), where others may add names but not rename or remove ours.
std::string AncestorDefect(const std::string& path, const struct stat& info) {
  if (info.st_uid != 0 && info.st_uid != geteuid()) {
    return absl::StrFormat("its ancestor %s is owned by uid %d, who can replace the cache directory", path,
                           info.st_uid);
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (info.st_mode & S_ISVTX) == 0) {
    return absl::StrFormat(
        "its ancestor %s has mode %04o: others can replace the cache directory "
        "with a symlink into other files",
        path, info.st_mode & 07777);
  }
  return "";
}

// The defect of the first untrusted directory on the way from "/" to `dir`, following each symlink
// met on the way (whose own directory is checked like any other); empty when every step is trusted.
// An error when a component cannot be examined.
absl::StatusOr<std::string> ChainDefect(const std::string& dir) {
  std::string resolved = "/";
  std::vector<std::string> pending;  // components still to walk, the next at the back
  for (absl::string_view part : absl::StrSplit(dir, '/', absl::SkipEmpty())) pending.emplace_back(part);
  std::reverse(pending.begin(), pending.end());
  int symlinks = 0;
  struct stat info;
  if (lstat("/", &info) != 0) return ErrnoError(errno, "cannot examine", "/");
  if (std::string defect = AncestorDefect("/", info); !defect.empty()) return defect;
  while (!pending.empty()) {
    const std::string part = std::move(pending.back());
    pending.pop_back();
    if (part == ".") continue;
    if (part == "..") {
      resolved = resolved.substr(0, std::max<size_t>(resolved.rfind('/'), 1));
      continue;
    }
    const std::string next = absl::StrCat(resolved == "/" ? "" : resolved, "/", part);
    if (lstat(next.c_str(), &info) != 0) return ErrnoError(errno, "cannot examine", next);
    if (S_ISLNK(info.st_mode)) {
      // The link's directory (`resolved`) was checked: nobody else can change the link.
      if (++symlinks > 40) return ErrnoError(ELOOP, "cannot resolve", dir);
      std::string target(static_cast<size_t>(PATH_MAX), '\0');
      const ssize_t n = readlink(next.c_str(), target.data(), target.size());
      if (n < 0) return ErrnoError(errno, "cannot read the symlink", next);
      target.resize(static_cast<size_t>(n));
      std::vector<std::string> parts;
      for (absl::string_view p : absl::StrSplit(target, '/', absl::SkipEmpty())) parts.emplace_back(p);
      pending.insert(pending.end(), parts.rbegin(), parts.rend());
      if (absl::StartsWith(target, "/")) resolved.assign(1, '/');
      continue;
    }
    resolved = next;
    if (pending.empty()) break;  // the cache directory itself: checked by CheckDirectoryTrust
    if (!S_ISDIR(info.st_mode)) return ErrnoError(ENOTDIR, "cannot use", next);
    if (std::string defect = AncestorDefect(next, info); !defect.empty()) return defect;
  }
  return std::string();
}

}  // namespace

absl::StatusOr<DirectoryTrust> CheckDirectoryTrust(absl::string_view dir) {
  const std::string path(dir);
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return ErrnoError(errno, "cannot examine", path);
  if (!S_ISDIR(info.st_mode)) return ErrnoError(ENOTDIR, "cannot use", path);
  if (info.st_uid != geteuid()) {
    return DirectoryTrust{false, absl::StrFormat("cache directory %s is owned by uid %d, not by this "
                                                 "user (uid %d); its entries will not be loaded",
                                                 path, info.st_uid, geteuid())};
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return DirectoryTrust{false, absl::StrFormat("cache directory %s has mode %04o: others can write entries into it, "
                                                 "so none will be loaded and none written (chmod 700 it to use it)",
                                                 path, info.st_mode & 07777)};
  }
  char cwd[PATH_MAX];
  const std::string absolute =
      absl::StartsWith(path, "/") ? path : absl::StrCat(getcwd(cwd, sizeof(cwd)) ? cwd : "", "/", path);
  absl::StatusOr<std::string> defect = ChainDefect(absolute);
  if (!defect.ok()) return defect.status();
  if (!defect->empty()) {
    return DirectoryTrust{false, absl::StrCat("cache directory ", path, " is not safe: ", *defect,
                                              "; none of its entries will be loaded and none written")};
  }
  return DirectoryTrust{true, ""};
}

bool IsMarkedCacheDir(absl::string_view dir) {
  const std::string path = absl::StrCat(dir, "/", kCacheDirTagFileName);
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  struct stat info;
  if (!fd.valid() || fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) return false;
  absl::StatusOr<std::string> start = ReadRange(fd.get(), 0, kCacheDirTagSignature.size(), path);
  return start.ok() && *start == kCacheDirTagSignature;
}

absl::Status MarkCacheDir(absl::string_view dir) {
  return WriteFileAtomically(dir, kCacheDirTagFileName,
                             absl::StrCat(kCacheDirTagSignature,
                                          "\n# This directory is a lazyrt compilation cache: lazyrt only "
                                          "deletes or evicts files in a directory marked so.\n"
                                          "# For information about cache directory tags see "
                                          "https://bford.info/cachedir/\n"));
}

}  // namespace lazyrt::cache
