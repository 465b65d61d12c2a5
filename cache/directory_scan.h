// One pass over the cache directory: the entry files and the temporary files in it, with the sizes
// and times that eviction and listings need, without opening any file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace lazyrt::cache {

struct EntryFile {
  std::string key;
  std::string path;
  uint64_t size = 0;
  // The mtime, which a hit refreshes: the order of least-recent use.
  absl::Time last_used;
};

struct TempFile {
  std::string path;
  absl::Time modified;
};

struct DirectoryScan {
  std::vector<EntryFile> entries;  // sorted by key
  std::vector<TempFile> temp_files;
  std::vector<std::string> lease_files;  // paths of compile leases' lock files
};

// The regular entry files, temporary files and lock files in `dir`. Files that vanish during the scan (another
// process evicted them) are left out, and so is every other name.
absl::StatusOr<DirectoryScan> ScanDirectory(absl::string_view dir);

}  // namespace lazyrt::cache
