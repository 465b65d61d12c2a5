#include "cache/compile_lease.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "cache/layout.h"

namespace lazyrt::cache {
namespace {

// Polling, not a blocking flock: a blocking lock cannot be given a bound. The interval doubles from
// the first to the last, so a short compile is noticed within a millisecond or two and a long one
// costs twenty checks a second.
constexpr absl::Duration kFirstPoll = absl::Milliseconds(1);
constexpr absl::Duration kLastPoll = absl::Milliseconds(50);
// "pid " and at most 20 digits after the magic.
constexpr size_t kMaxLockFileBytes = kCompileLeaseMagic.size() + 32;

// Whether `path` still names the file open as `fd` (the holder removes it on release).
bool StillNamed(const std::string& path, int fd) {
  struct stat named;
  struct stat opened;
  return lstat(path.c_str(), &named) == 0 && fstat(fd, &opened) == 0 && named.st_dev == opened.st_dev &&
         named.st_ino == opened.st_ino;
}

// The holder's pid as written in its lock file; 0 when not (yet) written.
int64_t ReadHolderPid(int fd) {
  absl::StatusOr<std::string> text = ReadRange(fd, 0, kMaxLockFileBytes, "");
  if (!text.ok()) return 0;
  absl::string_view rest = *text;
  int64_t pid = 0;
  if (!absl::ConsumePrefix(&rest, kCompileLeaseMagic) || !absl::ConsumePrefix(&rest, "pid ") ||
      !absl::SimpleAtoi(absl::StripSuffix(rest, "\n"), &pid) || pid <= 0) {
    return 0;
  }
  return pid;
}

// Locks the file open as `fd` without blocking: true when locked, false when another holds it; an
// error otherwise.
absl::StatusOr<bool> TryLock(int fd, const std::string& path) {
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return false;
    if (errno != EINTR) return ErrnoError(errno, "cannot lock", path);
  }
  return true;
}

}  // namespace

CompileLease& CompileLease::operator=(CompileLease&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::move(other.path_);
    fd_ = std::move(other.fd_);
    waited_ = other.waited_;
    wait_time_ = other.wait_time_;
    holder_pid_ = other.holder_pid_;
    timed_out_ = other.timed_out_;
    error_ = std::move(other.error_);
  }
  return *this;
}

CompileLease CompileLease::Acquire(absl::string_view dir, absl::string_view key, absl::Duration wait) {
  CompileLease lease;
  if (absl::Status status = ValidateKey(key); !status.ok()) {
    lease.error_ = std::string(status.message());
    return lease;
  }
  lease.path_ = PathInDir(dir, CompileLeaseFileName(key));
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + wait;
  absl::Duration poll = kFirstPoll;
  while (true) {
    // O_NOFOLLOW: a symlink planted at the name fails the open instead of locking (and later
    // removing) a file elsewhere.
    UniqueFd fd(open(lease.path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600));
    if (!fd.valid()) {
      lease.error_ = std::string(ErrnoError(errno, "cannot open the lock file", lease.path_).message());
      return lease;
    }
    struct stat info;
    if (fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
      lease.error_ = absl::StrCat("cannot use the lock file ", lease.path_, ": not a regular file");
      return lease;
    }
    while (true) {
      absl::StatusOr<bool> locked = TryLock(fd.get(), lease.path_);
      if (!locked.ok()) {
        lease.error_ = std::string(locked.status().message());
        return lease;
      }
      if (*locked) break;
      lease.waited_ = true;
      if (const int64_t pid = ReadHolderPid(fd.get()); pid != 0) lease.holder_pid_ = pid;
      const absl::Time now = absl::Now();
      lease.wait_time_ = now - start;
      if (now >= deadline) {
        lease.timed_out_ = true;
        return lease;
      }
      absl::SleepFor(std::min(poll, deadline - now));
      poll = std::min(poll * 2, kLastPoll);
    }
    if (lease.waited_) lease.wait_time_ = absl::Now() - start;
    // The holder this process waited for removed the file before unlocking it: lock the current one.
    if (!StillNamed(lease.path_, fd.get())) continue;
    const std::string contents = absl::StrCat(kCompileLeaseMagic, "pid ", getpid(), "\n");
    // The pid is for messages only: failing to write it leaves the lease as good.
    if (ftruncate(fd.get(), 0) == 0) WriteAll(fd.get(), contents, lease.path_).IgnoreError();
    lease.fd_ = std::move(fd);
    return lease;
  }
}

void CompileLease::Release() {
  if (!fd_.valid()) return;
  // Removed while locked, so no process can lock this file and take it for the current one.
  RemoveIfUnchanged(path_, fd_.get());
  fd_ = UniqueFd();  // closing unlocks
}

bool IsCompileLeaseFile(int fd) {
  absl::StatusOr<std::string> start = ReadRange(fd, 0, kCompileLeaseMagic.size(), "");
  if (!start.ok()) return false;
  return absl::StartsWith(*start, kCompileLeaseMagic) || absl::StartsWith(kCompileLeaseMagic, *start);
}

absl::Status RemoveAbandonedCompileLease(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  struct stat info;
  if (!fd.valid()) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoError(errno, "cannot open the lock file", path);
  }
  if (fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode) || !IsCompileLeaseFile(fd.get())) {
    return absl::OkStatus();  // not the cache's: left alone
  }
  absl::StatusOr<bool> locked = TryLock(fd.get(), path);
  if (!locked.ok()) return locked.status();
  if (*locked) RemoveIfUnchanged(path, fd.get());
  return absl::OkStatus();
}

}  // namespace lazyrt::cache
