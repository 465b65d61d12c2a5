// The compile lease through the public API: processes that sync the same new graph at the same moment
// on one persistent cache compile it once; the others wait and load it, reported as disk hits
// "compiled by another process (pid N)". A binary of its own: each process configures its runtime
// after the fork, so the test process itself must never have created one.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "lazy/diagnostics.h"
#include "lazy/metrics.h"
#include "lazy/options.h"
#include "lazy/runtime.h"
#include "lazy/tensor.h"

namespace lazyrt {
namespace compile_lease_sync_test {

constexpr int kProcesses = 4;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// One process: traces a graph big enough to take a while to compile, says it is ready, waits at the
// barrier, syncs it, and writes what happened: "<compiles> <pid> <outcome> <value>\n<outcome detail>".
int SyncAfterBarrier(const std::string& cache_dir, int ready, int barrier, const std::string& result_path) {
  Options options;
  options.cache_dir = cache_dir;
  configure(options);
  const std::vector<float> values = {0.5F, -1.0F, 2.0F, 0.25F};
  Tensor x = Tensor::FromData(std::span<const float>(values), {4});
  Tensor y = x;
  for (int i = 0; i < 600; ++i) y = sin(y) * 0.5 + x;
  char go = 'r';
  // Closed once written: the parent's read then ends when every child is ready or gone, never hangs.
  const bool said_ready = write(ready, &go, 1) == 1;
  close(ready);
  if (!said_ready || read(barrier, &go, 1) != 1) return 1;
  const std::vector<float> result = y.to_vector<float>();
  const SyncEvent event = sync_events().back();
  std::ofstream out(result_path);
  out << CounterValue(counters::kGraphsCompiled) << " " << getpid() << " " << SyncOutcomeName(event.outcome) << " "
      << result[0] << "\n"
      << event.outcome_detail;
  return out.good() ? 0 : 1;
}

TEST(CompileLeaseAcrossProcesses, ProcessesSyncingOneNewGraphTogetherCompileItOnce) {
  std::string dir = "/tmp/lazyrt-lease-sync-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  // The barrier opens once every child has started its runtime and traced: otherwise a child that started
  // first could compile and store the graph before a slower one even synced, and nobody would wait.
  int ready[2], barrier[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(barrier), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(ready[0]);
      close(barrier[1]);
      // _exit: the parent's exit handlers and gtest's are not this process's to run.
      _exit(SyncAfterBarrier(dir + "/cache", ready[1], barrier[0], absl::StrCat(dir, "/result-", i)));
    }
    children.push_back(pid);
  }
  close(ready[1]);
  close(barrier[0]);
  for (int i = 0; i < kProcesses; ++i) {
    char r = 0;
    // A child that failed before it was ready closes its end: read returns 0, and its status says why.
    if (read(ready[0], &r, 1) != 1) break;
  }
  close(ready[0]);
  const std::string go(kProcesses, 'g');
  ASSERT_EQ(write(barrier[1], go.data(), go.size()), static_cast<ssize_t>(go.size()));
  close(barrier[1]);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << pid << " status " << status;
  }

  int64_t compiles = 0;
  std::string compiler_pid;
  std::string first_value;
  std::vector<std::string> lines;
  for (int i = 0; i < kProcesses; ++i) {
    std::istringstream in(ReadFile(absl::StrCat(dir, "/result-", i)));
    int64_t n = 0;
    std::string pid, outcome, value, detail;
    in >> n >> pid >> outcome >> value;
    in.ignore(1);
    std::getline(in, detail);
    lines.push_back(absl::StrCat(n, " ", pid, " ", outcome, " ", value, " '", detail, "'"));
    compiles += n;
    if (n == 1) compiler_pid = pid;
    EXPECT_EQ(outcome, n == 1 ? "compiled" : "disk_hit") << lines.back();
    if (i == 0) first_value = value;
    EXPECT_EQ(value, first_value) << lines.back();
  }
  std::string all;
  for (const std::string& line : lines) absl::StrAppend(&all, line, "\n");
  EXPECT_EQ(compiles, 1) << all;
  // The processes that waited name the one that compiled (all of them, unless one came late enough to
  // find the entry already stored).
  int waited = 0;
  for (const std::string& line : lines) {
    if (line.find(absl::StrCat("'compiled by another process (pid ", compiler_pid, ")'")) != std::string::npos)
      ++waited;
  }
  EXPECT_GE(waited, 1) << all;
  std::filesystem::remove_all(dir);
}

}  // namespace compile_lease_sync_test
}  // namespace lazyrt
