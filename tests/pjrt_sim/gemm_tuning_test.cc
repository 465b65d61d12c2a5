// The machine's GEMM tuning record: compiles that share it (as processes with different executable cache
// directories do) put every DOT and attention kernel on the same library and compute the same bits; the
// record's entries are obeyed; a damaged, truncated or hostile file is refused line by line with a warning
// naming the file and the line, and the shapes it no longer names are measured again.
#include "pjrt_sim/gemm_tuning.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pjrt_sim/cpu_isa.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace gemm_tuning_test {

using testing::HostArray;
using testing::ModuleBuilder;

class GemmTuningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("lazyrt_gemm_tuning_" + std::to_string(getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    path_ = (dir_ / "machine" / "gemm_tuning.txt").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void WriteFile(const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
    std::ofstream(path_, std::ios::binary) << text;
  }

  std::filesystem::path dir_;
  std::string path_;
};

// A product big enough to be tuned, and one of a different shape, on random f32 operands.
struct TwoDots {
  proto::Module module;
  std::vector<HostArray> args;
};

TwoDots MakeTwoDots() {
  std::mt19937_64 rng(3);
  ModuleBuilder mb;
  const int64_t x = mb.Parameter(0, proto::F32, {64, 96});
  const int64_t w = mb.Parameter(1, proto::F32, {80, 96});
  const int64_t y = mb.Dot(x, w, false, true);  // [64, 80]
  const int64_t g = mb.Dot(y, w);               // [64, 96]
  mb.Output(g);
  TwoDots t{mb.module(), {}};
  t.args.push_back(testing::MakeArray<float>(PrimitiveType::kF32, {64, 96}, testing::RandomFloats(rng, 64 * 96)));
  t.args.push_back(testing::MakeArray<float>(PrimitiveType::kF32, {80, 96}, testing::RandomFloats(rng, 80 * 96)));
  return t;
}

std::vector<int32_t> DotLibraries(const Executable& exe) {
  std::vector<int32_t> libraries;
  for (const proto::Kernel& k : exe.proto().kernels()) {
    if (k.kind() == proto::Kernel::DOT) libraries.push_back(k.gemm_library());
  }
  return libraries;
}

TEST_F(GemmTuningTest, CompilesSharingTheRecordChooseTheSameLibrariesAndBits) {
  const TwoDots t = MakeTwoDots();
  const CompileOptions options{.autotune = true, .gemm_tuning_file = path_};
  std::vector<int32_t> libraries[2];
  std::vector<float> results[2];
  for (int run = 0; run < 2; ++run) {  // a fresh client each time: another process, another cache
    std::unique_ptr<Client> client = testing::MakeClient();
    absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(t.module, options);
    ASSERT_TRUE(exe.ok()) << exe.status();
    libraries[run] = DotLibraries(**exe);
    absl::StatusOr<std::vector<HostArray>> out = testing::ExecuteOnHost(*client, **exe, t.args);
    ASSERT_TRUE(out.ok()) << out.status();
    results[run] = (*out)[0].values<float>();
  }
  ASSERT_EQ(libraries[0].size(), 2u);
  EXPECT_EQ(libraries[0], libraries[1]);
  EXPECT_EQ(results[0], results[1]) << "two compiles on one machine computed different bits";
  // The first compile recorded both shapes; each DOT runs on the library recorded for it.
  const GemmTuningRecord record(path_);
  const std::optional<GemmLibrary> first = record.Lookup({PrimitiveType::kF32, 64, 80, 96, false, true});
  const std::optional<GemmLibrary> second = record.Lookup({PrimitiveType::kF32, 64, 96, 80, false, false});
  ASSERT_TRUE(first.has_value() && second.has_value());
  EXPECT_EQ(libraries[0][0], static_cast<int32_t>(*first));
  EXPECT_EQ(libraries[0][1], static_cast<int32_t>(*second));
}

TEST_F(GemmTuningTest, TheRecordedLibraryIsObeyedWithoutMeasuring) {
  const TwoDots t = MakeTwoDots();
  for (GemmLibrary library : kGemmLibraries) {
    WriteFile(absl::StrCat("lazyrt-gemm-tuning 4\n", HostIsa(), "\tf32\t64\t80\t96\t0\t1\t",
                           std::string(GemmLibraryName(library)), "\n", HostIsa(), "\tf32\t64\t96\t80\t0\t0\t",
                           std::string(GemmLibraryName(library)), "\n"));
    std::unique_ptr<Client> client = testing::MakeClient();
    for (bool autotune : {false, true}) {
      absl::StatusOr<std::shared_ptr<Executable>> exe =
          client->Compile(t.module, {.autotune = autotune, .gemm_tuning_file = path_});
      ASSERT_TRUE(exe.ok()) << exe.status();
      const int32_t want = static_cast<int32_t>(library);
      EXPECT_EQ(DotLibraries(**exe), (std::vector<int32_t>{want, want})) << GemmLibraryName(library);
    }
  }
}

TEST_F(GemmTuningTest, ConcurrentFirstCompilesAgree) {
  const TwoDots t = MakeTwoDots();
  std::vector<int32_t> libraries[2];
  std::thread threads[2];
  for (int i = 0; i < 2; ++i) {
    threads[i] = std::thread([&, i] {
      std::unique_ptr<Client> client = testing::MakeClient();
      absl::StatusOr<std::shared_ptr<Executable>> exe =
          client->Compile(t.module, {.autotune = true, .gemm_tuning_file = path_});
      if (exe.ok()) libraries[i] = DotLibraries(**exe);
    });
  }
  for (std::thread& th : threads) th.join();
  ASSERT_EQ(libraries[0].size(), 2u);
  EXPECT_EQ(libraries[0], libraries[1]) << "the first writer of an entry must win for both";
}

// Causal attention and its gradient on [2, 96, 16] heads: their block products run on the library the
// record names for a block of scores, 64 queries by 64 keys over 16 (k transposed).
proto::Module AttentionModule(int64_t tokens = 96) {
  ModuleBuilder m;
  const int64_t q = m.Parameter(0, proto::F32, {2, tokens, 16});
  const int64_t k = m.Parameter(1, proto::F32, {2, tokens, 16});
  const int64_t v = m.Parameter(2, proto::F32, {2, tokens, 16});
  const int64_t dout = m.Parameter(3, proto::F32, {2, tokens, 16});
  auto attrs = [](proto::Instruction& i) {
    i.set_value(0.25);
    i.set_causal(true);
  };
  const int64_t fwd = m.Op(Opcode::kAttention, {q, k, v}, proto::F32, {2, tokens, 17}, attrs);
  m.Output(m.Op(Opcode::kAttentionGrad, {q, k, v, fwd, dout}, proto::F32, {2, tokens * 16 * 3}, attrs));
  return m.module();
}
// The record's key of AttentionModule(tokens): the forward's scores of 64 queries by the keys of one step.
GemmShape ScoresOf(int64_t tokens) {
  return {PrimitiveType::kF32, 64, std::min<int64_t>(tokens, 512), 16, false, true};
}

std::vector<int32_t> AttentionLibraries(const Executable& exe) {
  std::vector<int32_t> libraries;
  for (const proto::Kernel& k : exe.proto().kernels()) {
    if (k.kind() == proto::Kernel::ATTENTION || k.kind() == proto::Kernel::ATTENTION_GRAD) {
      libraries.push_back(k.gemm_library());
    }
  }
  return libraries;
}

TEST_F(GemmTuningTest, AttentionKernelsRunOnTheLibraryRecordedForTheirBlockOfScores) {
  const proto::Module module = AttentionModule();
  for (GemmLibrary library : kGemmLibraries) {
    WriteFile(absl::StrCat("lazyrt-gemm-tuning 4\n", HostIsa(), "\tf32\t64\t96\t16\t0\t1\t",
                           std::string(GemmLibraryName(library)), "\n"));
    std::unique_ptr<Client> client = testing::MakeClient();
    for (bool autotune : {false, true}) {
      absl::StatusOr<std::shared_ptr<Executable>> exe =
          client->Compile(module, {.autotune = autotune, .gemm_tuning_file = path_});
      ASSERT_TRUE(exe.ok()) << exe.status();
      const int32_t want = static_cast<int32_t>(library);
      EXPECT_EQ(AttentionLibraries(**exe), (std::vector<int32_t>{want, want})) << GemmLibraryName(library);
    }
  }
}

TEST_F(GemmTuningTest, AFirstCompileMeasuresTheAttentionsLibraryAndRecordsIt) {
  const proto::Module module = AttentionModule();
  std::unique_ptr<Client> client = testing::MakeClient();
  absl::StatusOr<std::shared_ptr<Executable>> exe =
      client->Compile(module, {.autotune = true, .gemm_tuning_file = path_});
  ASSERT_TRUE(exe.ok()) << exe.status();
  const std::optional<GemmLibrary> recorded = GemmTuningRecord(path_).Lookup(ScoresOf(96));
  ASSERT_TRUE(recorded.has_value());
  const int32_t want = static_cast<int32_t>(*recorded);
  EXPECT_EQ(AttentionLibraries(**exe), (std::vector<int32_t>{want, want}));
  // One kernel measured every library (the other found the record): its candidates are in the executable.
  int measured = 0;
  for (const proto::AutotuneRecord& r : (*exe)->proto().autotune()) {
    if (r.chosen() != absl::StrCat("library_", std::string(GemmLibraryName(*recorded)))) continue;
    ++measured;
    EXPECT_EQ(r.candidates_size(), static_cast<int>(std::size(kGemmLibraries)));
  }
  EXPECT_EQ(measured, 1);
}

TEST_F(GemmTuningTest, AnAttentionSmallerThanABlockIsNotMeasured) {
  // 40 queries and keys: its products take microseconds, too little to decide for the machine.
  std::unique_ptr<Client> client = testing::MakeClient();
  absl::StatusOr<std::shared_ptr<Executable>> exe =
      client->Compile(AttentionModule(40), {.autotune = true, .gemm_tuning_file = path_});
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_FALSE(GemmTuningRecord(path_).Lookup(ScoresOf(40)).has_value());
  const int32_t preferred = static_cast<int32_t>(PreferredGemmLibrary());
  EXPECT_EQ(AttentionLibraries(**exe), (std::vector<int32_t>{preferred, preferred}));
}

TEST_F(GemmTuningTest, DamagedLinesAreRefusedWithTheirLineAndTheRestIsRead) {
  const std::string& isa = HostIsa();
  WriteFile(absl::StrCat("lazyrt-gemm-tuning 4\n",                         // 1
                         isa, "\tf32\t-5\t2\t2\t0\t0\tblis\n",             // 2: negative m
                         isa, "\tf32\t2\t2\t1099511627776\t0\t0\tblis\n",  // 3: k beyond 2^30
                         isa, "\tf32\t2\t2\t2\t0\t0\tmkl\n",               // 4: unknown library
                         isa, "\tf99\t2\t2\t2\t0\t0\tblis\n",              // 5: unknown type
                         isa, "\tf32\t2\t2\t2\t7\t0\tblis\n",              // 6: transpose not 0/1
                         std::string(5000, 'x'), "\n",                     // 7: too long
                         isa, "\tf32\t3\t4\t5\t1\t0\topenblas\n",          // 8: valid
                         isa, "\tf32\t3\t4\t5\t1\t0\tblis\n",              // 9: repeated: the first stands
                         isa, "\tf32\t9\t9"));                             // 10: truncated
  const GemmTuningRecord record(path_);
  ::testing::internal::CaptureStderr();
  const std::optional<GemmLibrary> valid = record.Lookup({PrimitiveType::kF32, 3, 4, 5, true, false});
  const std::optional<GemmLibrary> refused = record.Lookup({PrimitiveType::kF32, 2, 2, 2, false, false});
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(valid, GemmLibrary::kOpenBlas);
  EXPECT_FALSE(refused.has_value());
  for (int line : {2, 3, 4, 5, 6, 7, 10}) {
    EXPECT_NE(warnings.find(absl::StrCat(path_, ": line ", line, ":")), std::string::npos)
        << "no warning for line " << line << " in:\n"
        << warnings;
  }
  EXPECT_EQ(warnings.find(": line 8:"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("'mkl' is not a GEMM library"), std::string::npos) << warnings;
}

TEST_F(GemmTuningTest, AFileThatIsNotARecordIsIgnoredAndRewrittenWhenRecording) {
  for (const std::string& junk : {std::string("\x7f"
                                              "ELF\x02\x01\x01\0\0garbage",
                                              16),
                                  std::string("lazyrt-gemm-tun"), std::string("lazyrt-gemm-tuning 5\n")}) {
    WriteFile(junk);
    const GemmTuningRecord record(path_);
    const GemmShape shape{PrimitiveType::kF32, 3, 4, 5, false, false};
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(record.Lookup(shape).has_value());
    const std::string warnings = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(warnings.find(absl::StrCat(path_, ": line 1 is not 'lazyrt-gemm-tuning 4'")), std::string::npos)
        << warnings;
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(record.Record(shape, GemmLibrary::kBlis), GemmLibrary::kBlis);
    ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(record.Lookup(shape), GemmLibrary::kBlis);  // a valid file again
    // The first writer wins: a later measurement does not replace the entry.
    EXPECT_EQ(record.Record(shape, GemmLibrary::kOneDnn), GemmLibrary::kBlis);
  }
}

// An older record's choices were made by older rules (version 1 among fewer libraries, before onednn_matmul and
// libxsmm; version 2 timed a library by panels that computed other bits than its whole product; version 3 timed the
// libraries one after another): its shapes are measured again, without a warning (it is not damage), and the first
// choice recorded rewrites it as version 4.
TEST_F(GemmTuningTest, AnOlderVersionsRecordIsIgnoredQuietlyAndRewrittenWhenRecording) {
  for (const char* older : {"lazyrt-gemm-tuning 1", "lazyrt-gemm-tuning 2", "lazyrt-gemm-tuning 3"}) {
    SCOPED_TRACE(older);
    WriteFile(absl::StrCat(older, "\n", HostIsa(), "\tf32\t3\t4\t5\t0\t0\tblis\n"));
    const GemmTuningRecord record(path_);
    const GemmShape shape{PrimitiveType::kF32, 3, 4, 5, false, false};
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(record.Lookup(shape).has_value());
    EXPECT_EQ(record.Record(shape, GemmLibrary::kOneDnnMatmul), GemmLibrary::kOneDnnMatmul);
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
    EXPECT_EQ(record.Lookup(shape), GemmLibrary::kOneDnnMatmul);
    std::ifstream in(path_);
    std::string first;
    std::getline(in, first);
    EXPECT_EQ(first, "lazyrt-gemm-tuning 4");
  }
}

// The temporary file of a writer killed mid-write: the next writer replaces it (one name, held under the
// lock) and removes the per-process ones earlier versions left (".tmp.<pid>"), nothing else; a symbolic
// link planted at the temporary name is replaced, not followed.
TEST_F(GemmTuningTest, AKilledWritersTemporaryFilesAreReplacedAndRemovedWhenRecording) {
  WriteFile("lazyrt-gemm-tuning 4\n");
  const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  const std::filesystem::path victim = dir_ / "victim.txt";
  std::ofstream(victim) << "not to be written";
  std::filesystem::create_symlink(victim, path_ + ".tmp");
  for (const char* leftover : {".tmp.123", ".tmp.4194304"}) std::ofstream(path_ + leftover) << "half a record";
  const std::vector<std::string> kept = {path_ + ".tmp.", path_ + ".tmp.12a", path_ + ".tmpx.1", path_ + ".keep"};
  for (const std::string& other : kept) std::ofstream(other) << "not ours";

  const GemmTuningRecord record(path_);
  const GemmShape shape{PrimitiveType::kF32, 3, 4, 5, false, false};
  EXPECT_EQ(record.Record(shape, GemmLibrary::kOneDnn), GemmLibrary::kOneDnn);
  EXPECT_EQ(record.Lookup(shape), GemmLibrary::kOneDnn);

  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "not to be written");
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) left.push_back(entry.path().string());
  std::sort(left.begin(), left.end());
  std::vector<std::string> want = kept;
  want.push_back(path_);
  want.push_back(path_ + ".lock");
  std::sort(want.begin(), want.end());
  EXPECT_EQ(left, want);
}

