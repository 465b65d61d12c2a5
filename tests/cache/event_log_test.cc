#include "cache/event_log.h"

#include <unistd.h>

#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cache/layout.h"
#include "cache/store.h"
#include "tests/cache/child_processes.h"
#include "tests/cache/scratch_dir.h"

namespace lazyrt::cache {
namespace event_log_test {

using Json = nlohmann::json;
using testing::ReadFile;
using testing::RunInChildProcesses;
using testing::ScratchDir;
using testing::WriteFile;

std::vector<Json> ReadLines(const std::string& path) {
  std::vector<Json> lines;
  for (absl::string_view line : absl::StrSplit(ReadFile(path), '\n', absl::SkipEmpty())) {
    lines.push_back(Json::parse(line.begin(), line.end()));
  }
  return lines;
}

class EventLogTest : public ::testing::Test {
 protected:
  std::string LogPath() const { return dir_ / std::string(kEventLogFileName); }
  std::string RotatedPath() const { return dir_ / std::string(kRotatedEventLogFileName); }

  ScratchDir dir_;
};

TEST_F(EventLogTest, WritesOneJsonLinePerEventWithTheFieldsOfItsKind) {
  const EventLog log(dir_.path(), kDefaultEventLogMaxBytes);
  const int64_t before_ms = absl::ToUnixMillis(absl::Now());
  ASSERT_TRUE(
      log.Append({.kind = EventKind::kHit, .key = "h", .raw_bytes = 100, .file_bytes = 60, .compile_ms = 12.5}).ok());
  ASSERT_TRUE(
      log.Append({.kind = EventKind::kMiss, .key = "m", .reason = MissReason::kTruncated, .detail = "short"}).ok());
  ASSERT_TRUE(
      log.Append({.kind = EventKind::kWrite, .key = "w", .raw_bytes = 100, .file_bytes = 70, .compile_ms = 3}).ok());
  ASSERT_TRUE(log.Append({.kind = EventKind::kEvict, .key = "e", .file_bytes = 80}).ok());
  ASSERT_TRUE(log.Append({.kind = EventKind::kCorrupt,
                          .key = "c",
                          .reason = MissReason::kPayloadChecksum,
                          .detail = "flip",
                          .file_bytes = 90})
                  .ok());

  const std::vector<Json> lines = ReadLines(LogPath());
  ASSERT_EQ(lines.size(), 5u);
  for (const Json& line : lines) {
    EXPECT_GE(line.at("ts_ms").get<int64_t>(), before_ms);
    EXPECT_EQ(line.at("pid").get<int>(), getpid());
  }
  EXPECT_EQ(lines[0].at("event"), "hit");
  EXPECT_EQ(lines[0].at("key"), "h");
  EXPECT_EQ(lines[0].at("raw_bytes"), 100);
  EXPECT_EQ(lines[0].at("file_bytes"), 60);
  EXPECT_EQ(lines[0].at("compile_ms"), 12.5);
  EXPECT_EQ(lines[1].at("event"), "miss");
  EXPECT_EQ(lines[1].at("reason"), "truncated");
  EXPECT_EQ(lines[1].at("detail"), "short");
  EXPECT_EQ(lines[2].at("event"), "write");
  EXPECT_EQ(lines[2].at("file_bytes"), 70);
  EXPECT_EQ(lines[3].at("event"), "evict");
  EXPECT_EQ(lines[3].at("file_bytes"), 80);
  EXPECT_EQ(lines[4].at("event"), "corrupt");
  EXPECT_EQ(lines[4].at("reason"), "payload_checksum");

  absl::StatusOr<EventStats> stats = log.ReadStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->hits, 1);
  EXPECT_EQ(stats->compile_ms_saved, 12.5);
  EXPECT_EQ(stats->misses_by_reason, (std::map<std::string, int64_t>{{"truncated", 1}}));
  EXPECT_EQ(stats->writes, 1);
  EXPECT_EQ(stats->bytes_written, 70);
  EXPECT_EQ(stats->evictions, 1);
  EXPECT_EQ(stats->corrupt, 1);
  EXPECT_EQ(stats->unreadable_lines, 0);
}

TEST_F(EventLogTest, AMissingLogIsEmptyStats) {
  absl::StatusOr<EventStats> stats = EventLog(dir_.path(), kDefaultEventLogMaxBytes).ReadStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->hits + stats->total_misses() + stats->writes, 0);
}

