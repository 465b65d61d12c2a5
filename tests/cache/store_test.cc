#include "cache/store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cache/entry_format.h"
#include "cache/layout.h"
#include "cache/location.h"
#include "tests/cache/child_processes.h"
#include "tests/cache/scratch_dir.h"

namespace lazyrt::cache {
namespace store_test {

using testing::DirNames;
using testing::Exists;
using testing::MtimeSeconds;
using testing::ReadFile;
using testing::RunInChildProcesses;
using testing::ScratchDir;
using testing::SetMtime;
using testing::WriteFile;

constexpr absl::string_view kProducer = "test-compiler/1";

// Bytes that differ per key, writer and iteration, in length too, and that say who wrote them, so
// a reader can tell a whole entry from any mix of two.
std::string MakePayload(absl::string_view key, int writer, int iteration) {
  std::string payload = absl::StrCat(key, "|", writer, "|", iteration, "|");
  std::mt19937_64 bytes(std::hash<std::string>{}(payload));
  const size_t size = 20000 + bytes() % 40000;
  while (payload.size() < size) payload.push_back(static_cast<char>(bytes()));
  return payload;
}

// Whether `payload` is exactly what MakePayload produced for `key` and the writer and iteration
// it names.
bool IsWholePayload(absl::string_view key, const std::string& payload) {
  int writer = -1, iteration = -1;
  const std::string prefix = absl::StrCat(key, "|");
  if (!absl::StartsWith(payload, prefix) ||
      std::sscanf(payload.c_str() + prefix.size(), "%d|%d|", &writer, &iteration) != 2) {
    return false;
  }
  return payload == MakePayload(key, writer, iteration);
}

class StoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<Store> OpenStore(StoreOptions options = {}) {
    if (options.dir.empty()) options.dir = dir_.path();
    if (options.producer_version.empty()) options.producer_version = std::string(kProducer);
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  void PutOk(Store& store, absl::string_view key, absl::string_view payload, double compile_ms = 5) {
    absl::StatusOr<PutOutcome> outcome = store.Put(key, payload, compile_ms, R"({"nodes":3})");
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    ASSERT_EQ(*outcome, PutOutcome::kWritten);
  }

  std::string EntryPath(absl::string_view key) const { return dir_ / EntryFileName(key); }