// The same for a record named by a relative path (LAZYRT_GEMM_TUNING_FILE=gemm_tuning.txt): its
// directory is the working directory.
TEST_F(GemmTuningTest, ARelativePathsLeftoversAreRemovedToo) {
  std::filesystem::create_directories(dir_);
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_);
  std::ofstream("gemm_tuning.txt.tmp.77") << "half a record";
  const GemmTuningRecord record("gemm_tuning.txt");
  const GemmShape shape{PrimitiveType::kF32, 3, 4, 5, false, false};
  EXPECT_EQ(record.Record(shape, GemmLibrary::kBlis), GemmLibrary::kBlis);
  const bool left = std::filesystem::exists("gemm_tuning.txt.tmp.77");
  std::filesystem::current_path(cwd);
  EXPECT_FALSE(left);
  EXPECT_EQ(GemmTuningRecord((dir_ / "gemm_tuning.txt").string()).Lookup(shape), GemmLibrary::kBlis);
}

TEST_F(GemmTuningTest, AnOversizedFileIsNotRead) {
  WriteFile("lazyrt-gemm-tuning 4\n" + std::string(5 << 20, '\n'));
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(GemmTuningRecord(path_).Lookup({PrimitiveType::kF32, 3, 4, 5, false, false}).has_value());
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("larger than"), std::string::npos);
}

