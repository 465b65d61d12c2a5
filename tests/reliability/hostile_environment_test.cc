// The cache, the loader and the readers of outside files against a hostile or unlucky environment
// (issue 16), one test per case, by class:
//   1. entries whose checksums hold but that do not fit their graph;
//   2. files in the cache's directory that the cache did not write;
//   3. files the cache opens besides entries (the event log): symlinks, FIFOs, held locks, size;
//   4. the path to the cache directory;
//   5. values from outside: settings, a file size limit, IDX files, run reports.
// The same classes against the real programs: cache_faults_crafted and cache_faults_hostile.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "cache/entry_metadata.h"
#include "cache/event_log.h"
#include "cache/layout.h"
#include "cache/location.h"
#include "cache/store.h"
#include "lazy/idx_dataset.h"
#include "lazy/options.h"
#include "pjrt_sim/client.h"
#include "pjrt_sim/executable.h"
#include "tests/cache/child_processes.h"
#include "tests/cache/scratch_dir.h"
#include "tools/cli/run_report_reader.h"

namespace lazyrt {
namespace hostile_environment_test {

using cache::EntryMetadata;
using cache::LookupResult;
using cache::Miss;
using cache::MissReason;
using cache::PutOutcome;
using cache::Store;
using cache::testing::DirNames;
using cache::testing::Exists;
using cache::testing::ReadFile;
using cache::testing::ScratchDir;
using cache::testing::SetMtime;
using cache::testing::WriteFile;
using ::testing::HasSubstr;

constexpr absl::string_view kProducer = "test-compiler/1";

std::unique_ptr<Store> OpenStore(const std::string& dir, bool read_only = false) {
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open({.dir = dir, .producer_version = std::string(kProducer), .read_only = read_only});
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

EntryMetadata Graph(const std::string& key, const std::string& graph_hash, std::vector<int64_t> result_dims) {
  EntryMetadata m;
  m.key = key;
  m.graph_hash = graph_hash;
  m.ingredients = {.lazyrt_version = "0.1.0",
                   .lowering_version = "lowering/1",
                   .compiler_version = "compiler/4",
                   .device_kind = "sim",
                   .device_count = 1,
                   .compile_options = "o1"};
  m.parameters = {{"f32", {2, 3}}};
  m.results = {{"f32", std::move(result_dims)}};
  m.nodes = 3;
  return m;
}

MissReason ReasonOf(const LookupResult& result) {
  const Miss* miss = std::get_if<Miss>(&result);
  EXPECT_NE(miss, nullptr);
  return miss != nullptr ? miss->reason : MissReason::kNotFound;
}

// ---- 1. An entry that passes its checksum but does not fit its graph ------------------------------

TEST(EntryFitsItsGraph, AnotherGraphsSignatureIsAGraphMismatchAndTheEntryRemoved) {
  ScratchDir dir;
  std::unique_ptr<Store> store = OpenStore(dir.path());
  const EntryMetadata stored = Graph("k", "h1", {2, 3});
  ASSERT_TRUE(store->Put("k", "payload", 5, cache::EncodeEntryMetadata(stored)).ok());
  const EntryMetadata running = Graph("k", "h1", {4});
  const LookupResult result = store->Lookup("k", &running);
  ASSERT_EQ(ReasonOf(result), MissReason::kGraphMismatch);
  EXPECT_THAT(std::get<Miss>(result).detail, HasSubstr("result 0 is f32[2,3], the graph's is f32[4]"));
  EXPECT_FALSE(Exists(dir / cache::EntryFileName("k")));
  EXPECT_TRUE(std::holds_alternative<cache::Entry>(store->Lookup("k")) == false);
}

TEST(EntryFitsItsGraph, MetadataOfAnotherKeyOrNoMetadataIsAGraphMismatch) {
  ScratchDir dir;
  std::unique_ptr<Store> store = OpenStore(dir.path());
  const EntryMetadata running = Graph("k", "h1", {2});
  ASSERT_TRUE(store->Put("k", "payload", 5, cache::EncodeEntryMetadata(Graph("other", "h1", {2}))).ok());
  EXPECT_EQ(ReasonOf(store->Lookup("k", &running)), MissReason::kGraphMismatch);
  ASSERT_TRUE(store->Put("k", "payload", 5, "{\"nodes\": 3}").ok());  // an older lazyrt's summary
  EXPECT_EQ(ReasonOf(store->Lookup("k", &running)), MissReason::kGraphMismatch);
  ASSERT_TRUE(store->Put("k", "payload", 5, cache::EncodeEntryMetadata(running)).ok());
  EXPECT_TRUE(std::holds_alternative<cache::Entry>(store->Lookup("k", &running)));
}

TEST(EntryFitsItsGraph, MetadataOutOfBoundsDoesNotDecode) {
  EntryMetadata m = Graph("k", "h", {2});
  m.results[0].dims = std::vector<int64_t>(17, 1);
  EXPECT_FALSE(cache::DecodeEntryMetadata(cache::EncodeEntryMetadata(m)).ok());
  m.results[0].dims = {-1};
  EXPECT_THAT(std::string(cache::DecodeEntryMetadata(cache::EncodeEntryMetadata(m)).status().message()),
              HasSubstr("results[0]"));
  EXPECT_FALSE(cache::DecodeEntryMetadata("[1, 2]").ok());
  EXPECT_FALSE(cache::DecodeEntryMetadata("{\"key\": 7}").ok());
}

TEST(EntryFitsItsGraph, TheSameGraphUnderAnotherKeyExplainsTheMissByIngredient) {
  ScratchDir dir;
  std::unique_ptr<Store> store = OpenStore(dir.path());
  EntryMetadata before = Graph("old", "h1", {2});
  before.ingredients.compiler_version = "compiler/3";
  ASSERT_TRUE(store->Put("old", "payload", 5, cache::EncodeEntryMetadata(before)).ok());
  const EntryMetadata now = Graph("new", "h1", {2});
  const LookupResult result = store->Lookup("new", &now);
  ASSERT_EQ(ReasonOf(result), MissReason::kKeyChanged);
  EXPECT_THAT(std::get<Miss>(result).detail,
              HasSubstr("compiler version (entry: compiler/3, this process: compiler/4)"));
  EXPECT_TRUE(Exists(dir / cache::EntryFileName("old")));  // another key's entry: not this miss's to remove
  EXPECT_EQ(store->counters().misses(MissReason::kKeyChanged), 1);
  // Another graph is just not found.
  const EntryMetadata other = Graph("new", "h2", {2});
  EXPECT_EQ(ReasonOf(store->Lookup("new", &other)), MissReason::kNotFound);
}

std::string Framed(const std::string& body) {
  std::string out("LZRTEXE\n", 8);
  const uint32_t version = pjrt::Executable::kFormatVersion;
  const uint64_t length = body.size();
  out.append(reinterpret_cast<const char*>(&version), 4);
  out.append(reinterpret_cast<const char*>(&length), 8);
  return out + body;
}

TEST(EntryFitsItsGraph, APayloadThatParsingWouldExpandIsRefusedBeforeParsing) {
  std::string body;
  for (int i = 0; i < (4 << 20); ++i) body.append("\x32\x00", 2);  // 4M empty kernels in 8 MB
  absl::StatusOr<pjrt::proto::Executable> parsed = pjrt::Executable::Parse(Framed(body));
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("parsing would allocate more than"));
}

TEST(EntryFitsItsGraph, AnArenaLargerThanAnyDeviceIsRefusedAtLoad) {
  pjrt::proto::Executable exe;
  exe.set_compiler_version(std::string(pjrt::kCompilerVersion));
  exe.set_device_kind(std::string(pjrt::Device::kKind));
  exe.set_arena_bytes(int64_t{1} << 40);
  std::string body;
  ASSERT_TRUE(exe.SerializeToString(&body));
  std::unique_ptr<pjrt::Client> client = *pjrt::Client::Create({.device_memory_bytes = int64_t{64} << 20});
  absl::StatusOr<std::shared_ptr<pjrt::Executable>> loaded = client->LoadSerializedExecutable(Framed(body));
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("more than any device's memory"));
}

TEST(EntryFitsItsGraph, TheProducerVersionIsAStructThatRoundTrips) {
  const pjrt::ProducerVersion current = pjrt::ProducerVersion::Current();
  EXPECT_EQ(pjrt::ProducerVersion::Parse(current.ToString()), current);
  EXPECT_EQ(current.ToString(), pjrt::Executable::ProducerVersion());
  EXPECT_FALSE(pjrt::ProducerVersion::Parse("lazyrt-sim-compiler/4").has_value());
  EXPECT_FALSE(pjrt::ProducerVersion::Parse("x; executable format two").has_value());
}

// ---- 2. Deleting files the cache did not write -----------------------------------------------------

TEST(OnlyTheCachesFiles, ADirectoryOfTheUsersFilesIsLookedUpInButNeverChanged) {
  ScratchDir home;
  WriteFile(home / "notes.lzc", "the user's own .lzc file");
  WriteFile(home / ".draft.tmp", "a draft");
  SetMtime(home / ".draft.tmp", time(nullptr) - 7200);
  WriteFile(home / "report.txt", "text");
  const std::vector<std::string> before = DirNames(home.path());
  std::unique_ptr<Store> store = OpenStore(home.path());
  EXPECT_TRUE(store->trusted());
  EXPECT_FALSE(store->marked());
  EXPECT_THAT(store->warning(), HasSubstr("is not a lazyrt cache directory"));
  absl::StatusOr<PutOutcome> put = store->Put("k", "payload", 5, "");
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(*put, PutOutcome::kSkippedNotACacheDirectory);
  EXPECT_EQ(store->Clear().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->EvictTo(0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReasonOf(store->Lookup("notes")), MissReason::kBadMagic);
  EXPECT_EQ(DirNames(home.path()), before);
  EXPECT_EQ(ReadFile(home / "notes.lzc"), "the user's own .lzc file");
}

TEST(OnlyTheCachesFiles, InAMarkedDirectoryFilesWithoutTheMagicSurviveClearEvictionAndLookups) {
  ScratchDir dir;
  std::unique_ptr<Store> store = OpenStore(dir.path());
  ASSERT_TRUE(store->marked());
  EXPECT_TRUE(Exists(dir / "CACHEDIR.TAG"));
  ASSERT_TRUE(store->Put("entry", "payload", 5, "").ok());
  WriteFile(dir / "mine.lzc", "not an entry");
  WriteFile(dir / ".mine.lzc.1.2.3.tmp", "not a write of the cache's");
  SetMtime(dir / ".mine.lzc.1.2.3.tmp", time(nullptr) - 7200);
  WriteFile(dir / ".notes.tmp", "LZRTCACH");  // the magic, but not a name the cache makes
  SetMtime(dir / ".notes.tmp", time(nullptr) - 7200);
  EXPECT_EQ(ReasonOf(store->Lookup("mine")), MissReason::kBadMagic);
  absl::StatusOr<int64_t> cleared = store->Clear();
  ASSERT_TRUE(cleared.ok()) << cleared.status();
  EXPECT_EQ(*cleared, 1);
  ASSERT_TRUE(store->EvictTo(0).ok());
  EXPECT_TRUE(Exists(dir / "mine.lzc"));
  EXPECT_TRUE(Exists(dir / ".mine.lzc.1.2.3.tmp"));
  EXPECT_TRUE(Exists(dir / ".notes.tmp"));
  EXPECT_FALSE(Exists(dir / cache::EntryFileName("entry")));
  EXPECT_EQ(store->Remove("mine").code(), absl::StatusCode::kFailedPrecondition);
}

TEST(OnlyTheCachesFiles, AnOldCacheDirectoryOfEntriesOnlyIsMarkedWhenOpened) {
  ScratchDir dir;
  ASSERT_TRUE(OpenStore(dir.path())->Put("k", "payload", 5, "").ok());
  ASSERT_EQ(unlink((dir / "CACHEDIR.TAG").c_str()), 0);  // as an older lazyrt left it
  std::unique_ptr<Store> store = OpenStore(dir.path());
  EXPECT_TRUE(store->marked());
  EXPECT_TRUE(cache::IsMarkedCacheDir(dir.path()));
}

// ---- 3. Files the cache opens besides entries -----------------------------------------------------

TEST(OtherFiles, ASymlinkedEventLogIsNeverFollowed) {
  ScratchDir dir, outside;
  std::unique_ptr<Store> store = OpenStore(dir.path());
  WriteFile(outside / "victim", "precious");
  ASSERT_EQ(symlink((outside / "victim").c_str(), (dir / "events.jsonl").c_str()), 0);
  cache::EventLog log(dir.path(), cache::kDefaultEventLogMaxBytes);
  EXPECT_FALSE(log.Append(cache::Event{.key = "k"}).ok());
  store->Lookup("k");
  EXPECT_EQ(ReadFile(outside / "victim"), "precious");
  absl::StatusOr<cache::EventStats> stats = log.ReadStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->foreign_files, 1);
}

TEST(OtherFiles, AFifoEventLogNeitherHangsAppendsNorReads) {
  ScratchDir dir;
  ASSERT_EQ(mkfifo((dir / "events.jsonl").c_str(), 0600), 0);
  cache::EventLog log(dir.path(), cache::kDefaultEventLogMaxBytes);
  EXPECT_FALSE(log.Append(cache::Event{.key = "k"}).ok());
  absl::StatusOr<cache::EventStats> stats = log.ReadStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->foreign_files, 1);
}

