#include "cache/event_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cache/file_io.h"
#include "cache/layout.h"

namespace lazyrt::cache {
namespace {

using Json = nlohmann::json;

bool HasReason(EventKind kind) { return kind == EventKind::kMiss || kind == EventKind::kCorrupt; }
bool HasFileBytes(EventKind kind) { return kind != EventKind::kMiss && kind != EventKind::kCompileWait; }
bool HasRawBytesAndCompileTime(EventKind kind) { return kind == EventKind::kHit || kind == EventKind::kWrite; }

std::string EncodeLine(const Event& event) {
  Json line = {{"event", std::string(EventKindName(event.kind))},
               {"key", event.key},
               {"ts_ms", absl::ToUnixMillis(absl::Now())},
               {"pid", getpid()}};
  if (HasReason(event.kind)) {
    line["reason"] = event.reason ? std::string(MissReasonName(*event.reason)) : std::string();
    line["detail"] = event.detail;
  }
  if (HasRawBytesAndCompileTime(event.kind)) {
    line["raw_bytes"] = event.raw_bytes;
    line["compile_ms"] = event.compile_ms;
  }
  if (event.kind == EventKind::kCompileWait) {
    line["detail"] = event.detail;
    line["wait_ms"] = event.wait_ms;
  }
  if (HasFileBytes(event.kind)) line["file_bytes"] = event.file_bytes;
  // Details can quote file names that are not UTF-8; replacing beats losing the line.
  return line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

// Adds one line to `stats`; false when it is not an event line.
bool AddLine(absl::string_view text, EventStats& stats) {
  const Json line = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!line.is_object()) return false;
  try {
    const std::string kind = line.at("event").get<std::string>();
    // Each field is read before anything is counted, so a bad field leaves `stats` as it was.
    if (kind == EventKindName(EventKind::kHit)) {
      stats.compile_ms_saved += line.value("compile_ms", 0.0);
      ++stats.hits;
    } else if (kind == EventKindName(EventKind::kMiss)) {
      ++stats.misses_by_reason[line.at("reason").get<std::string>()];
    } else if (kind == EventKindName(EventKind::kWrite)) {
      stats.bytes_written += line.value("file_bytes", int64_t{0});
      ++stats.writes;
    } else if (kind == EventKindName(EventKind::kEvict)) {
      ++stats.evictions;
    } else if (kind == EventKindName(EventKind::kCorrupt)) {
      ++stats.corrupt;
    } else if (kind == EventKindName(EventKind::kCompileWait)) {
      stats.compile_wait_ms += line.value("wait_ms", 0.0);
      ++stats.compile_waits;
    } else {
      return false;
    }
  } catch (const Json::exception&) {  // a field of the wrong type
    return false;
  }
  return true;
}

absl::Status AddFile(const std::string& path, EventStats& stats) {
  UniqueFd fd;
  const std::optional<struct stat> info = OpenRegularFile(path, fd);
  if (!info) {
    // Missing is normal: nothing logged yet, or never rotated. Anything else at the name (a symlink,
    // a FIFO, a directory) is not the cache's log and is not read.
    struct stat link;
    if (lstat(path.c_str(), &link) == 0) ++stats.foreign_files;
    return absl::OkStatus();
  }
  // Only the newest kMaxEventLogReadBytes: a log is bounded by rotation, so more is a foreign file,
  // and reading it whole could exhaust memory.
  const uint64_t size = static_cast<uint64_t>(info->st_size);
  const uint64_t offset = size > kMaxEventLogReadBytes ? size - kMaxEventLogReadBytes : 0;
  absl::StatusOr<std::string> text = ReadRange(fd.get(), offset, size - offset, path);
  if (!text.ok()) return text.status();
  absl::string_view lines = *text;
  if (offset > 0) {
    stats.unread_bytes += offset;
    const size_t newline = lines.find('\n');  // the first line is cut: it starts before the offset
    lines.remove_prefix(newline == absl::string_view::npos ? lines.size() : newline + 1);
  }
  for (absl::string_view line : absl::StrSplit(lines, '\n', absl::SkipEmpty())) {
    if (!AddLine(line, stats)) ++stats.unreadable_lines;
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kHit: return "hit";
    case EventKind::kMiss: return "miss";
    case EventKind::kWrite: return "write";
    case EventKind::kEvict: return "evict";
    case EventKind::kCorrupt: return "corrupt";
    case EventKind::kCompileWait: return "compile_wait";
  }
  return "unknown";
}

int64_t EventStats::total_misses() const {
  int64_t total = 0;
  for (const auto& [reason, count] : misses_by_reason) total += count;
  return total;
}

EventLog::EventLog(std::string dir, uint64_t max_bytes)
    : path_(PathInDir(dir, kEventLogFileName)),
      rotated_path_(PathInDir(dir, kRotatedEventLogFileName)),
      max_bytes_(std::min(max_bytes, kMaxEventLogBytes)) {}

absl::StatusOr<UniqueFd> EventLog::OpenForAppend() const {
  // O_NOFOLLOW: a symlink at the log's name must not make every process append to a file outside
  // the cache. O_NONBLOCK: a FIFO there must not hang the open. Only a regular file is appended to.
  UniqueFd fd(open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600));
  if (!fd.valid()) return ErrnoError(errno, "cannot open", path_);
  struct stat info;
  if (fstat(fd.get(), &info) != 0) return ErrnoError(errno, "cannot examine", path_);
  if (!S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("cannot log to ", path_, ": not a regular file"));
  }
  return fd;
}

