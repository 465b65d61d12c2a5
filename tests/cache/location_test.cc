#include "cache/location.h"

#include <sys/stat.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "cache/store.h"
#include "tests/cache/scratch_dir.h"

namespace lazyrt::cache {
namespace location_test {

using testing::Exists;
using testing::ScratchDir;

constexpr const char* kLocationVariables[] = {"LAZYRT_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};

int ModeOf(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 ? static_cast<int>(info.st_mode & 07777) : -1;
}

// Clears the variables ResolveCacheDir reads, and restores them afterwards.
class LocationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kLocationVariables) {
      if (const char* value = std::getenv(name)) saved_[name] = value;
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kLocationVariables) {
      auto saved = saved_.find(name);
      if (saved == saved_.end()) {
        unsetenv(name);
      } else {
        setenv(name, saved->second.c_str(), 1);
      }
    }
  }

  ScratchDir dir_;

 private:
  std::map<std::string, std::string> saved_;
};

TEST_F(LocationTest, ResolutionOrder) {
  EXPECT_EQ(ResolveCacheDir("").status().code(), absl::StatusCode::kFailedPrecondition);
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(*ResolveCacheDir(""), "/home/someone/.cache/lazyrt");
  setenv("XDG_CACHE_HOME", "/xdg/cache", 1);
  EXPECT_EQ(*ResolveCacheDir(""), "/xdg/cache/lazyrt");
  setenv("LAZYRT_CACHE_DIR", "/env/cache", 1);
  EXPECT_EQ(*ResolveCacheDir(""), "/env/cache");
  EXPECT_EQ(*ResolveCacheDir("/explicit"), "/explicit");
}

TEST_F(LocationTest, EmptyVariablesAndARelativeXdgCacheHomeCountAsUnset) {
  setenv("HOME", "/home/someone", 1);
  setenv("LAZYRT_CACHE_DIR", "", 1);
  setenv("XDG_CACHE_HOME", "", 1);
  EXPECT_EQ(*ResolveCacheDir(""), "/home/someone/.cache/lazyrt");
  setenv("XDG_CACHE_HOME", "relative/cache", 1);
  EXPECT_EQ(*ResolveCacheDir(""), "/home/someone/.cache/lazyrt");
}

TEST_F(LocationTest, CreatesTheDirectoryAndItsParentsWithMode0700) {
  const mode_t saved_umask = umask(0);  // the mode must not depend on a restrictive umask
  const std::string dir = dir_ / "a/b/c";
  const absl::Status status = CreateCacheDir(dir);
  umask(saved_umask);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ModeOf(dir_ / "a"), 0700);
  EXPECT_EQ(ModeOf(dir_ / "a/b"), 0700);
  EXPECT_EQ(ModeOf(dir), 0700);
  EXPECT_TRUE(CreateCacheDir(dir).ok()) << "creating an existing directory is a no-op";
}

TEST_F(LocationTest, LeavesExistingDirectoriesAsTheyAre) {
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  ASSERT_TRUE(CreateCacheDir(dir_ / "cache").ok());
  EXPECT_EQ(ModeOf(dir_.path()), 0755);
}

TEST_F(LocationTest, AFileInTheWayIsAnError) {
  testing::WriteFile(dir_ / "file", "x");
  const absl::Status status = CreateCacheDir(dir_ / "file/cache");
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), dir_ / "file")) << status;
}

TEST_F(LocationTest, OnlyADirectoryNoOneElseCanWriteIsTrusted) {
  for (const auto& [mode, trusted] :
       std::map<mode_t, bool>{{0700, true}, {0755, true}, {0770, false}, {0702, false}, {0777, false}}) {
    ASSERT_EQ(chmod(dir_.path().c_str(), mode), 0);
    absl::StatusOr<DirectoryTrust> trust = CheckDirectoryTrust(dir_.path());
    ASSERT_TRUE(trust.ok());
    EXPECT_EQ(trust->trusted, trusted) << std::oct << mode;
    EXPECT_EQ(trust->warning.empty(), trusted) << trust->warning;
  }
}

TEST_F(LocationTest, StoreOpenResolvesAndCreatesTheDirectory) {
  const std::string dir = dir_ / "from-env/lazyrt";
  setenv("LAZYRT_CACHE_DIR", dir.c_str(), 1);
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open({.producer_version = "v"});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->dir(), dir);
  EXPECT_EQ(ModeOf(dir), 0700);
  EXPECT_TRUE((*store)->trusted());
}

}  // namespace location_test
}  // namespace lazyrt::cache
