#include "cache/file_io.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cache/layout.h"

namespace lazyrt::cache {

// How many temporary names one write tries while it finds them taken (each another process's file).
constexpr int kMaxTakenTempNames = 64;

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

absl::Status ErrnoError(int error_number, absl::string_view action, absl::string_view path) {
  return absl::ErrnoToStatus(error_number, absl::StrCat(action, " ", path));
}

std::optional<struct stat> OpenRegularFile(const std::string& path, UniqueFd& fd) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; regular files ignore it.
  fd = UniqueFd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  struct stat info;
  if (!fd.valid() || fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    fd = UniqueFd();
    return std::nullopt;
  }
  return info;
}

absl::StatusOr<UniqueFd> OpenRegularFileForWriting(const std::string& path, bool append) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (append ? O_APPEND : O_TRUNC), 0644));
  if (!fd.valid()) return ErrnoError(errno, "cannot open for writing", path);
  struct stat info;
  if (fstat(fd.get(), &info) != 0) return ErrnoError(errno, "cannot stat", path);
  if (!S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("not writing to ", path, ": it is not a regular file"));
  }
  return fd;
}

absl::Status CheckFileSizeLimit(uint64_t end, absl::string_view path) {
  struct rlimit limit;
  if (getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY || end <= limit.rlim_cur) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat("cannot write ", path, ": it would be ", end,
                                                   " bytes, over this process's file size limit (ulimit -f) of ",
                                                   limit.rlim_cur, " bytes"));
}

absl::StatusOr<std::string> ReadRange(int fd, uint64_t offset, uint64_t size, absl::string_view path) {
  std::string data(size, '\0');
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, data.data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "cannot read", path);
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
  }
  data.resize(done);
  return data;
}

absl::Status WriteAll(int fd, absl::string_view data, absl::string_view path) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "cannot write", path);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(absl::string_view dir, absl::string_view file_name, absl::string_view contents) {
  std::string temp_path = PathInDir(dir, UniqueTempFileName(file_name));
  if (absl::Status status = CheckFileSizeLimit(contents.size(), temp_path); !status.ok()) return status;
  UniqueFd fd(open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  // The name can be taken by another process with this pid and thread id: one in another pid namespace
  // on a shared directory, or one killed while writing whose pid a restarted container reuses. Such a
  // leftover is swept once stale; this write takes the next name.
  for (int taken = 1; !fd.valid() && errno == EEXIST && taken < kMaxTakenTempNames; ++taken) {
    temp_path = PathInDir(dir, UniqueTempFileName(file_name));
    fd = UniqueFd(open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  }
  if (!fd.valid()) return ErrnoError(errno, "cannot create", temp_path);
  absl::Status status = WriteAll(fd.get(), contents, temp_path);
  if (status.ok() && fsync(fd.get()) != 0) status = ErrnoError(errno, "cannot fsync", temp_path);
  // close() can report a deferred write error (NFS), so it is checked like the write itself.
  if (close(fd.release()) != 0 && status.ok()) status = ErrnoError(errno, "cannot close", temp_path);
  const std::string final_path = PathInDir(dir, file_name);
  if (status.ok() && rename(temp_path.c_str(), final_path.c_str()) != 0) {
    status = ErrnoError(errno, absl::StrCat("cannot rename ", temp_path, " to"), final_path);
  }
  if (!status.ok()) unlink(temp_path.c_str());
  return status;
}

bool RemoveIfUnchanged(absl::string_view path, int fd) {
  const std::string path_string(path);
  struct stat opened, current;
  if (fstat(fd, &opened) != 0 || lstat(path_string.c_str(), &current) != 0) return false;
  if (opened.st_dev != current.st_dev || opened.st_ino != current.st_ino) return false;
  return unlink(path_string.c_str()) == 0;
}

}  // namespace lazyrt::cache
