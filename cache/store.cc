#include "cache/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cache/layout.h"
#include "cache/location.h"

namespace lazyrt::cache {
namespace {

// A writer holds its temporary file for the duration of one write; one this old was left behind by
// a writer that died (killed mid-write) and would otherwise take space forever.
constexpr absl::Duration kStaleTempFileAge = absl::Hours(1);

Miss ReadFailure(const absl::Status& status) { return Miss{MissReason::kTruncated, std::string(status.message())}; }

// The header of the entry file open as `fd`, `file_size` bytes long.
Decoded<EntryHeader> ReadHeader(int fd, uint64_t file_size, absl::string_view path) {
  absl::StatusOr<std::string> start = ReadRange(fd, 0, std::min(file_size, kMaxHeaderSize), path);
  if (!start.ok()) return ReadFailure(start.status());
  return DecodeHeader(*start, file_size);
}

// Whether the file open as `fd` is one the cache wrote: an entry (it starts with the entry magic),
// or a write cut short (a prefix of the magic), or, when `temp_file`, a write of the cache directory
// tag. Nothing else is ever removed.
bool WrittenByCache(int fd, bool temp_file) {
  absl::StatusOr<std::string> start = ReadRange(fd, 0, kCacheDirTagSignature.size(), "");
  if (!start.ok()) return false;
  const absl::string_view bytes = *start;
  // A prefix of the magic (an empty file included) holds nothing anyone could lose.
  if (absl::StartsWith(bytes, kEntryMagic) || absl::StartsWith(kEntryMagic, bytes)) return true;
  return temp_file && absl::StartsWith(kCacheDirTagSignature, bytes);
}

// Removes the file at `path` if it is a regular file the cache wrote (WrittenByCache) and still the
// one examined. OK when removed or gone; FAILED_PRECONDITION when the file is not the cache's.
absl::Status RemoveCacheFile(const std::string& path, bool temp_file) {
  UniqueFd fd;
  if (!OpenRegularFile(path, fd)) {
    struct stat info;
    if (lstat(path.c_str(), &info) != 0 && errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("not removing ", path, ": not a regular file"));
  }
  if (!WrittenByCache(fd.get(), temp_file)) {
    return absl::FailedPreconditionError(
        absl::StrCat("not removing ", path, ": the cache did not write it (no ", kEntryMagic, " magic)"));
  }
  if (RemoveIfUnchanged(path, fd.get())) return absl::OkStatus();
  struct stat info;
  if (lstat(path.c_str(), &info) != 0 && errno == ENOENT) return absl::OkStatus();
  return ErrnoError(errno, "cannot remove", path);
}

// Whether `dir` holds only files the cache writes, so that marking it claims nothing of anyone's:
// a directory made for the cache by an older lazyrt, or an empty one.
bool HoldsOnlyCacheFiles(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> stream(opendir(dir.c_str()), &closedir);
  if (stream == nullptr) return false;
  while (const dirent* item = readdir(stream.get())) {
    const absl::string_view name = item->d_name;
    if (name == "." || name == "..") continue;
    const bool temp_file = IsTempFileName(name);
    const bool lease_file = IsCompileLeaseFileName(name);
    if (name == kEventLogFileName || name == kRotatedEventLogFileName) continue;
    // Another process opening the same new directory may have marked it since this one looked.
    if (name == kCacheDirTagFileName) {
      if (IsMarkedCacheDir(dir)) continue;
      return false;
    }
    if (!temp_file && !lease_file && !KeyFromEntryFileName(name)) return false;
    const std::string path = PathInDir(dir, name);
    UniqueFd fd;
    if (!OpenRegularFile(path, fd)) {
      struct stat info;
      if (lstat(path.c_str(), &info) != 0 && errno == ENOENT) continue;  // renamed or removed meanwhile
      return false;
    }
    if (!(lease_file ? IsCompileLeaseFile(fd.get()) : WrittenByCache(fd.get(), temp_file))) return false;
  }
  return true;
}

uint64_t EntryFileSize(const EntryHeader& header) { return EncodedHeaderSize(header) + header.compressed_size; }

}  // namespace

absl::string_view PutOutcomeName(PutOutcome outcome) {
  switch (outcome) {
    case PutOutcome::kWritten: return "written";
    case PutOutcome::kSkippedReadOnly: return "skipped_read_only";
    case PutOutcome::kSkippedUntrustedDirectory: return "skipped_untrusted_directory";
    case PutOutcome::kSkippedBelowMinCompileTime: return "skipped_below_min_compile_time";
    case PutOutcome::kSkippedLargerThanLimit: return "skipped_larger_than_limit";
    case PutOutcome::kSkippedNotACacheDirectory: return "skipped_not_a_cache_directory";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(StoreOptions options) {
  if (options.producer_version.empty() || options.producer_version.size() > kMaxProducerVersionBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a cache store needs a producer version of 1 to ", kMaxProducerVersionBytes, " bytes"));
  }
  absl::StatusOr<std::string> dir = ResolveCacheDir(options.dir);
  if (!dir.ok()) return dir.status();
  if (!options.read_only) {
    if (absl::Status status = CreateCacheDir(*dir); !status.ok()) return status;
  }
  absl::StatusOr<DirectoryTrust> trust = CheckDirectoryTrust(*dir);
  if (!trust.ok()) return trust.status();
  bool marked = IsMarkedCacheDir(*dir);
  if (!marked && trust->trusted && !options.read_only && HoldsOnlyCacheFiles(*dir)) {
    // Nothing in it is anyone else's, so it is the cache's even if the mark cannot be written now
    // (a full disk, a read-only mount): the writes that follow report that failure themselves.
    MarkCacheDir(*dir).IgnoreError();
    marked = true;
  }
  std::string warning = trust->warning;
  if (trust->trusted && !marked && !options.read_only) {
    warning = absl::StrCat(*dir, " is not a lazyrt cache directory (it holds other files and no ", kCacheDirTagFileName,
                           "): entries are looked up but none are written or removed; "
                           "point the cache at a directory of its own");
  }
  return std::unique_ptr<Store>(
      new Store(std::move(options), *std::move(dir), trust->trusted, marked, std::move(warning)));
}

Store::Store(StoreOptions options, std::string dir, bool trusted, bool marked, std::string warning)
    : options_(std::move(options)),
      dir_(std::move(dir)),
      trusted_(trusted),
      marked_(marked),
      warning_(std::move(warning)),
      event_log_(dir_, options_.event_log_max_bytes) {}

LookupResult Store::ReadEntry(absl::string_view key, UniqueFd& fd) const {
  if (absl::Status status = ValidateKey(key); !status.ok()) {
    return Miss{MissReason::kNotFound, std::string(status.message())};
  }
  const std::string path = PathInDir(dir_, EntryFileName(key));
  const std::optional<struct stat> info = OpenRegularFile(path, fd);
  if (!info) return Miss{MissReason::kNotFound, absl::StrCat("no entry file ", path)};
  const uint64_t file_size = static_cast<uint64_t>(info->st_size);
  Decoded<EntryHeader> header = ReadHeader(fd.get(), file_size, path);
  if (Miss* miss = std::get_if<Miss>(&header)) return std::move(*miss);
  EntryHeader& valid_header = std::get<EntryHeader>(header);
  if (std::optional<Miss> miss = CheckEntryIdentity(valid_header, key, options_.producer_version)) {
    return *std::move(miss);
  }
  absl::StatusOr<std::string> compressed =
      ReadRange(fd.get(), EncodedHeaderSize(valid_header), valid_header.compressed_size, path);
  if (!compressed.ok()) return ReadFailure(compressed.status());
  Decoded<std::string> payload = DecodePayload(valid_header, *compressed);
  if (Miss* miss = std::get_if<Miss>(&payload)) return std::move(*miss);
  return Entry{std::move(valid_header), std::move(std::get<std::string>(payload))};
}

std::optional<Miss> CheckGraphSignature(const Entry& entry, const EntryMetadata& expected) {
  absl::StatusOr<EntryMetadata> stored = DecodeEntryMetadata(entry.header.metadata);
  if (!stored.ok()) return Miss{MissReason::kGraphMismatch, std::string(stored.status().message())};
  if (std::optional<std::string> mismatch = SignatureMismatch(*stored, expected)) {
    return Miss{MissReason::kGraphMismatch, *std::move(mismatch)};
  }
  return std::nullopt;
}

std::optional<Miss> Store::ExplainNotFound(const EntryMetadata& expected) const {
  absl::StatusOr<DirectoryScan> scan = ScanDirectory(dir_);
  if (!scan.ok()) return std::nullopt;
  // Newest first: the entry most likely written by the run before this one.
  std::sort(scan->entries.begin(), scan->entries.end(),
            [](const EntryFile& a, const EntryFile& b) { return a.last_used > b.last_used; });
  size_t examined = 0;
  for (const EntryFile& file : scan->entries) {
    if (++examined > kMaxEntriesExplained) break;
    UniqueFd fd;
    const std::optional<struct stat> info = OpenRegularFile(file.path, fd);
    if (!info) continue;
    Decoded<EntryHeader> header = ReadHeader(fd.get(), static_cast<uint64_t>(info->st_size), file.path);
    const EntryHeader* valid = std::get_if<EntryHeader>(&header);
    if (valid == nullptr) continue;
    absl::StatusOr<EntryMetadata> stored = DecodeEntryMetadata(valid->metadata);
    if (!stored.ok() || stored->graph_hash != expected.graph_hash || stored->key == expected.key) continue;
    std::optional<std::string> difference = IngredientDifference(stored->ingredients, expected.ingredients);
    if (!difference) continue;
    return Miss{MissReason::kKeyChanged,
                absl::StrCat("the same graph is stored under key ", stored->key, ", made with another ", *difference)};
  }
  return std::nullopt;
}

LookupResult Store::Lookup(absl::string_view key, const EntryMetadata* expected) {
  if (!trusted()) {
    counters_.AddMiss(MissReason::kUntrustedDirectory);
    return Miss{MissReason::kUntrustedDirectory, warning_};
  }
  UniqueFd fd;
  LookupResult result = ReadEntry(key, fd);
  if (expected != nullptr) {
    if (const Miss* miss = std::get_if<Miss>(&result); miss != nullptr && miss->reason == MissReason::kNotFound) {
      if (std::optional<Miss> changed = ExplainNotFound(*expected)) result = *std::move(changed);
    } else if (Entry* entry = std::get_if<Entry>(&result)) {
      if (std::optional<Miss> mismatch = CheckGraphSignature(*entry, *expected)) result = *std::move(mismatch);
    }
  }
  if (const Miss* miss = std::get_if<Miss>(&result)) {
    RecordMiss(key, *miss, fd.get());
    return result;
  }
  const EntryHeader& header = std::get<Entry>(result).header;
  if (writable()) {
    // The mtime is the last-use time eviction orders by. Failing to refresh it only makes eviction
    // slightly less accurate, so the hit stands either way.
    const struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
    futimens(fd.get(), times);
  }
  counters_.AddHit();
  Log(Event{.kind = EventKind::kHit,
            .key = std::string(key),
            .raw_bytes = header.raw_size,
            .file_bytes = EntryFileSize(header),
            .compile_ms = header.compile_ms});
  return result;
}

void Store::ReportUnloadable(absl::string_view key, absl::string_view message) {
  ReportUnusable(key, Miss{MissReason::kUnloadable, std::string(message)});
}

void Store::ReportUnusable(absl::string_view key, const Miss& miss) {
  UniqueFd fd;
  if (ValidateKey(key).ok()) OpenRegularFile(PathInDir(dir_, EntryFileName(key)), fd);
  RecordMiss(key, miss, fd.get());
}

void Store::RecordMiss(absl::string_view key, const Miss& miss, int fd) {
  counters_.AddMiss(miss.reason);
  Log(Event{.kind = EventKind::kMiss, .key = std::string(key), .reason = miss.reason, .detail = miss.detail});
  if (fd < 0 || miss.reason == MissReason::kNotFound || miss.reason == MissReason::kKeyChanged || !writable()) {
    return;
  }
  // A file without the magic under an entry's name was not written by the cache: left alone.
  if (!WrittenByCache(fd, /*temp_file=*/false)) return;
  struct stat info;
  const uint64_t file_bytes = fstat(fd, &info) == 0 ? static_cast<uint64_t>(info.st_size) : 0;
  if (!RemoveIfUnchanged(PathInDir(dir_, EntryFileName(key)), fd)) return;
  Log(Event{.kind = EventKind::kCorrupt,
            .key = std::string(key),
            .reason = miss.reason,
            .detail = miss.detail,
            .file_bytes = file_bytes});
}

absl::StatusOr<PutOutcome> Store::Put(absl::string_view key, absl::string_view payload, double compile_ms,
                                      absl::string_view metadata) {
  absl::StatusOr<PutOutcome> outcome = WriteEntry(key, payload, compile_ms, metadata);
  if (!outcome.ok()) counters_.AddWriteFailure();
  return outcome;
}

absl::StatusOr<PutOutcome> Store::WriteEntry(absl::string_view key, absl::string_view payload, double compile_ms,
                                             absl::string_view metadata) {
  if (absl::Status status = ValidateKey(key); !status.ok()) return status;
  if (!trusted()) return PutOutcome::kSkippedUntrustedDirectory;
  if (options_.read_only) return PutOutcome::kSkippedReadOnly;
  if (!marked_) return PutOutcome::kSkippedNotACacheDirectory;
  if (compile_ms < options_.min_compile_ms) return PutOutcome::kSkippedBelowMinCompileTime;
  EntryHeader header;
  header.producer_version = options_.producer_version;
  header.key = std::string(key);
  header.compile_ms = compile_ms;
  header.created_unix_ms = absl::ToUnixMillis(absl::Now());
  header.metadata = std::string(metadata);
  absl::StatusOr<std::string> file = EncodeEntry(std::move(header), payload);
  if (!file.ok()) return file.status();
  if (options_.max_bytes != 0 && file->size() > options_.max_bytes) {
    return PutOutcome::kSkippedLargerThanLimit;
  }
  if (absl::Status status = WriteFileAtomically(dir_, EntryFileName(key), *file); !status.ok()) {
    return status;
  }
  counters_.AddWrite(static_cast<int64_t>(file->size()));
  Log(Event{.kind = EventKind::kWrite,
            .key = std::string(key),
            .raw_bytes = payload.size(),
            .file_bytes = file->size(),
            .compile_ms = compile_ms});
  if (options_.max_bytes != 0) {
    absl::StatusOr<std::vector<EvictedEntry>> evicted = EvictLeastRecentlyUsed(options_.max_bytes, key);
    if (!evicted.ok()) {
      return absl::Status(evicted.status().code(),
                          absl::StrCat("wrote cache entry ", key, " but could not evict down to ", options_.max_bytes,
                                       " bytes: ", evicted.status().message()));
    }
  }
  return PutOutcome::kWritten;
}

bool Store::Contains(absl::string_view key) const {
  if (!ValidateKey(key).ok()) return false;
  struct stat info;
  return lstat(PathInDir(dir_, EntryFileName(key)).c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

CompileLease Store::AcquireCompileLease(absl::string_view key, absl::Duration wait) {
  if (!writable()) return CompileLease();
  CompileLease lease = CompileLease::Acquire(dir_, key, wait);
  if (lease.waited()) {
    Log(Event{.kind = EventKind::kCompileWait,
              .key = std::string(key),
              .detail = absl::StrCat("holder pid ", lease.holder_pid(), lease.timed_out() ? ", timed out" : ""),
              .wait_ms = absl::ToDoubleMilliseconds(lease.wait_time())});
  }
  return lease;
}

absl::StatusOr<std::vector<ListedEntry>> Store::List() const {
  absl::StatusOr<DirectoryScan> scan = ScanDirectory(dir_);
  if (!scan.ok()) return scan.status();
  std::vector<ListedEntry> listed;
  for (const EntryFile& file : scan->entries) {
    UniqueFd fd;
    const std::optional<struct stat> info = OpenRegularFile(file.path, fd);
    if (!info) continue;  // evicted since the scan
    const uint64_t file_size = static_cast<uint64_t>(info->st_size);
    listed.push_back(ListedEntry{file.key, file_size, absl::TimeFromTimespec(info->st_mtim),
                                 ReadHeader(fd.get(), file_size, file.path)});
  }
  return listed;
}

std::optional<Miss> Store::Verify(absl::string_view key) const {
  UniqueFd fd;
  LookupResult result = ReadEntry(key, fd);
  if (Miss* miss = std::get_if<Miss>(&result)) return std::move(*miss);
  return std::nullopt;
}

absl::StatusOr<std::vector<VerifiedEntry>> Store::VerifyAll() const {
  absl::StatusOr<DirectoryScan> scan = ScanDirectory(dir_);
  if (!scan.ok()) return scan.status();
  std::vector<VerifiedEntry> verified;
  for (const EntryFile& file : scan->entries) {
    std::optional<Miss> defect = Verify(file.key);
    if (defect && defect->reason == MissReason::kNotFound) continue;  // evicted since the scan
    verified.push_back(VerifiedEntry{file.key, std::move(defect)});
  }
  return verified;
}

absl::Status Store::CheckWritable(absl::string_view action) const {
  if (writable()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cannot ", action, " in cache directory ", dir_, ": the store is ",
                   options_.read_only
                       ? "read-only"
                       : absl::StrCat(trusted_ ? "not in a marked cache directory (" : "distrusted (", warning_, ")")));
}

absl::Status Store::Remove(absl::string_view key) {
  if (absl::Status status = ValidateKey(key); !status.ok()) return status;
  if (absl::Status status = CheckWritable("remove an entry"); !status.ok()) return status;
  const std::string path = PathInDir(dir_, EntryFileName(key));
  struct stat info;
  if (lstat(path.c_str(), &info) != 0 && errno == ENOENT) {
    return absl::NotFoundError(absl::StrCat("no cache entry ", key, " in ", dir_));
  }
  return RemoveCacheFile(path, /*temp_file=*/false);
}

absl::StatusOr<int64_t> Store::Clear() {
  if (absl::Status status = CheckWritable("clear"); !status.ok()) return status;
  absl::StatusOr<DirectoryScan> scan = ScanDirectory(dir_);
  if (!scan.ok()) return scan.status();
  int64_t removed = 0;
  for (const EntryFile& file : scan->entries) {
    // A file that is not an entry stays, whatever its name; the others are counted.
    if (absl::Status status = RemoveCacheFile(file.path, /*temp_file=*/false); status.ok()) {
      ++removed;
    } else if (!absl::IsFailedPrecondition(status)) {
      return status;
    }
  }
  if (absl::Status status = RemoveLeftovers(*scan); !status.ok()) return status;
  return removed;
}

absl::StatusOr<std::vector<EvictedEntry>> Store::EvictTo(uint64_t max_bytes) {
  if (absl::Status status = CheckWritable("evict"); !status.ok()) return status;
  return EvictLeastRecentlyUsed(max_bytes, std::nullopt);
}

absl::StatusOr<std::vector<EvictedEntry>> Store::EvictLeastRecentlyUsed(uint64_t max_bytes,
                                                                        std::optional<absl::string_view> keep_key) {
  absl::StatusOr<DirectoryScan> scan = ScanDirectory(dir_);
  if (!scan.ok()) return scan.status();
  if (absl::Status status = RemoveLeftovers(*scan); !status.ok()) return status;
  std::vector<EntryFile>& entries = scan->entries;
  // Ties (coarse mtimes) break by key so the order does not depend on the directory's.
  std::sort(entries.begin(), entries.end(), [](const EntryFile& a, const EntryFile& b) {
    return std::tie(a.last_used, a.key) < std::tie(b.last_used, b.key);
  });
  uint64_t total = 0;
  for (const EntryFile& file : entries) total += file.size;
  std::vector<EvictedEntry> evicted;
  for (const EntryFile& file : entries) {
    if (total <= max_bytes) break;
    if (keep_key && file.key == *keep_key) continue;
    // Gone already (another process removed it) counts as evicted; a file the cache did not write is
    // not an entry and takes no part.
    absl::Status status = RemoveCacheFile(file.path, /*temp_file=*/false);
    if (status.ok()) {
      evicted.push_back(EvictedEntry{file.key, file.size, file.last_used});
      counters_.AddEviction();
      Log(Event{.kind = EventKind::kEvict, .key = file.key, .file_bytes = file.size});
    } else if (!absl::IsFailedPrecondition(status)) {
      return absl::Status(status.code(), absl::StrCat("cannot evict: ", status.message()));
    }
    total -= file.size;
  }
  return evicted;
}

absl::Status Store::RemoveLeftovers(const DirectoryScan& scan) const {
  const absl::Time stale_before = absl::Now() - kStaleTempFileAge;
  for (const TempFile& file : scan.temp_files) {
    if (file.modified >= stale_before) continue;
    absl::Status status = RemoveCacheFile(file.path, /*temp_file=*/true);
    if (!status.ok() && !absl::IsFailedPrecondition(status)) {
      return absl::Status(status.code(), absl::StrCat("cannot remove a stale temporary file: ", status.message()));
    }
  }
  for (const std::string& path : scan.lease_files) {
    if (absl::Status status = RemoveAbandonedCompileLease(path); !status.ok()) {
      return absl::Status(status.code(), absl::StrCat("cannot remove an abandoned lock file: ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CacheStats> Store::Stats() const {
  absl::StatusOr<DirectoryScan> scan = ScanDirectory(dir_);
  if (!scan.ok()) return scan.status();
  absl::StatusOr<EventStats> events = event_log_.ReadStats();
  if (!events.ok()) return events.status();
  CacheStats stats;
  stats.entries = static_cast<int64_t>(scan->entries.size());
  for (const EntryFile& file : scan->entries) stats.bytes += file.size;
  stats.events = *std::move(events);
  return stats;
}

void Store::Log(const Event& event) {
  if (!writable()) return;
  if (!event_log_.Append(event).ok()) counters_.AddEventLogFailure();
}

}  // namespace lazyrt::cache