  ScratchDir dir_;
};

const Miss* MissOf(const LookupResult& result) { return std::get_if<Miss>(&result); }

std::optional<MissReason> ReasonOf(const LookupResult& result) {
  const Miss* miss = MissOf(result);
  return miss == nullptr ? std::nullopt : std::optional<MissReason>(miss->reason);
}

TEST_F(StoreTest, PutThenLookupReturnsTheSameBytesAndHeader) {
  std::unique_ptr<Store> store = OpenStore();
  const std::string payload = MakePayload("k", 0, 0);
  const int64_t before_ms = absl::ToUnixMillis(absl::Now());
  PutOk(*store, "k", payload, 42.5);

  LookupResult result = store->Lookup("k");
  ASSERT_TRUE(std::holds_alternative<Entry>(result)) << MissOf(result)->detail;
  const Entry& entry = std::get<Entry>(result);
  EXPECT_EQ(entry.payload, payload);
  EXPECT_EQ(entry.header.key, "k");
  EXPECT_EQ(entry.header.producer_version, kProducer);
  EXPECT_EQ(entry.header.compile_ms, 42.5);
  EXPECT_EQ(entry.header.metadata, R"({"nodes":3})");
  EXPECT_EQ(entry.header.raw_size, payload.size());
  EXPECT_GE(entry.header.created_unix_ms, before_ms);
  EXPECT_LE(entry.header.created_unix_ms, absl::ToUnixMillis(absl::Now()));

  const CounterSnapshot counters = store->counters();
  EXPECT_EQ(counters.hits, 1);
  EXPECT_EQ(counters.writes, 1);
  EXPECT_EQ(counters.bytes_written, static_cast<int64_t>(ReadFile(EntryPath("k")).size()));
  EXPECT_EQ(counters.total_misses(), 0);
}

// The names this thread's next `count` temporary files of `final_name` would take, as another process
// with this pid and thread id would have left them (one killed early in the write: the start of the
// file's first bytes). Returns their paths.
std::vector<std::string> TakeNextTemporaryNames(const ScratchDir& dir, absl::string_view final_name,
                                                absl::string_view start, int count) {
  const std::string probe = UniqueTempFileName(final_name);
  const std::string counted = probe.substr(0, probe.rfind(".tmp"));
  const uint64_t counter = std::stoull(counted.substr(counted.rfind('.') + 1));
  EXPECT_EQ(probe, absl::StrCat(".", final_name, ".", getpid(), ".", gettid(), ".", counter, ".tmp"));
  std::vector<std::string> taken;
  for (uint64_t next = counter + 1; next <= counter + static_cast<uint64_t>(count); ++next) {
    taken.push_back(dir / absl::StrCat(".", final_name, ".", getpid(), ".", gettid(), ".", next, ".tmp"));
    EXPECT_TRUE(IsTempFileName(taken.back().substr(dir.path().size() + 1))) << taken.back();
    WriteFile(taken.back(), std::string(start));
  }
  return taken;
}

// Another process with this pid and thread id (in another pid namespace, or killed mid-write and
// restarted in a container) can have left the names this one's writes want next: the mark and the
// entry are written under the names after them, and the leftovers stay for the stale sweep.
TEST_F(StoreTest, TemporaryNamesTakenByAnotherProcessWithThisPidAreSkipped) {
  std::vector<std::string> leftovers = TakeNextTemporaryNames(dir_, kCacheDirTagFileName, "Signature: 8a4", 8);
  std::unique_ptr<Store> store = OpenStore();
  EXPECT_TRUE(IsMarkedCacheDir(dir_.path())) << "the mark was not written past the taken names";
  EXPECT_TRUE(store->warning().empty()) << store->warning();

  for (const std::string& taken : TakeNextTemporaryNames(dir_, EntryFileName("k"), "LZRT", 8)) {
    leftovers.push_back(taken);
  }
  const std::string payload = MakePayload("k", 0, 0);
  PutOk(*store, "k", payload);
  LookupResult result = store->Lookup("k");
  ASSERT_TRUE(std::holds_alternative<Entry>(result)) << MissOf(result)->detail;
  EXPECT_EQ(std::get<Entry>(result).payload, payload);
  for (const std::string& leftover : leftovers) EXPECT_TRUE(Exists(leftover)) << leftover;

  // A write that finds every name it may try taken fails, naming the last.
  const std::vector<std::string> all_taken = TakeNextTemporaryNames(dir_, EntryFileName("k"), "LZRT", 64);
  absl::StatusOr<PutOutcome> blocked = store->Put("k", payload, 5, "{}");
  ASSERT_FALSE(blocked.ok());
  EXPECT_TRUE(absl::StrContains(blocked.status().message(), all_taken.back())) << blocked.status();
}

TEST_F(StoreTest, MissingKeyIsNotFound) {
  std::unique_ptr<Store> store = OpenStore();
  EXPECT_EQ(ReasonOf(store->Lookup("absent")), MissReason::kNotFound);
  EXPECT_EQ(store->counters().misses(MissReason::kNotFound), 1);
}

TEST_F(StoreTest, AnythingButARegularFileUnderAnEntryNameIsNotFoundAndLeftAlone) {
  std::unique_ptr<Store> store = OpenStore();
  ASSERT_EQ(mkfifo(EntryPath("fifo").c_str(), 0600), 0);  // opening it blocking would hang
  ASSERT_EQ(mkdir(EntryPath("dir").c_str(), 0700), 0);
  EXPECT_EQ(ReasonOf(store->Lookup("fifo")), MissReason::kNotFound);
  EXPECT_EQ(ReasonOf(store->Lookup("dir")), MissReason::kNotFound);
  EXPECT_TRUE(Exists(EntryPath("fifo")));
  EXPECT_TRUE(Exists(EntryPath("dir")));
}

TEST_F(StoreTest, InvalidKeysAreRejectedByPutAndMissByLookup) {
  std::unique_ptr<Store> store = OpenStore();
  EXPECT_EQ(store->Put("../escape", "x", 1, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReasonOf(store->Lookup("../escape")), MissReason::kNotFound);
  EXPECT_EQ(store->counters().write_failures, 1);
}

// Writes `damaged` as the entry file of `key`, looks it up, and checks: a miss with `reason`, the
// file gone, and a fresh Put + Lookup of the key hitting.
void ExpectDamageIsAMissThatHeals(Store& store, const std::string& path, absl::string_view key,
                                  const std::string& damaged, MissReason reason, const std::string& context) {
  WriteFile(path, damaged);
  EXPECT_EQ(ReasonOf(store.Lookup(key)), reason) << context;
  // A file without the cache's magic is not the cache's to remove (it may be the user's); a write
  // replaces it all the same.
  EXPECT_EQ(Exists(path), reason == MissReason::kBadMagic) << context;
  const std::string payload = MakePayload(key, 1, 0);
  ASSERT_TRUE(store.Put(key, payload, 1, "").ok()) << context;
  LookupResult healed = store.Lookup(key);
  ASSERT_TRUE(std::holds_alternative<Entry>(healed)) << context << ": " << MissOf(healed)->detail;
  EXPECT_EQ(std::get<Entry>(healed).payload, payload) << context;
}

TEST_F(StoreTest, TruncationAtEveryOffsetIsATruncatedMissAndTheFileIsRemoved) {
  std::unique_ptr<Store> store = OpenStore();
  PutOk(*store, "t", std::string(64, 'a') + "bcdefgh");
  const std::string file = ReadFile(EntryPath("t"));
  for (size_t size = 0; size < file.size(); ++size) {
    ExpectDamageIsAMissThatHeals(*store, EntryPath("t"), "t", file.substr(0, size), MissReason::kTruncated,
                                 absl::StrCat("size ", size));
  }
  EXPECT_EQ(store->counters().misses(MissReason::kTruncated), static_cast<int64_t>(file.size()));
}

TEST_F(StoreTest, EveryFlippedByteIsAMissWithItsReasonAndTheFileIsRemoved) {
  std::unique_ptr<Store> store = OpenStore();
  PutOk(*store, "f", std::string(64, 'a') + "bcdefgh");
  const std::string file = ReadFile(EntryPath("f"));
  const EntryHeader header = std::get<Entry>(store->Lookup("f")).header;
  const size_t header_size = EncodedHeaderSize(header);
  for (size_t offset = 0; offset < file.size(); ++offset) {
    std::string damaged = file;
    damaged[offset] = static_cast<char>(damaged[offset] ^ 0x80);
    const MissReason expected = offset < 8             ? MissReason::kBadMagic
                                : offset < 12          ? MissReason::kFormatVersion
                                : offset < header_size ? MissReason::kHeaderChecksum
                                                       : MissReason::kPayloadChecksum;
    ExpectDamageIsAMissThatHeals(*store, EntryPath("f"), "f", damaged, expected, absl::StrCat("offset ", offset));
  }
}

TEST_F(StoreTest, ZeroedHeaderIsBadMagic) {
  std::unique_ptr<Store> store = OpenStore();
  PutOk(*store, "z", "payload");
  std::string file = ReadFile(EntryPath("z"));
  std::fill(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(kFixedHeaderSize), '\0');
  ExpectDamageIsAMissThatHeals(*store, EntryPath("z"), "z", file, MissReason::kBadMagic, "zeroed");
}

TEST_F(StoreTest, AnotherFormatVersionIsAMissAndRemoved) {
  std::unique_ptr<Store> store = OpenStore();
  PutOk(*store, "v", "payload");
  const std::string file = ReadFile(EntryPath("v"));
  EntryHeader header = std::get<Entry>(store->Lookup("v")).header;
  header.format_version = kEntryFormatVersion + 1;
  absl::StatusOr<std::string> other_version = EncodeHeader(header);
  ASSERT_TRUE(other_version.ok());
  ExpectDamageIsAMissThatHeals(*store, EntryPath("v"), "v", *other_version + file.substr(EncodedHeaderSize(header)),
                               MissReason::kFormatVersion, "format version");
}

TEST_F(StoreTest, AnotherProducerVersionIsAMissAndRemoved) {
  PutOk(*OpenStore({.producer_version = "test-compiler/0"}), "p", "old compiler's payload");
  std::unique_ptr<Store> store = OpenStore();
  const std::string old_file = ReadFile(EntryPath("p"));
  ExpectDamageIsAMissThatHeals(*store, EntryPath("p"), "p", old_file, MissReason::kProducerVersion, "producer version");
}

TEST_F(StoreTest, EntryRenamedToAnotherKeyIsKeyMismatchAndRemoved) {
  std::unique_ptr<Store> store = OpenStore();
  PutOk(*store, "a", "payload of a");
  ASSERT_EQ(std::rename(EntryPath("a").c_str(), EntryPath("b").c_str()), 0);
  const std::string file = ReadFile(EntryPath("b"));
  ExpectDamageIsAMissThatHeals(*store, EntryPath("b"), "b", file, MissReason::kKeyMismatch, "renamed");
}

TEST_F(StoreTest, ReportUnloadableCountsAndRemovesTheEntry) {
  std::unique_ptr<Store> store = OpenStore();
  PutOk(*store, "u", "payload");
  ASSERT_TRUE(std::holds_alternative<Entry>(store->Lookup("u")));
  store->ReportUnloadable("u", "executable failed validation");
  EXPECT_FALSE(Exists(EntryPath("u")));
  EXPECT_EQ(store->counters().misses(MissReason::kUnloadable), 1);
  EXPECT_EQ(store->counters().hits, 1);
  EXPECT_EQ(ReasonOf(store->Lookup("u")), MissReason::kNotFound);
}

TEST_F(StoreTest, ReadOnlyLooksUpButWritesTouchesAndRemovesNothing) {
  PutOk(*OpenStore(), "r", "payload");
  PutOk(*OpenStore(), "damaged", "payload");
  WriteFile(EntryPath("damaged"), "garbage");
  SetMtime(EntryPath("r"), 1000);
  const std::vector<std::string> names_before = DirNames(dir_.path());
  const std::string events_before = ReadFile(dir_ / "events.jsonl");

  std::unique_ptr<Store> store = OpenStore({.read_only = true});
  LookupResult hit = store->Lookup("r");
  ASSERT_TRUE(std::holds_alternative<Entry>(hit));
  EXPECT_EQ(std::get<Entry>(hit).payload, "payload");
  EXPECT_EQ(ReasonOf(store->Lookup("damaged")), MissReason::kBadMagic);
  absl::StatusOr<PutOutcome> outcome = store->Put("new", "payload", 100, "");
  ASSERT_TRUE(outcome.ok());
  EXPECT_EQ(*outcome, PutOutcome::kSkippedReadOnly);
  EXPECT_EQ(store->Remove("r").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->EvictTo(0).status().code(), absl::StatusCode::kFailedPrecondition);

  EXPECT_EQ(DirNames(dir_.path()), names_before);
  EXPECT_EQ(ReadFile(dir_ / "events.jsonl"), events_before);
  EXPECT_EQ(ReadFile(EntryPath("damaged")), "garbage");
  EXPECT_EQ(MtimeSeconds(EntryPath("r")), 1000);
  EXPECT_EQ(store->counters().hits, 1);
  EXPECT_EQ(store->counters().writes, 0);
}

TEST_F(StoreTest, ReadOnlyOpenOfAMissingDirectoryFailsAndCreatesNothing) {
  const std::string missing = dir_ / "missing";
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open({.dir = missing, .producer_version = "v", .read_only = true});
  EXPECT_FALSE(store.ok());
  EXPECT_FALSE(Exists(missing));
}

TEST_F(StoreTest, ResultsBelowTheMinimumCompileTimeAreNotStored) {
  std::unique_ptr<Store> store = OpenStore({.min_compile_ms = 10});
  absl::StatusOr<PutOutcome> fast = store->Put("fast", "payload", 9.9, "");
  ASSERT_TRUE(fast.ok());
  EXPECT_EQ(*fast, PutOutcome::kSkippedBelowMinCompileTime);
  EXPECT_FALSE(Exists(EntryPath("fast")));
  PutOk(*store, "slow", "payload", 10);
  EXPECT_TRUE(Exists(EntryPath("slow")));
}

TEST_F(StoreTest, WriteIntoARemovedDirectoryFailsClearlyAndLookupsGoOn) {
  std::unique_ptr<Store> store = OpenStore();
  PutOk(*store, "before", "payload");
  std::filesystem::remove_all(dir_.path());

  absl::StatusOr<PutOutcome> outcome = store->Put("after", "payload", 5, "");
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(outcome.status().message(), dir_.path())) << outcome.status();
  EXPECT_TRUE(absl::StrContains(outcome.status().message(), "No such file or directory")) << outcome.status();
  EXPECT_EQ(store->counters().write_failures, 1);
  EXPECT_EQ(ReasonOf(store->Lookup("before")), MissReason::kNotFound);
  EXPECT_EQ(ReasonOf(store->Lookup("after")), MissReason::kNotFound);
}

TEST_F(StoreTest, WriteIntoADirectoryReplacedByAFileFailsClearlyAndLookupsGoOn) {
  std::unique_ptr<Store> store = OpenStore();
  PutOk(*store, "before", "payload");
  std::filesystem::remove_all(dir_.path());
  WriteFile(dir_.path(), "now a file");

  absl::StatusOr<PutOutcome> outcome = store->Put("after", "payload", 5, "");
  ASSERT_FALSE(outcome.ok());
  EXPECT_TRUE(absl::StrContains(outcome.status().message(), "Not a directory")) << outcome.status();
  EXPECT_TRUE(absl::StrContains(outcome.status().message(), dir_.path())) << outcome.status();
  EXPECT_EQ(store->counters().write_failures, 1);
  EXPECT_EQ(ReasonOf(store->Lookup("before")), MissReason::kNotFound);
}

std::vector<std::string> KeysOf(const std::vector<EvictedEntry>& evicted) {
  std::vector<std::string> keys;
  for (const EvictedEntry& entry : evicted) keys.push_back(entry.key);
  return keys;
}

TEST_F(StoreTest, EvictionRemovesLeastRecentlyUsedFirst) {
  std::unique_ptr<Store> store = OpenStore();
  for (absl::string_view key : {"a", "b", "c", "d"}) PutOk(*store, key, MakePayload(key, 0, 0));
  SetMtime(EntryPath("a"), 1000);
  SetMtime(EntryPath("b"), 4000);
  SetMtime(EntryPath("c"), 2000);
  SetMtime(EntryPath("d"), 3000);
  const uint64_t keep = ReadFile(EntryPath("b")).size() + ReadFile(EntryPath("d")).size();

  absl::StatusOr<std::vector<EvictedEntry>> evicted = store->EvictTo(keep);
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_EQ(KeysOf(*evicted), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ((*evicted)[0].last_used, absl::FromUnixSeconds(1000));
  EXPECT_FALSE(Exists(EntryPath("a")));
  EXPECT_FALSE(Exists(EntryPath("c")));
  EXPECT_TRUE(Exists(EntryPath("b")));
  EXPECT_TRUE(Exists(EntryPath("d")));
  EXPECT_EQ(store->counters().evictions, 2);
}

TEST_F(StoreTest, AHitMakesAnEntryRecentlyUsed) {
  std::unique_ptr<Store> store = OpenStore();
  for (absl::string_view key : {"old", "older"}) PutOk(*store, key, MakePayload(key, 0, 0));
  SetMtime(EntryPath("older"), 1000);
  SetMtime(EntryPath("old"), 2000);
  ASSERT_TRUE(std::holds_alternative<Entry>(store->Lookup("older")));
  EXPECT_GT(MtimeSeconds(EntryPath("older")), 2000);

  absl::StatusOr<std::vector<EvictedEntry>> evicted = store->EvictTo(ReadFile(EntryPath("older")).size());
  ASSERT_TRUE(evicted.ok());
  EXPECT_EQ(KeysOf(*evicted), std::vector<std::string>{"old"});
}

TEST_F(StoreTest, PutEvictsOthersDownToTheLimitButNeverTheNewEntry) {
  const std::string big = MakePayload("big", 0, 0);
  const uint64_t big_entry_size = [&] {
    PutOk(*OpenStore(), "probe", big);
    const uint64_t size = ReadFile(EntryPath("probe")).size();
    std::filesystem::remove(EntryPath("probe"));
    return size;
  }();
  std::unique_ptr<Store> store = OpenStore({.max_bytes = big_entry_size * 3 / 2});
  PutOk(*store, "a", big);
  PutOk(*store, "b", "small");
  // Last used in the future, so the entry written next is the least recently used of all.
  const time_t tomorrow = absl::ToUnixSeconds(absl::Now() + absl::Hours(24));
  SetMtime(EntryPath("a"), tomorrow);
  SetMtime(EntryPath("b"), tomorrow + 1);

  PutOk(*store, "new", big);
  EXPECT_TRUE(Exists(EntryPath("new")));
  EXPECT_FALSE(Exists(EntryPath("a")));
  EXPECT_TRUE(Exists(EntryPath("b")));
  EXPECT_EQ(store->counters().evictions, 1);
}

TEST_F(StoreTest, AnEntryLargerThanTheWholeLimitIsNotWritten) {
  std::unique_ptr<Store> store = OpenStore({.max_bytes = 1000});
  PutOk(*store, "small", "payload");
  absl::StatusOr<PutOutcome> outcome = store->Put("big", MakePayload("big", 0, 0), 5, "");
  ASSERT_TRUE(outcome.ok());
  EXPECT_EQ(*outcome, PutOutcome::kSkippedLargerThanLimit);
  EXPECT_FALSE(Exists(EntryPath("big")));
  EXPECT_TRUE(Exists(EntryPath("small")));
}

TEST_F(StoreTest, EvictionRemovesTempFilesOfDeadWritersOnly) {
  std::unique_ptr<Store> store = OpenStore();
  const std::string stale = dir_ / UniqueTempFileName(EntryFileName("x"));
  const std::string in_progress = dir_ / UniqueTempFileName(EntryFileName("y"));
  WriteFile(stale, "LZRTCA");  // writes cut short
  WriteFile(in_progress, "LZRTCA");
  SetMtime(stale, absl::ToUnixSeconds(absl::Now() - absl::Hours(2)));

  ASSERT_TRUE(store->EvictTo(UINT64_MAX).ok());
  EXPECT_FALSE(Exists(stale));
  EXPECT_TRUE(Exists(in_progress));
}

TEST_F(StoreTest, ListShowsHeadersSizesAndDefectsAndSkipsOtherFiles) {
  std::unique_ptr<Store> store = OpenStore();
  PutOk(*store, "good", "payload", 7);
  PutOk(*store, "bad", "payload");
  WriteFile(EntryPath("bad"), "garbage");
  SetMtime(EntryPath("good"), 3000);
  WriteFile(dir_ / UniqueTempFileName(EntryFileName("good")), "partial");

  absl::StatusOr<std::vector<ListedEntry>> listed = store->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  const ListedEntry& bad = (*listed)[0];
  const ListedEntry& good = (*listed)[1];
  EXPECT_EQ(bad.key, "bad");
  ASSERT_TRUE(std::holds_alternative<Miss>(bad.header));
  EXPECT_EQ(std::get<Miss>(bad.header).reason, MissReason::kBadMagic);
  EXPECT_EQ(good.key, "good");
  EXPECT_EQ(good.file_bytes, ReadFile(EntryPath("good")).size());
  EXPECT_EQ(good.last_used, absl::FromUnixSeconds(3000));
  ASSERT_TRUE(std::holds_alternative<EntryHeader>(good.header));
  EXPECT_EQ(std::get<EntryHeader>(good.header).compile_ms, 7);
  EXPECT_EQ(std::get<EntryHeader>(good.header).metadata, R"({"nodes":3})");
}

TEST_F(StoreTest, VerifyFindsDefectsWithoutRemovingOrCountingAnything) {
  std::unique_ptr<Store> store = OpenStore();
  PutOk(*store, "good", "payload");
  PutOk(*store, "bad", "payload");
  std::string file = ReadFile(EntryPath("bad"));
  file.back() = static_cast<char>(file.back() ^ 1);
  WriteFile(EntryPath("bad"), file);

  EXPECT_FALSE(store->Verify("good").has_value());
  EXPECT_EQ(store->Verify("bad")->reason, MissReason::kPayloadChecksum);
  EXPECT_EQ(store->Verify("absent")->reason, MissReason::kNotFound);
  absl::StatusOr<std::vector<VerifiedEntry>> all = store->VerifyAll();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].key, "bad");
  EXPECT_EQ((*all)[0].defect->reason, MissReason::kPayloadChecksum);
  EXPECT_EQ((*all)[1].key, "good");
  EXPECT_FALSE((*all)[1].defect.has_value());
  EXPECT_TRUE(Exists(EntryPath("bad")));
  EXPECT_EQ(store->counters().total_misses(), 0);
}

TEST_F(StoreTest, RemoveAndClear) {
  std::unique_ptr<Store> store = OpenStore();
  for (absl::string_view key : {"a", "b", "c"}) PutOk(*store, key, "payload");
  EXPECT_TRUE(store->Remove("a").ok());
  EXPECT_FALSE(Exists(EntryPath("a")));
  EXPECT_EQ(store->Remove("a").code(), absl::StatusCode::kNotFound);
  absl::StatusOr<int64_t> cleared = store->Clear();
  ASSERT_TRUE(cleared.ok());
  EXPECT_EQ(*cleared, 2);
  EXPECT_EQ(DirNames(dir_.path()), (std::vector<std::string>{"CACHEDIR.TAG", "events.jsonl"}));
}

TEST_F(StoreTest, AGroupOrOtherWritableDirectoryIsDistrusted) {
  PutOk(*OpenStore(), "k", "payload");
  ASSERT_EQ(chmod(dir_.path().c_str(), 0777), 0);
  const std::vector<std::string> names_before = DirNames(dir_.path());
  const std::string events_before = ReadFile(dir_ / "events.jsonl");

  std::unique_ptr<Store> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->trusted());
  EXPECT_TRUE(absl::StrContains(store->warning(), dir_.path())) << store->warning();
  const LookupResult result = store->Lookup("k");
  EXPECT_EQ(ReasonOf(result), MissReason::kUntrustedDirectory);
  absl::StatusOr<PutOutcome> outcome = store->Put("new", "payload", 5, "");
  ASSERT_TRUE(outcome.ok());
  EXPECT_EQ(*outcome, PutOutcome::kSkippedUntrustedDirectory);
  EXPECT_EQ(store->Clear().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->counters().misses(MissReason::kUntrustedDirectory), 1);
  EXPECT_EQ(DirNames(dir_.path()), names_before);
  EXPECT_EQ(ReadFile(dir_ / "events.jsonl"), events_before);
}

