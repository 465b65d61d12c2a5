// The POSIX file operations the cache is built on, with errors as absl::Status naming the path.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lazyrt::cache {

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  // The descriptor, or -1 when there is none.
  int get() const { return fd_; }
  // Whether there is a descriptor.
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership; the caller closes the descriptor.
  int release();

 private:
  int fd_ = -1;
};

// The status for a failed system call: the code that `error_number` maps to and a message
// "<action> <path>: <strerror text>".
absl::Status ErrnoError(int error_number, absl::string_view action, absl::string_view path);

// Opens `path` for reading into `fd` when it is a regular file, and returns its stat; nullopt (and
// `fd` closed) for anything else: no file, a symlink (never followed: it could point anywhere), a
// FIFO (which would hang the open or the read), a device or a directory.
std::optional<struct stat> OpenRegularFile(const std::string& path, UniqueFd& fd);

// Opens `path` for writing (created 0644 if missing; truncated, or appended to when `append`) when it is,
// or becomes, a regular file: a FIFO fails at once instead of blocking until a reader comes (the open is
// non-blocking) and a device or directory is refused, each with an error naming the path.
absl::StatusOr<UniqueFd> OpenRegularFileForWriting(const std::string& path, bool append);

// OK when a file may grow to `end` bytes under this process's file size limit (ulimit -f);
// RESOURCE_EXHAUSTED naming `path` and the limit otherwise. Writing past the limit would not fail:
// the kernel kills the process with SIGXFSZ, so every write checks first.
absl::Status CheckFileSizeLimit(uint64_t end, absl::string_view path);

// Up to `size` bytes of `fd` from `offset`; fewer only when the file ends first.
absl::StatusOr<std::string> ReadRange(int fd, uint64_t offset, uint64_t size, absl::string_view path);

// Writes all of `data` to `fd`, retrying short writes and interrupted calls.
absl::Status WriteAll(int fd, absl::string_view data, absl::string_view path);

// Replaces "<dir>/<file_name>" with `contents` such that every reader, in any process, sees the old
// file, no file, or the whole new one: writes a uniquely named temporary file in `dir` (mode 0600),
// fsyncs it and renames it over the final name. Checks the file size limit first. On failure the temporary file is
// removed. The directory itself is not fsynced: after a power cut the rename may be lost, which costs a cache miss,
// never a torn entry, and saves a second flush on every write.
absl::Status WriteFileAtomically(absl::string_view dir, absl::string_view file_name, absl::string_view contents);

// Removes `path` if it is still the file open as `fd` (same device and inode), so that a reader
// that found a damaged file cannot remove a good one another process renamed over it meanwhile.
// Returns whether the file was removed.
bool RemoveIfUnchanged(absl::string_view path, int fd);

}  // namespace lazyrt::cache
