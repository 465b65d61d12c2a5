// The persistent cache: a directory of entries, one file per key, each an opaque payload plus
// metadata (see entry_format.h). It knows nothing about what the payloads are.
//
// Any number of threads and processes may use one directory at once. A write is atomic (temporary
// file, fsync, rename), so a reader sees a whole entry or none. Every damaged or foreign entry a
// lookup meets is a miss with its reason; it is counted, logged to the event log and removed
// (unless read-only).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cache/compile_lease.h"
#include "cache/counters.h"
#include "cache/directory_scan.h"
#include "cache/entry_format.h"
#include "cache/entry_metadata.h"
#include "cache/event_log.h"
#include "cache/file_io.h"
#include "cache/miss_reason.h"

namespace lazyrt::cache {

struct StoreOptions {
  // Where the cache lives; empty means the default order of ResolveCacheDir.
  std::string dir = {};
  // The version of the producer (the compiler). Entries of any other version are misses.
  std::string producer_version = {};
  // Lookups only: nothing in the directory is created, written, touched or removed, the event log
  // included. The directory must exist.
  bool read_only = false;
  // Results that compiled faster than this many ms are not worth an entry; 0 stores everything.
  double min_compile_ms = 0;
  // After each write, least-recently-used entries are evicted until the entries total at most this
  // many bytes; 0 means no limit.
  uint64_t max_bytes = 0;
  uint64_t event_log_max_bytes = kDefaultEventLogMaxBytes;
};

// What a Put that returned OK did. Every outcome but kWritten leaves the directory as it was.
enum class PutOutcome {
  kWritten,
  kSkippedReadOnly,
  kSkippedUntrustedDirectory,
  kSkippedBelowMinCompileTime,
  // The entry alone is bigger than max_bytes: storing it would evict everything, itself included.
  kSkippedLargerThanLimit,
  // The directory holds other files and is not marked as a cache (location.h, CACHEDIR.TAG).
  kSkippedNotACacheDirectory,
};

// A stable lowercase name, e.g. "skipped_read_only".
absl::string_view PutOutcomeName(PutOutcome outcome);

struct Entry {
  EntryHeader header;
  std::string payload;
};

// A hit (the entry) or a miss (why not).
using LookupResult = std::variant<Entry, Miss>;

// The graph_mismatch miss when `entry`'s metadata is not EntryMetadata or its signature (key,
// parameters, results) is not `expected`'s; nullopt when it fits. Lookup and `lazyrt cache verify`
// both use it.
std::optional<Miss> CheckGraphSignature(const Entry& entry, const EntryMetadata& expected);

struct ListedEntry {
  std::string key;  // from the file name
  uint64_t file_bytes = 0;
  absl::Time last_used;
  // The header, or why the file is not a valid entry. Payloads are not read.
  Decoded<EntryHeader> header;
};

struct VerifiedEntry {
  std::string key;
  // nullopt when the entry is sound.
  std::optional<Miss> defect;
};

struct EvictedEntry {
  std::string key;
  uint64_t file_bytes = 0;
  absl::Time last_used;
};

struct CacheStats {
  int64_t entries = 0;
  uint64_t bytes = 0;  // entry files, headers included
  EventStats events;
};

class Store {
 public:
  // Resolves the directory (ResolveCacheDir(options.dir)) and, unless read-only, creates it with
  // mode 0700 and marks it as a cache (CACHEDIR.TAG) when it is new or holds nothing but cache files.
  // An error when there is no directory to use or it cannot be created; the caller runs without a
  // persistent cache then. A directory that others can write to or replace (CheckDirectoryTrust)
  // still opens, distrusted: every lookup misses (untrusted_directory), nothing is written, and
  // warning() says why. A trusted directory that is not marked (one holding the user's files) is
  // looked up in but never changed: no entry written, removed or evicted, no event logged.
  static absl::StatusOr<std::unique_ptr<Store>> Open(StoreOptions options);

  // The resolved directory.
  const std::string& dir() const { return dir_; }
  // Whether the store was opened read-only (StoreOptions::read_only).
  bool read_only() const { return options_.read_only; }
  // False when the directory is distrusted; warning() then says why, for the user.
  bool trusted() const { return trusted_; }
  // Whether the directory carries the cache's mark, without which nothing in it is changed.
  bool marked() const { return marked_; }
  // Empty when the store can be used fully; otherwise a sentence for the user naming the directory,
  // what will not be done in it and the fix (distrusted, or not marked as a cache directory).
  const std::string& warning() const { return warning_; }

  // The entry under `key` whose producer version is this store's. A hit refreshes the entry's
  // last-used time (its mtime). A miss says why; a damaged or foreign entry is removed. Every
  // outcome is counted, and logged unless read-only. Never fails otherwise: an invalid key or an
  // unreadable directory is a not_found miss.
  //
  // With `expected` (the metadata of the graph being run): a sound entry whose metadata does not
  // decode or whose signature differs is a graph_mismatch miss, removed; and when there is no entry
  // under `key` but the same graph (expected->graph_hash) is stored under another key, the miss is
  // key_changed, saying which key ingredients differ (the other entry stays).
  LookupResult Lookup(absl::string_view key, const EntryMetadata* expected = nullptr);