TEST_F(EventLogTest, LinesThatAreNotEventsAreCountedAndSkipped) {
  WriteFile(LogPath(),
            "{\"event\":\"hit\",\"key\":\"k\",\"compile_ms\":2}\n"
            "{\"event\":\"hit\",\"compile_ms\":\"not a number\"}\n"
            "{\"event\":\"miss\",\"key\":\"k\",\"rea\n"
            "[1,2]\n"
            "{\"event\":\"unknown\"}\n");
  absl::StatusOr<EventStats> stats = EventLog(dir_.path(), kDefaultEventLogMaxBytes).ReadStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->hits, 1);
  EXPECT_EQ(stats->compile_ms_saved, 2);
  EXPECT_EQ(stats->unreadable_lines, 4);
}

TEST_F(EventLogTest, RotatesPastTheBoundKeepingOneOlderGeneration) {
  constexpr uint64_t kMaxBytes = 1000;
  const EventLog log(dir_.path(), kMaxBytes);
  constexpr int kEvents = 100;
  for (int i = 0; i < kEvents; ++i) {
    ASSERT_TRUE(log.Append({.kind = EventKind::kHit, .key = absl::StrCat("key", i)}).ok());
  }
  const std::vector<Json> current = ReadLines(LogPath());
  const std::vector<Json> rotated = ReadLines(RotatedPath());
  ASSERT_FALSE(current.empty());
  ASSERT_FALSE(rotated.empty());
  const uint64_t line_size = current.back().dump().size() + 1;
  EXPECT_LE(ReadFile(LogPath()).size(), kMaxBytes);
  EXPECT_LE(ReadFile(RotatedPath()).size(), kMaxBytes);
  EXPECT_GT(ReadFile(RotatedPath()).size(), kMaxBytes - line_size);
  EXPECT_EQ(current.back().at("key"), absl::StrCat("key", kEvents - 1));
  EXPECT_EQ(rotated.back().at("key"), absl::StrCat("key", kEvents - 1 - current.size()));

  // Both generations are read; the ones before them are gone.
  absl::StatusOr<EventStats> stats = log.ReadStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->hits, static_cast<int64_t>(current.size() + rotated.size()));
  EXPECT_LT(stats->hits, kEvents);
}

TEST_F(EventLogTest, ConcurrentAppendsFromProcessesNeverInterleave) {
  constexpr int kChildren = 8;
  constexpr int kLinesEach = 200;
  RunInChildProcesses(kChildren, [&](int child) {
    const EventLog log(dir_.path(), kDefaultEventLogMaxBytes);
    for (int i = 0; i < kLinesEach; ++i) {
      // Long details make a torn or interleaved line likely if appends were not atomic.
      const Event miss{.kind = EventKind::kMiss,
                       .key = absl::StrCat("k", child),
                       .reason = MissReason::kNotFound,
                       .detail = std::string(2000, 'a' + child)};
      if (!log.Append(miss).ok()) return 1;
    }
    return 0;
  });
  absl::StatusOr<EventStats> stats = EventLog(dir_.path(), kDefaultEventLogMaxBytes).ReadStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->unreadable_lines, 0);
  EXPECT_EQ(stats->misses_by_reason["not_found"], kChildren * kLinesEach);
}

TEST_F(EventLogTest, TheStoreLogsEveryOutcomeAndStatsReadThemBack) {
  absl::StatusOr<std::unique_ptr<Store>> opened = Store::Open({.dir = dir_.path(), .producer_version = "v"});
  ASSERT_TRUE(opened.ok());
  Store& store = **opened;
  ASSERT_TRUE(store.Put("a", "payload a", 30, "").ok());
  ASSERT_TRUE(store.Put("b", "payload b", 20, "").ok());
  ASSERT_TRUE(std::holds_alternative<Entry>(store.Lookup("a")));
  ASSERT_TRUE(std::holds_alternative<Entry>(store.Lookup("a")));
  ASSERT_TRUE(std::holds_alternative<Miss>(store.Lookup("absent")));
  WriteFile(dir_ / EntryFileName("b"), absl::StrCat(kEntryMagic, "damaged"));  // the cache's, damaged
  ASSERT_TRUE(std::holds_alternative<Miss>(store.Lookup("b")));
  ASSERT_TRUE(store.EvictTo(0).ok());

  absl::StatusOr<CacheStats> stats = store.Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->entries, 0);
  EXPECT_EQ(stats->bytes, 0u);
  EXPECT_EQ(stats->events.hits, 2);
  EXPECT_EQ(stats->events.compile_ms_saved, 60);
  EXPECT_EQ(stats->events.misses_by_reason, (std::map<std::string, int64_t>{{"not_found", 1}, {"format_version", 1}}));
  EXPECT_EQ(stats->events.writes, 2);
  EXPECT_EQ(stats->events.corrupt, 1);
  EXPECT_EQ(stats->events.evictions, 1);
  EXPECT_EQ(stats->events.bytes_written, store.counters().bytes_written);
}

}  // namespace event_log_test
}  // namespace lazyrt::cache
