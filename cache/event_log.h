// The cache's append-only event log, "events.jsonl" in the cache directory: one JSON object per
// line for every hit, miss, write, eviction, removal of a damaged entry and wait for another process's
// compile, from every process that
// uses the directory. The CLI reads it back into totals. Bounded by rotation: past a size the file
// becomes "events.jsonl.1", replacing the one older generation kept.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cache/file_io.h"
#include "cache/miss_reason.h"

namespace lazyrt::cache {

inline constexpr absl::string_view kEventLogFileName = "events.jsonl";
inline constexpr absl::string_view kRotatedEventLogFileName = "events.jsonl.1";
inline constexpr uint64_t kDefaultEventLogMaxBytes = uint64_t{4} << 20;
// The most the cache's event log may be configured to hold, and the most read of either generation.
inline constexpr uint64_t kMaxEventLogBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxEventLogReadBytes = kMaxEventLogBytes;

enum class EventKind { kHit, kMiss, kWrite, kEvict, kCorrupt, kCompileWait };

// The stable name written as the line's "event" field: hit, miss, write, evict, corrupt, compile_wait.
absl::string_view EventKindName(EventKind kind);

struct Event {
  EventKind kind = EventKind::kHit;
  std::string key;
  // Miss and corrupt: the reason, and what exactly was wrong.
  std::optional<MissReason> reason = std::nullopt;
  std::string detail = {};
  // Hit and write: the payload's uncompressed size.
  uint64_t raw_bytes = 0;
  // Hit, write, evict and corrupt: the entry file's size.
  uint64_t file_bytes = 0;
  // Hit: the compile time the hit saved. Write: the compile time the entry will save.
  double compile_ms = 0;
  // Compile wait: how long this process waited for another one's compile (detail: the holder's pid).
  double wait_ms = 0;
};

// Totals over the log's lines.
struct EventStats {
  int64_t hits = 0;
  // Keyed by MissReasonName, so reasons from newer builds are kept too.
  std::map<std::string, int64_t> misses_by_reason;
  int64_t writes = 0;
  int64_t bytes_written = 0;
  int64_t evictions = 0;
  int64_t corrupt = 0;
  double compile_ms_saved = 0;
  // Waits for another process's compile of the same key (compile_lease.h), and their total time.
  int64_t compile_waits = 0;
  double compile_wait_ms = 0;
  // Lines that are not events (e.g. cut short by a full disk); skipped.
  int64_t unreadable_lines = 0;
  // Bytes at the start of a log file larger than kMaxEventLogReadBytes, which are not read.
  uint64_t unread_bytes = 0;
  // Log names held by something other than a regular file (a symlink, a FIFO), which are ignored.
  int64_t foreign_files = 0;

  // The misses for all reasons together.
  int64_t total_misses() const;
};

class EventLog {
 public:
  // The log in `dir`, rotated once it grows past `max_bytes` (at most kMaxEventLogBytes).
  EventLog(std::string dir, uint64_t max_bytes);

  // Appends one line for `event`, stamped with the time ("ts_ms", unix ms) and this process's id.
  // Safe from any number of threads and processes at once: the file is opened O_APPEND and each
  // line is one write(). A line that would take the file past max_bytes first rotates it, so the
  // current file stays within the bound (give or take lines appended concurrently, or while another
  // process holds the rotation lock, which is never waited for). A log name that is not a regular
  // file (a symlink, a FIFO) is an error, and so is a line past the file size limit (ulimit -f).
  absl::Status Append(const Event& event) const;

  // Totals over both generations; a missing file counts as empty. Reads only regular files (no
  // symlink is followed), and at most the newest kMaxEventLogReadBytes of each.
  absl::StatusOr<EventStats> ReadStats() const;

 private:
  absl::StatusOr<UniqueFd> OpenForAppend() const;
  // Renames the full log, open as `fd` with stat `opened`, to the rotated name, unless another
  // appender already did.
  absl::Status RotateIfStillCurrent(int fd, const struct stat& opened) const;

  std::string path_;
  std::string rotated_path_;
  uint64_t max_bytes_;
};

}  // namespace lazyrt::cache