// One child process of the concurrency test: puts and looks up a few keys at random. Returns its
// exit code: 0 when every lookup was a not_found miss or a hit with exactly one writer's bytes.
int WriteAndReadConcurrently(const std::string& dir, int writer) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open({.dir = dir, .producer_version = std::string(kProducer)});
  if (!store.ok()) return 10;
  std::mt19937 choose(static_cast<unsigned>(writer));
  for (int i = 0; i < 100; ++i) {
    const std::string key = absl::StrCat("key", choose() % 3);
    if (choose() % 2 == 0) {
      absl::StatusOr<PutOutcome> outcome = (*store)->Put(key, MakePayload(key, writer, i), 5, "");
      if (!outcome.ok() || *outcome != PutOutcome::kWritten) return 11;
      continue;
    }
    const LookupResult result = (*store)->Lookup(key);
    if (const Miss* miss = MissOf(result)) {
      if (miss->reason != MissReason::kNotFound) return 12;
    } else if (!IsWholePayload(key, std::get<Entry>(result).payload)) {
      return 13;
    }
  }
  return 0;
}

TEST_F(StoreTest, ConcurrentProcessesSeeWholeEntriesOrNone) {
  RunInChildProcesses(8, [&](int writer) { return WriteAndReadConcurrently(dir_.path(), writer); });
  for (const std::string& name : DirNames(dir_.path())) {
    EXPECT_FALSE(IsTempFileName(name)) << name;
  }
  std::unique_ptr<Store> store = OpenStore();
  absl::StatusOr<std::vector<VerifiedEntry>> verified = store->VerifyAll();
  ASSERT_TRUE(verified.ok());
  for (const VerifiedEntry& entry : *verified) {
    EXPECT_FALSE(entry.defect.has_value()) << entry.key << ": " << entry.defect->detail;
  }
}

