// Runs a function in several forked child processes at once, for the multi-process tests.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <vector>

#include <gtest/gtest.h>

namespace lazyrt::cache::testing {

// Forks `count` children that each run `body(child_index)` and exit with its return value (without
// running the parent's exit handlers), waits for all of them, and expects every one to exit 0.
inline void RunInChildProcesses(int count, const std::function<int(int)>& body) {
  std::vector<pid_t> children;
  for (int child = 0; child < count; ++child) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) _exit(body(child));
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status)) << "child " << pid << " did not exit normally";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << pid;
  }
}

}  // namespace lazyrt::cache::testing