TEST(OtherFiles, ASymlinkUnderAnEntrysNameIsNotFollowed) {
  ScratchDir dir, outside;
  std::unique_ptr<Store> store = OpenStore(dir.path());
  ASSERT_TRUE(store->Put("real", "payload", 5, "").ok());
  ASSERT_EQ(rename((dir / cache::EntryFileName("real")).c_str(), (outside / "entry").c_str()), 0);
  ASSERT_EQ(symlink((outside / "entry").c_str(), (dir / cache::EntryFileName("real")).c_str()), 0);
  EXPECT_EQ(ReasonOf(store->Lookup("real")), MissReason::kNotFound);
  EXPECT_TRUE(Exists(outside / "entry"));
}

TEST(OtherFiles, ALockHeldByAStoppedProcessIsNotWaitedFor) {
  ScratchDir dir;
  constexpr uint64_t kMax = 256;
  cache::EventLog log(dir.path(), kMax);
  WriteFile(dir / "events.jsonl", std::string(kMax, 'x') + "\n");  // full: the next append rotates
  const int holder = open((dir / "events.jsonl").c_str(), O_RDONLY);
  ASSERT_GE(holder, 0);
  ASSERT_EQ(flock(holder, LOCK_EX), 0);  // another open file description: conflicts like another process
  EXPECT_TRUE(log.Append(cache::Event{.key = "k"}).ok());
  close(holder);
  EXPECT_TRUE(log.Append(cache::Event{.key = "k"}).ok());  // and rotates once the lock is free
  EXPECT_TRUE(Exists(dir / "events.jsonl.1"));
}