  // The caller could not load the payload of a hit on `key`: counts and logs an unloadable miss
  // and removes the entry (unless read-only), so the next run compiles and writes it afresh. The
  // earlier hit stays counted.
  void ReportUnloadable(absl::string_view key, absl::string_view message);

  // The caller found a hit on `key` unusable for `miss`'s reason (e.g. graph_mismatch: the loaded
  // executable does not fit the graph): counts and logs the miss and removes the entry, as
  // ReportUnloadable does.
  void ReportUnusable(absl::string_view key, const Miss& miss);

  // Stores `payload` under `key`, replacing any entry there, with the compile time a hit will save
  // and the caller's `metadata` text. OK with an outcome saying whether it wrote or why it skipped.
  // A failure (no space, no permission, directory gone) is a non-OK status naming the path and the
  // system's error text; it also counts as a write failure, and the store keeps serving lookups.
  // With max_bytes set, a write is followed by eviction, which never evicts the entry just written;
  // if that eviction fails, the status says so and the written entry stays.
  absl::StatusOr<PutOutcome> Put(absl::string_view key, absl::string_view payload, double compile_ms,
                                 absl::string_view metadata);

  // Whether there is an entry file under `key` (sound or not); nothing is read or counted.
  bool Contains(absl::string_view key) const;

  // The compile lease of `key` (compile_lease.h), waiting at most `wait` for another process that holds
  // it. A wait is logged (event compile_wait, with the holder's pid and the time waited). A store that
  // may not change the directory (read-only, distrusted, unmarked) takes no lease: the lease returned
  // is not held and was not waited for.
  CompileLease AcquireCompileLease(absl::string_view key, absl::Duration wait);

  // Every entry's header, size and last use, sorted by key; temporary files are skipped and no
  // payload is read. Damaged entries are listed with their defect. Works in every mode.
  absl::StatusOr<std::vector<ListedEntry>> List() const;

  // Checks the entry under `key` as a lookup would (header, identity, checksums, decompression)
  // without counting, logging, touching or removing anything. nullopt when sound. Whether the
  // payload loads is the caller's part.
  std::optional<Miss> Verify(absl::string_view key) const;

  // Verify for every entry, sorted by key.
  absl::StatusOr<std::vector<VerifiedEntry>> VerifyAll() const;

  // Removes the entry under `key`. NOT_FOUND when there is none; FAILED_PRECONDITION when
  // read-only or distrusted (as for every method that changes the directory).
  absl::Status Remove(absl::string_view key);

  // Removes every entry, and temporary files and compile leases' lock files left behind by processes
  // that died; returns how many entries. Temporary files of writes in progress are left alone, and so is every file the
  // cache did not write (one without the entry magic, whatever its name), as in every removal.
  absl::StatusOr<int64_t> Clear();

  // Evicts least-recently-used entries until the entries total at most `max_bytes`; counts and
  // logs each eviction and returns them in eviction order. Also removes temporary files and lock files
  // left behind by processes that died.
  absl::StatusOr<std::vector<EvictedEntry>> EvictTo(uint64_t max_bytes);

  // The entries and bytes in the directory now, and the totals of the event log.
  absl::StatusOr<CacheStats> Stats() const;

  // The in-process counters of this store.
  CounterSnapshot counters() const { return counters_.Snapshot(); }

 private:
  Store(StoreOptions options, std::string dir, bool trusted, bool marked, std::string warning);

  // Bounds the headers read to explain one not_found miss.
  static constexpr size_t kMaxEntriesExplained = 256;
  // A key_changed miss when an entry of the graph `expected` describes is stored under another key
  // made of other ingredients; nullopt otherwise.
  std::optional<Miss> ExplainNotFound(const EntryMetadata& expected) const;
  // The entry under `key`, read and checked as Lookup does, and the descriptor it was read from
  // (closed, -1, when there was no file to open).
  LookupResult ReadEntry(absl::string_view key, UniqueFd& fd) const;
  // Counts `miss` and logs it. When the entry file open as `fd` is to blame (fd >= 0 and a reason
  // other than not_found), also removes it if it is still in place, and logs that as corrupt.
  void RecordMiss(absl::string_view key, const Miss& miss, int fd);
  // Put without the failure counting.
  absl::StatusOr<PutOutcome> WriteEntry(absl::string_view key, absl::string_view payload, double compile_ms,
                                        absl::string_view metadata);
  // Evicts as EvictTo does, but never the entry of `keep_key`.
  absl::StatusOr<std::vector<EvictedEntry>> EvictLeastRecentlyUsed(uint64_t max_bytes,
                                                                   std::optional<absl::string_view> keep_key);
  // Removes the temporary files of `scan` older than any write in progress can be, and its lock files
  // that no process holds.
  absl::Status RemoveLeftovers(const DirectoryScan& scan) const;
  // Whether this store may change the directory: trusted, marked and not read-only.
  bool writable() const { return trusted_ && marked_ && !options_.read_only; }
  // FAILED_PRECONDITION, naming `action`, unless writable().
  absl::Status CheckWritable(absl::string_view action) const;
  // Appends `event` to the event log if writable(); a failure only counts.
  void Log(const Event& event);

  const StoreOptions options_;
  const std::string dir_;
  const bool trusted_;
  const bool marked_;
  const std::string warning_;
  const EventLog event_log_;
  Counters counters_;
};

}  // namespace lazyrt::cache