// Processes that open one new directory at the same moment race to mark it: whichever mark lands
// first, every one of them must take the directory for the cache's and write.
TEST_F(StoreTest, ProcessesOpeningOneNewDirectoryAtOnceAllWrite) {
  for (int round = 0; round < 50; ++round) {
    ScratchDir fresh;
    RunInChildProcesses(8, [&](int writer) {
      absl::StatusOr<std::unique_ptr<Store>> store =
          Store::Open({.dir = fresh.path(), .producer_version = std::string(kProducer)});
      if (!store.ok()) return 10;
      const std::string key = absl::StrCat("key", writer);
      absl::StatusOr<PutOutcome> outcome = (*store)->Put(key, MakePayload(key, writer, 0), 5, "");
      if (!outcome.ok()) return 11;
      return *outcome == PutOutcome::kWritten ? 0 : 20 + static_cast<int>(*outcome);
    });
    if (HasFailure()) FAIL() << "in round " << round;
  }
}

TEST_F(StoreTest, ConcurrentThreadsShareOneStore) {
  std::unique_ptr<Store> store = OpenStore();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int writer = 0; writer < 8; ++writer) {
    threads.emplace_back([&, writer] {
      std::mt19937 choose(static_cast<unsigned>(writer));
      for (int i = 0; i < 50; ++i) {
        const std::string key = absl::StrCat("key", choose() % 3);
        if (choose() % 2 == 0) {
          if (!store->Put(key, MakePayload(key, writer, i), 5, "").ok()) ++failures;
          continue;
        }
        const LookupResult result = store->Lookup(key);
        const Miss* miss = MissOf(result);
        if (miss != nullptr ? miss->reason != MissReason::kNotFound
                            : !IsWholePayload(key, std::get<Entry>(result).payload)) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  const CounterSnapshot counters = store->counters();
  EXPECT_EQ(counters.hits + counters.total_misses() + counters.writes, 8 * 50);
}

}  // namespace store_test
}  // namespace lazyrt::cache