TEST(OtherFiles, AnEventLogOfAnySizeIsReadOnlyUpToTheBound) {
  ScratchDir dir;
  WriteFile(dir / "events.jsonl", "");
  ASSERT_EQ(truncate((dir / "events.jsonl").c_str(), static_cast<off_t>(cache::kMaxEventLogReadBytes + (1 << 20))), 0);
  cache::EventLog log(dir.path(), cache::kDefaultEventLogMaxBytes);
  absl::StatusOr<cache::EventStats> stats = log.ReadStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->unread_bytes, uint64_t{1} << 20);
}

// ---- 4. The path to the cache directory -----------------------------------------------------------

TEST(PathToTheCache, AnAncestorOthersCanWriteMakesTheDirectoryUntrusted) {
  ScratchDir root;
  const std::string parent = root / "parent";
  ASSERT_EQ(mkdir(parent.c_str(), 0700), 0);
  ASSERT_EQ(mkdir((parent + "/cache").c_str(), 0700), 0);
  ASSERT_EQ(chmod(parent.c_str(), 0777), 0);
  absl::StatusOr<cache::DirectoryTrust> trust = cache::CheckDirectoryTrust(parent + "/cache");
  ASSERT_TRUE(trust.ok());
  EXPECT_FALSE(trust->trusted);
  EXPECT_THAT(trust->warning, HasSubstr("ancestor " + parent + " has mode 0777"));
  ASSERT_EQ(chmod(parent.c_str(), 01777), 0);  // sticky, as /tmp: others cannot replace our directory
  EXPECT_TRUE(cache::CheckDirectoryTrust(parent + "/cache")->trusted);
}

