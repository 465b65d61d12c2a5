#include "cache/location.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  for (size_t slash = dir.find('/', 1); slash != absl::string_view::npos;
       slash = dir.find('/', slash + 1)) {
    if (dir[slash - 1] == '/') continue;
    if (absl::Status status = MakeDirectory(std::string(dir.substr(0, slash))); !status.ok()) {
      return status;
    }
  }
  return MakeDirectory(std::string(dir));
}

absl::StatusOr<DirectoryTrust> CheckDirectoryTrust(absl::string_view dir) {
  const std::string path(dir);
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return ErrnoError(errno, "cannot examine", path);
  if (info.st_uid != geteuid()) {
    return DirectoryTrust{false, absl::StrFormat("cache directory %s is owned by uid %d, not by this "
                                                 "user (uid %d); its entries will not be loaded",
                                                 path, info.st_uid, geteuid())};
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return DirectoryTrust{
        false, absl::StrFormat("cache directory %s has mode %04o: others can write entries into it, "
                               "so none will be loaded and none written (chmod 700 it to use it)",
                               path, info.st_mode & 07777)};
  }
  return DirectoryTrust{true, ""};
}

}  // namespace lazyrt::cache