absl::Status EventLog::RotateIfStillCurrent(int fd, const struct stat& opened) const {
  // Every appender that found the file full gets here; the lock orders them, and only the first
  // still finds that file under the log's name, so a generation is rotated exactly once. The lock is
  // only tried: a holder stopped by SIGSTOP (a scheduler's suspend) must not stop everyone else, and
  // whoever holds it is rotating already.
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    return errno == EWOULDBLOCK ? absl::OkStatus() : ErrnoError(errno, "cannot lock", path_);
  }
  struct stat current;
  if (lstat(path_.c_str(), &current) == 0 && current.st_dev == opened.st_dev && current.st_ino == opened.st_ino &&
      rename(path_.c_str(), rotated_path_.c_str()) != 0) {
    return ErrnoError(errno, absl::StrCat("cannot rotate ", path_, " to"), rotated_path_);
  }
  return absl::OkStatus();  // closing the descriptor releases the lock
}

absl::Status EventLog::Append(const Event& event) const {
  const std::string line = EncodeLine(event);
  absl::StatusOr<UniqueFd> fd = OpenForAppend();
  if (!fd.ok()) return fd.status();
  struct stat opened;
  if (fstat(fd->get(), &opened) != 0) return ErrnoError(errno, "cannot examine", path_);
  if (opened.st_size > 0 && static_cast<uint64_t>(opened.st_size) + line.size() > max_bytes_) {
    if (absl::Status status = RotateIfStillCurrent(fd->get(), opened); !status.ok()) return status;
    fd = OpenForAppend();
    if (!fd.ok()) return fd.status();
    if (fstat(fd->get(), &opened) != 0) return ErrnoError(errno, "cannot examine", path_);
  }
  const uint64_t end = static_cast<uint64_t>(opened.st_size) + line.size();
  if (absl::Status status = CheckFileSizeLimit(end, path_); !status.ok()) return status;
  // One write() per line: O_APPEND makes each one land whole at the end, whoever else appends.
  const ssize_t written = write(fd->get(), line.data(), line.size());
  if (written < 0) return ErrnoError(errno, "cannot append to", path_);
  if (static_cast<size_t>(written) != line.size()) {
    return absl::ResourceExhaustedError(absl::StrCat("short append to ", path_));
  }
  return absl::OkStatus();
}

absl::StatusOr<EventStats> EventLog::ReadStats() const {
  EventStats stats;
  for (const std::string* path : {&rotated_path_, &path_}) {
    if (absl::Status status = AddFile(*path, stats); !status.ok()) return status;
  }
  return stats;
}

}  // namespace lazyrt::cache
