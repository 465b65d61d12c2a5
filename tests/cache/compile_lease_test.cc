// The compile lease across processes (cache/compile_lease.h): of eight processes missing one key at
// once exactly one compiles and all load its bytes; a compiler killed mid-compile, or a lock file left
// by a dead process, blocks no one; lock files are never taken for entries and do not accumulate.
#include "cache/compile_lease.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <variant>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cache/layout.h"
#include "cache/store.h"
#include "child_processes.h"
#include "scratch_dir.h"

namespace lazyrt::cache {
namespace compile_lease_test {

using testing::Exists;
using testing::ReadFile;
using testing::RunInChildProcesses;
using testing::ScratchDir;
using testing::WriteFile;

constexpr absl::string_view kKey = "gkey";
constexpr absl::string_view kVersion = "compiler-1";

std::unique_ptr<Store> OpenStore(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open({.dir = dir, .producer_version = std::string(kVersion)});
  if (!store.ok()) ADD_FAILURE() << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

// Appends one line to `path` in one write (O_APPEND: lines from several processes never interleave).
void AppendLine(const std::string& path, const std::string& line) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const std::string text = line + "\n";
  if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) ADD_FAILURE() << "short write";
  close(fd);
}

int CountLines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

// What a process does on a miss, as the executable cache does: a lookup, and on a miss the lease, then
// a second look for the entry (another process may have stored it meanwhile), else compile and store.
// The compile is recorded as a line in `compiles` and lasts `compile_time`, long enough for every
// other process to miss meanwhile. Returns the payload it ended with.
std::string LookupOrCompile(Store& store, const std::string& compiles, absl::Duration compile_time,
                            absl::Duration wait) {
  LookupResult found = store.Lookup(kKey);
  if (Entry* entry = std::get_if<Entry>(&found)) return entry->payload;
  CompileLease lease = store.AcquireCompileLease(kKey, wait);
  if (store.Contains(kKey)) {
    found = store.Lookup(kKey);
    if (Entry* entry = std::get_if<Entry>(&found)) return entry->payload;
  }
  AppendLine(compiles, absl::StrCat(getpid()));
  absl::SleepFor(compile_time);
  const std::string payload = absl::StrCat("executable compiled by pid ", getpid());
  absl::StatusOr<PutOutcome> put = store.Put(kKey, payload, 1, "");
  if (!put.ok() || *put != PutOutcome::kWritten) return "put failed";
  return payload;
}

TEST(CompileLease, EightProcessesMissingOneKeyCompileItOnceAndAllLoadTheSameBytes) {
  ScratchDir scratch;
  const std::string dir = scratch / "cache";
  ASSERT_NE(OpenStore(dir), nullptr);  // created and marked before the children start
  const std::string compiles = scratch / "compiles";
  RunInChildProcesses(8, [&](int child) {
    std::unique_ptr<Store> store = OpenStore(dir);
    if (store == nullptr) return 1;
    WriteFile(scratch / absl::StrCat("result-", child),
              LookupOrCompile(*store, compiles, absl::Milliseconds(300), absl::Seconds(60)));
    return 0;
  });
  EXPECT_EQ(CountLines(ReadFile(compiles)), 1) << ReadFile(compiles);
  const std::string first = ReadFile(scratch / "result-0");
  EXPECT_TRUE(first.starts_with("executable compiled by pid ")) << first;
  for (int child = 1; child < 8; ++child) EXPECT_EQ(ReadFile(scratch / absl::StrCat("result-", child)), first);
  // The waits are in the event log, for `lazyrt cache stats`; no lock file is left behind.
  absl::StatusOr<CacheStats> stats = OpenStore(dir)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GE(stats->events.compile_waits, 1);
  EXPECT_GT(stats->events.compile_wait_ms, 0);
  EXPECT_FALSE(Exists(dir + "/" + CompileLeaseFileName(kKey)));
}

// Forks a child that takes the lease, reports through a pipe that it holds it, and then "compiles"
// forever (until killed). Returns its pid.
pid_t ForkHolder(const std::string& dir) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    CompileLease lease = CompileLease::Acquire(dir, kKey, absl::Seconds(10));
    const char held = lease.held() ? '1' : '0';
    if (write(ready[1], &held, 1) != 1) _exit(1);
    while (true) pause();
  }
  close(ready[1]);
  char held = '0';
  if (read(ready[0], &held, 1) != 1 || held != '1') ADD_FAILURE() << "the holder did not take the lease";
  close(ready[0]);
  return pid;
}

void Reap(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
}

TEST(CompileLease, AHolderKilledMidCompileIsTakenOverWithinTheBound) {
  ScratchDir scratch;
  const pid_t holder = ForkHolder(scratch.path());
  ASSERT_GT(holder, 0);
  std::thread killer([holder] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(holder, SIGKILL);
  });
  const absl::Duration bound = absl::Seconds(30);
  CompileLease lease = CompileLease::Acquire(scratch.path(), kKey, bound);
  killer.join();
  Reap(holder);
  EXPECT_TRUE(lease.held()) << lease.error();
  EXPECT_TRUE(lease.waited());
  EXPECT_FALSE(lease.timed_out());
  EXPECT_EQ(lease.holder_pid(), holder);
  EXPECT_GE(lease.wait_time(), absl::Milliseconds(150));
  EXPECT_LT(lease.wait_time(), absl::Seconds(10)) << "taken over long after the holder died";
}

