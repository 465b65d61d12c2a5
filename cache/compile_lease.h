// One compile per key across processes. When many processes miss the same key at once (the ranks of
// one job starting together), the first to ask takes the key's compile lease, compiles and writes the
// entry; the others wait for the lease to be released, then find the entry and load it. Never N
// compiles racing to write the same entry.
//
// The lease is an flock(2) on a lock file per key in the cache directory (".<key>.lease", layout.h).
// The kernel releases the lock when the holder's process ends, however it ends (SIGKILL included), so
// a killed compiler never blocks the others: the next waiter takes the lease and compiles itself. A
// lock file left behind by a dead process is only a file: the next process locks it at once. The
// holder writes its pid into the file (for the waiters' messages) and removes the file when it
// releases the lease, still holding the lock, so lock files do not accumulate; a process that locked a
// file since removed sees that the name no longer refers to it and starts over with the new one.
// Waits are bounded: a holder that is alive but stuck (stopped, swapped out) delays the others by at
// most the bound, after which they compile themselves.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cache/file_io.h"

namespace lazyrt::cache {

// The first bytes of every lock file; the holder's pid follows ("pid 1234\n").
inline constexpr absl::string_view kCompileLeaseMagic = "lazyrt compile lease\n";

class CompileLease {
 public:
  // The lease of `key` in `dir`: taken at once when no other process holds it, else after waiting up
  // to `wait` for the holder to release it. Check held(): a lease that is not held (the wait timed
  // out, or the lock file could not be used: error()) leaves the caller to compile without one.
  static CompileLease Acquire(absl::string_view dir, absl::string_view key, absl::Duration wait);

  // A lease that is not held and was never waited for.
  CompileLease() = default;
  CompileLease(CompileLease&&) = default;
  CompileLease& operator=(CompileLease&& other) noexcept;
  ~CompileLease() { Release(); }

  // Whether this process holds the lease: it compiles and writes the entry, then releases.
  bool held() const { return fd_.valid(); }
  // Whether another process held the lease when this one asked (then it waited for it).
  bool waited() const { return waited_; }
  // How long this process waited for another holder.
  absl::Duration wait_time() const { return wait_time_; }
  // The pid of the process that held the lease while this one waited; 0 when none did, or when it had
  // not yet written its pid.
  int64_t holder_pid() const { return holder_pid_; }
  // Whether the wait reached its bound with the other process still holding the lease.
  bool timed_out() const { return timed_out_; }
  // Why no lease could be taken (the lock file could not be created or locked); empty otherwise.
  const std::string& error() const { return error_; }

  // Removes the lock file and unlocks; nothing when not held.
  void Release();

 private:
  std::string path_;
  UniqueFd fd_;
  bool waited_ = false;
  absl::Duration wait_time_ = absl::ZeroDuration();
  int64_t holder_pid_ = 0;
  bool timed_out_ = false;
  std::string error_;
};

// Whether the file open as `fd` is a compile lease's lock file: it starts with kCompileLeaseMagic, or
// with a prefix of it (a file created but not yet written, or empty).
bool IsCompileLeaseFile(int fd);

// Removes the lock file at `path` when no process holds its lease and it is a lease's lock file; OK
// when removed, gone, or in use (left alone). Lock files are removed by their holders; this clears
// those of processes killed while holding one.
absl::Status RemoveAbandonedCompileLease(const std::string& path);

}  // namespace lazyrt::cache