TEST(PathToTheCache, ASymlinkIsFollowedAndItsTargetsPathCheckedToo) {
  ScratchDir root;
  const std::string open_dir = root / "open";
  ASSERT_EQ(mkdir(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(mkdir((open_dir + "/cache").c_str(), 0700), 0);
  ASSERT_EQ(symlink((open_dir + "/cache").c_str(), (root / "link").c_str()), 0);
  absl::StatusOr<cache::DirectoryTrust> trust = cache::CheckDirectoryTrust(root / "link");
  ASSERT_TRUE(trust.ok());
  EXPECT_FALSE(trust->trusted);
  std::unique_ptr<Store> store = OpenStore(root / "link");
  EXPECT_EQ(ReasonOf(store->Lookup("k")), MissReason::kUntrustedDirectory);
  EXPECT_EQ(*store->Put("k", "payload", 5, ""), PutOutcome::kSkippedUntrustedDirectory);
}

// ---- 5. Values from outside ----------------------------------------------------------------------

TEST(ValuesFromOutside, AbsurdSettingsAreRefusedWithTheirBounds) {
  Options options;
  EXPECT_THAT(std::string(options.Set("LAZYRT_DEVICES", "100000000").message()), HasSubstr("[1, 1024]"));
  EXPECT_FALSE(options.Set("LAZYRT_DEBUG", "9").ok());
  EXPECT_FALSE(options.Set("LAZYRT_DEVICE_MEMORY", "1000T").ok());
  EXPECT_FALSE(options.Set("LAZYRT_CACHE_MIN_COMPILE_MS", "inf").ok());
  EXPECT_FALSE(options.Set("LAZYRT_REPORT", std::string(5000, 'x')).ok());
  EXPECT_TRUE(options.Set("LAZYRT_DEVICES", "8").ok());
}

TEST(ValuesFromOutside, AFileSizeLimitFailsAWriteInsteadOfKillingTheProcess) {
  ScratchDir dir;
  cache::testing::RunInChildProcesses(1, [&](int) {
    const struct rlimit limit = {4096, 4096};  // SIGXFSZ is not ignored: a write past it would kill us
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) return 10;
    absl::StatusOr<std::unique_ptr<Store>> store =
        Store::Open({.dir = dir.path(), .producer_version = std::string(kProducer)});
    if (!store.ok()) return 11;
    std::string payload(1 << 16, '\0');
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>((i * 2654435761u) >> 13);
    absl::StatusOr<PutOutcome> put = (*store)->Put("big", payload, 5, "");
    if (put.ok() || put.status().code() != absl::StatusCode::kResourceExhausted) return 12;
    if (put.status().message().find("ulimit -f") == absl::string_view::npos) return 13;
    return (*store)->Put("small", "payload", 5, "").ok() ? 0 : 14;
  });
  for (const std::string& name : DirNames(dir.path())) EXPECT_FALSE(cache::IsTempFileName(name)) << name;
}

std::string BigEndian(std::vector<uint32_t> words) {
  std::string out;
  for (uint32_t w : words) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((w >> shift) & 0xff));
  }
  return out;
}