TEST(CompileLease, AStuckHolderDelaysOthersByTheBoundOnly) {
  ScratchDir scratch;
  const pid_t holder = ForkHolder(scratch.path());
  ASSERT_GT(holder, 0);
  const absl::Time start = absl::Now();
  CompileLease lease = CompileLease::Acquire(scratch.path(), kKey, absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  kill(holder, SIGKILL);
  Reap(holder);
  EXPECT_FALSE(lease.held());
  EXPECT_TRUE(lease.timed_out());
  EXPECT_EQ(lease.holder_pid(), holder);
  EXPECT_GE(took, absl::Milliseconds(200));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST(CompileLease, ALockFileLeftByADeadProcessDoesNotBlock) {
  ScratchDir scratch;
  const std::string lock_file = scratch / CompileLeaseFileName(kKey);
  WriteFile(lock_file, absl::StrCat(kCompileLeaseMagic, "pid 999999999\n"));  // no process holds it
  CompileLease lease = CompileLease::Acquire(scratch.path(), kKey, absl::Seconds(30));
  EXPECT_TRUE(lease.held()) << lease.error();
  EXPECT_FALSE(lease.waited());
  EXPECT_EQ(ReadFile(lock_file), absl::StrCat(kCompileLeaseMagic, "pid ", getpid(), "\n"));
  lease.Release();
  EXPECT_FALSE(Exists(lock_file)) << "the holder removes its lock file";
}

TEST(CompileLease, ASecondAcquireInTheSameProcessWaitsToo) {
  // Two threads of one process exclude each other as two processes do (flock is per open file).
  ScratchDir scratch;
  CompileLease first = CompileLease::Acquire(scratch.path(), kKey, absl::Seconds(1));
  ASSERT_TRUE(first.held());
  CompileLease second = CompileLease::Acquire(scratch.path(), kKey, absl::Milliseconds(20));
  EXPECT_FALSE(second.held());
  EXPECT_TRUE(second.timed_out());
  EXPECT_EQ(second.holder_pid(), getpid());
  first.Release();
  CompileLease third = CompileLease::Acquire(scratch.path(), kKey, absl::Milliseconds(20));
  EXPECT_TRUE(third.held());
}

TEST(CompileLease, RefusesASymlinkAtTheLockFileName) {
  ScratchDir scratch;
  WriteFile(scratch / "elsewhere", "the user's file");
  ASSERT_EQ(symlink((scratch / "elsewhere").c_str(), (scratch / CompileLeaseFileName(kKey)).c_str()), 0);
  CompileLease lease = CompileLease::Acquire(scratch.path(), kKey, absl::Seconds(1));
  EXPECT_FALSE(lease.held());
  EXPECT_NE(lease.error().find(CompileLeaseFileName(kKey)), std::string::npos) << lease.error();
  EXPECT_EQ(ReadFile(scratch / "elsewhere"), "the user's file");
}

TEST(CompileLease, LockFilesAreNotEntriesAndAbandonedOnesAreCleared) {
  ScratchDir scratch;
  const std::string dir = scratch / "cache";
  std::unique_ptr<Store> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("kept", "payload", 1, "").ok());
  CompileLease held = store->AcquireCompileLease("busy", absl::Seconds(1));
  ASSERT_TRUE(held.held());
  WriteFile(dir + "/" + CompileLeaseFileName("abandoned"), absl::StrCat(kCompileLeaseMagic, "pid 999999999\n"));
  WriteFile(dir + "/.notes.lease", "the user's, not a lease's name");

  absl::StatusOr<std::vector<ListedEntry>> listed = store->List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, "kept");
  absl::StatusOr<std::vector<VerifiedEntry>> verified = store->VerifyAll();
  ASSERT_TRUE(verified.ok());
  EXPECT_EQ(verified->size(), 1u);
  EXPECT_FALSE(store->Contains("busy"));

  absl::StatusOr<int64_t> cleared = store->Clear();
  ASSERT_TRUE(cleared.ok()) << cleared.status();
  EXPECT_EQ(*cleared, 1);  // the entry; lock files are not counted as entries
  EXPECT_FALSE(Exists(dir + "/" + CompileLeaseFileName("abandoned")));
  EXPECT_TRUE(Exists(dir + "/" + CompileLeaseFileName("busy"))) << "a held lease's file stays";
  EXPECT_TRUE(Exists(dir + "/.notes.lease"));
}

TEST(CompileLease, ADirectoryHoldingOnlyLockFilesIsStillTheCaches) {
  // A lock file must not make a cache directory look like the user's (then nothing would be written).
  ScratchDir scratch;
  const std::string dir = scratch / "cache";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  WriteFile(dir + "/" + CompileLeaseFileName(kKey), absl::StrCat(kCompileLeaseMagic, "pid 1\n"));
  std::unique_ptr<Store> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->marked()) << store->warning();
}

TEST(CompileLease, AReadOnlyStoreTakesNoLease) {
  ScratchDir scratch;
  const std::string dir = scratch / "cache";
  ASSERT_NE(OpenStore(dir), nullptr);
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open({.dir = dir, .producer_version = std::string(kVersion), .read_only = true});
  ASSERT_TRUE(store.ok());
  CompileLease lease = (*store)->AcquireCompileLease(kKey, absl::Seconds(1));
  EXPECT_FALSE(lease.held());
  EXPECT_FALSE(lease.waited());
  EXPECT_FALSE(Exists(dir + "/" + CompileLeaseFileName(kKey)));
}

}  // namespace compile_lease_test
}  // namespace lazyrt::cache