// An instrumented build measures the GEMM libraries beside its own slower code, so it keeps a record of its
// own: a Release build never obeys what an AddressSanitizer build on the machine measured first.
TEST_F(GemmTuningTest, EachBuildFlavorHasADefaultRecordOfItsOwn) {
  // This test is built at -O0 whatever the build (tests/CMakeLists.txt); the library at the build's level.
  // Clang names its sanitizers by __has_feature only (before LLVM 22).
#if defined(__has_feature)
#define HAS_FEATURE(feature) __has_feature(feature)
#else
#define HAS_FEATURE(feature) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || HAS_FEATURE(address_sanitizer)
  EXPECT_EQ(BuildFlavor(), "asan");
#elif defined(__SANITIZE_THREAD__) || HAS_FEATURE(thread_sanitizer)
  EXPECT_EQ(BuildFlavor(), "tsan");
#elif defined(NDEBUG)
  EXPECT_EQ(BuildFlavor(), "");  // Release
#endif
#undef HAS_FEATURE
  const std::string file =
      BuildFlavor().empty() ? "gemm_tuning.txt" : "gemm_tuning-" + std::string(BuildFlavor()) + ".txt";
  std::map<std::string, std::optional<std::string>> saved;
  for (const char* name : {"XDG_CACHE_HOME", "HOME"}) {
    const char* value = std::getenv(name);
    saved[name] = value == nullptr ? std::nullopt : std::optional<std::string>(value);
  }
  setenv("XDG_CACHE_HOME", "/xdg/cache", 1);
  setenv("HOME", "/home/someone", 1);
  const std::string with_xdg = GemmTuningRecord::DefaultPath();
  unsetenv("XDG_CACHE_HOME");
  const std::string with_home = GemmTuningRecord::DefaultPath();
  for (const auto& [name, value] : saved) {
    if (value) {
      setenv(name.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
  EXPECT_EQ(with_xdg, "/xdg/cache/lazyrt-machine/" + file);
  EXPECT_EQ(with_home, "/home/someone/.cache/lazyrt-machine/" + file);
}

}  // namespace gemm_tuning_test
}  // namespace lazyrt::pjrt