TEST(ValuesFromOutside, IdxHeadersThatOverflowOrDoNotFitAreErrorsNamingTheFile) {
  const std::string labels = BigEndian({0x801, 2}) + std::string("\x01\x02", 2);
  // count x rows x cols overflows 64 bits; the data is six bytes.
  absl::StatusOr<data::Dataset> d =
      data::ParseIdx(BigEndian({0x803, 0xffffffff, 0xffffffff, 0xffffffff}) + "abcdef", labels, 10, "img", "lbl");
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("img: the header says"));
  EXPECT_FALSE(data::ParseIdx(BigEndian({0x803, 0, 28, 28}), BigEndian({0x801, 0}), 10, "img", "lbl").ok());
  EXPECT_FALSE(data::ParseIdx(BigEndian({0x803, 2, 0, 3}), labels, 10, "img", "lbl").ok());
  // Sizes consistent, a label out of range.
  d = data::ParseIdx(BigEndian({0x803, 2, 1, 3}) + "abcdef", BigEndian({0x801, 2}) + std::string("\x01\x0a", 2), 10,
                     "img", "lbl");
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("lbl: label 10 of item 1"));
  d = data::ParseIdx(BigEndian({0x803, 2, 1, 3}) + "abcdef", labels, 10, "img", "lbl");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->features, 3);
  EXPECT_FALSE(data::Batches::Create(*d, 3, 0).ok());
  EXPECT_FALSE(data::Batches::Create(*d, 0, 0).ok());
  EXPECT_TRUE(data::Batches::Create(*d, 2, 0).ok());
}

