#include "cache/directory_scan.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>

#include "cache/file_io.h"
#include "cache/layout.h"

namespace lazyrt::cache {

absl::StatusOr<DirectoryScan> ScanDirectory(absl::string_view dir) {
  const std::string dir_string(dir);
  std::unique_ptr<DIR, int (*)(DIR*)> stream(opendir(dir_string.c_str()), &closedir);
  if (stream == nullptr) return ErrnoError(errno, "cannot list", dir);
  DirectoryScan scan;
  while (true) {
    errno = 0;
    const dirent* item = readdir(stream.get());
    if (item == nullptr) break;
    const absl::string_view name = item->d_name;
    const std::optional<std::string> key = KeyFromEntryFileName(name);
    const bool lease_file = IsCompileLeaseFileName(name);
    if (!key && !lease_file && !IsTempFileName(name)) continue;
    struct stat info;
    if (fstatat(dirfd(stream.get()), item->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(info.st_mode)) {
      continue;
    }
    const absl::Time modified = absl::TimeFromTimespec(info.st_mtim);
    if (lease_file) {
      scan.lease_files.push_back(PathInDir(dir, name));
    } else if (key) {
      scan.entries.push_back(EntryFile{*key, PathInDir(dir, name), static_cast<uint64_t>(info.st_size), modified});
    } else {
      scan.temp_files.push_back(TempFile{PathInDir(dir, name), modified});
    }
  }
  if (errno != 0) return ErrnoError(errno, "cannot list", dir);
  std::sort(scan.entries.begin(), scan.entries.end(),
            [](const EntryFile& a, const EntryFile& b) { return a.key < b.key; });
  return scan;
}

}  // namespace lazyrt::cache