TEST(ValuesFromOutside, IdxFilesThatAreNotRegularFilesAreRefused) {
  ScratchDir dir;
  ASSERT_EQ(mkfifo((dir / "images").c_str(), 0600), 0);
  absl::StatusOr<data::Dataset> d = data::LoadIdx(dir / "images", dir / "labels", 10);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("not a regular file"));
}

TEST(ValuesFromOutside, RunReportsOfEveryShapeAreErrorsOrReadNeverACrash) {
  ScratchDir dir;
  const std::string path = dir / "report.json";
  auto read = [&](const std::string& text) {
    WriteFile(path, text);
    return cli::ReadReportFindings(path);
  };
  EXPECT_FALSE(read(std::string(100000, '[')).ok());
  EXPECT_FALSE(read("{\"findings\": [{\"kind\": \"x\", \"count\": -1}]}").ok());
  EXPECT_FALSE(read("{\"findings\": [{\"kind\": \"x\", \"count\": 1e300}]}").ok());
  EXPECT_FALSE(read("{\"findings\": [{\"kind\": \"x\", \"count\": 1, \"location\": 5}]}").ok());
  // Bytes that are not UTF-8: an error, not an exception thrown from the JSON library.
  EXPECT_THAT(std::string(read("{\"findings\": [{\"kind\": \"\xff\xfe\", \"count\": 1}]}").status().message()),
              HasSubstr("is not JSON"));
  absl::StatusOr<std::vector<cli::ReportFinding>> findings =
      read("{\"findings\": [{\"kind\": \"x\", \"count\": 1, \"message\": \"\\u00e9\", \"what\": [1, {}]}]}");
  ASSERT_TRUE(findings.ok()) << findings.status();
  EXPECT_EQ((*findings)[0].message, "\xc3\xa9");
  EXPECT_FALSE(cli::DumpReportJson((*findings)[0].json, 2).empty());
  ASSERT_EQ(unlink(path.c_str()), 0);
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  EXPECT_THAT(std::string(cli::ReadReportFindings(path).status().message()), HasSubstr("not a regular file"));
}

}  // namespace hostile_environment_test
}  // namespace lazyrt
