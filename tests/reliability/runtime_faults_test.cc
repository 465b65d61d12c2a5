// The runtime under faults: a device running out of memory in the middle of a step, a graph that
// fails to compile, a computation that fails on its data. Each must be a clear lazyrt::Error at the
// point the user can act on, and the runtime must go on working afterwards with nothing leaked and
// nothing wrong cached.
//
// The runtime is configured once per process (gtest_discover_tests runs each test in a process of
// its own): a 64 MiB device and a persistent cache in a scratch directory.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lazy/metrics.h"
#include "lazy/options.h"
#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace lazyrt {
namespace runtime_faults_test {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kDeviceMemory = int64_t{64} << 20;

const std::string& CacheDir() {
  static const std::string* dir = [] {
    std::string name = "/tmp/lazyrt-runtime-faults-XXXXXX";
    if (mkdtemp(name.data()) == nullptr) std::abort();
    auto* path = new std::string(name + "/cache");
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(std::filesystem::path(CacheDir()).parent_path(), ignored);
    });
    return path;
  }();
  return *dir;
}

void Configure() {
  static std::once_flag once;
  std::call_once(once, [] {
    Options options;
    options.device_memory_bytes = kDeviceMemory;
    options.cache_dir = CacheDir();
    configure(options);
  });
}

pjrt::Device& Device0() {
  Configure();
  return *detail::Runtime::Get().device_state({0}, SourceLocation::current()).device;
}

int64_t BytesInUse() {
  pjrt::Device& device = Device0();
  wait_device();
  return device.memory_stats().bytes_in_use;
}

int CacheEntries() {
  int n = 0;
  if (!std::filesystem::exists(CacheDir())) return 0;
  for (const auto& item : std::filesystem::directory_iterator(CacheDir())) {
    if (item.path().extension() == ".lzc") ++n;
  }
  return n;
}

Tensor Values(std::vector<int64_t> dims, float scale) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(static_cast<int64_t>(i % 13) - 6);
  return Tensor::FromData(v, dims);
}

// A few steps of gradient descent on a tiny model. At step `fail_at` the step also computes a tensor
// too big for the device, so that step's sync fails; the caller's handler drops the tensor and
// syncs again. Returns the final weights.
std::vector<float> Train(int steps, int fail_at, int64_t* bytes_before_failure = nullptr,
                         int64_t* bytes_after_failure = nullptr) {
  Tensor w = Values({64, 32}, 0.01f);
  w.requires_grad_();
  const Tensor x = Values({16, 64}, 0.1f);
  for (int step = 0; step < steps; ++step) {
    Tensor loss = sum(tanh(matmul(x, w)) * tanh(matmul(x, w)));
    loss.backward();
    {
      NoGradGuard no_grad;
      w.assign(w - w.grad() * 0.05);
      w.set_grad(Tensor());
    }
    if (step != fail_at) {
      sync();
      continue;
    }
    {
      // 16 x 2^20 f32 = 64 MiB: with the step's other buffers more than the device holds.
      Tensor huge = zeros({16, int64_t{1} << 20}) + 1.0;
      if (bytes_before_failure != nullptr) *bytes_before_failure = BytesInUse();
      const int line = __LINE__ + 2;  // the call, below `try {`
      try {
        sync();
        ADD_FAILURE() << "no out-of-memory error";
      } catch (const Error& e) {
        EXPECT_THAT(e.what(), AllOf(HasSubstr("out of memory"), HasSubstr("limit"),
                                    HasSubstr("runtime_faults_test.cc:" + std::to_string(line))));
      }
      if (bytes_after_failure != nullptr) *bytes_after_failure = BytesInUse();
    }
    sync();  // the step again, without the huge tensor: the weights' update was kept pending
  }
  return w.to_vector<float>();
}

TEST(RuntimeFaults, OutOfMemoryMidStepIsAClearErrorAndTheStepCanBeRetried) {
  Configure();
  const std::vector<float> clean = Train(6, -1);
  const int64_t idle = BytesInUse();
  int64_t before = 0, after = 0;
  const std::vector<float> faulted = Train(6, 3, &before, &after);
  EXPECT_EQ(after, before) << "the failed execution leaked device memory";
  // The step retried after the failure computes exactly what the uninterrupted run did.
  EXPECT_EQ(faulted, clean);
  EXPECT_EQ(BytesInUse(), idle);
}

TEST(RuntimeFaults, OutOfMemoryOnUploadIsAClearError) {
  const int64_t idle = BytesInUse();
  std::vector<float> too_big(static_cast<size_t>(kDeviceMemory / 4 + 16), 1.0f);
  const int line = __LINE__ + 2;  // the call, below `try {`
  try {
    Tensor t = Tensor::FromData(too_big, {static_cast<int64_t>(too_big.size())});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("FromData"), HasSubstr("out of memory"),
                                HasSubstr("runtime_faults_test.cc:" + std::to_string(line))));
  }
  EXPECT_EQ(BytesInUse(), idle);
  // The device still takes what fits.
  std::vector<float> fits(static_cast<size_t>(kDeviceMemory / 16), 2.0f);
  EXPECT_EQ(sum(Tensor::FromData(fits, {static_cast<int64_t>(fits.size())})).item(),
            2.0 * static_cast<double>(fits.size()));
  EXPECT_EQ(BytesInUse(), idle);
}

// A graph that runs in the memory left must also compile there: autotuning measures kernels on
// probe copies of every parameter, which on a device more than half full do not fit. Compiling then
// goes without tuning (the kernels as emitted are correct) instead of failing the graph.
TEST(RuntimeFaults, GraphCompilesOnADeviceTooFullToAutotune) {
  const int64_t idle = BytesInUse();
  {
    const int64_t n = kDeviceMemory / 4 * 5 / 8;  // 40 MiB of f32 on a 64 MiB device
    std::vector<float> values(static_cast<size_t>(n), 0.5f);
    Tensor big = Tensor::FromData(values, {n / 1024, 1024});
    EXPECT_EQ(sum(big).item(), static_cast<double>(n) / 2);
  }
  EXPECT_EQ(BytesInUse(), idle);
}

// A graph the compiler refuses: more elements than the device's Module format allows (2^40). The
// lazy API takes the shape, so the failure comes from compiling (the verifier), at sync time; the
// error names the graph (its size, the instruction and what is wrong) and the caller's line.
TEST(RuntimeFaults, FailedCompileNamesTheGraphAndCachesNothing) {
  Configure();
  const int64_t compiled_before = CounterValue(counters::kGraphsCompiled);
  const int entries_before = CacheEntries();
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second attempt must not find anything cached
    Tensor enormous = zeros({int64_t{1} << 21, int64_t{1} << 21}) + 1.0;
    const int line = __LINE__ + 2;  // the call, below `try {`
    try {
      sync();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(),
                  AllOf(HasSubstr("compiling the pending graph"), HasSubstr("nodes"), HasSubstr("too many elements"),
                        HasSubstr("runtime_faults_test.cc:" + std::to_string(line))));
    }
  }
  EXPECT_EQ(CounterValue(counters::kGraphsCompiled), compiled_before);
  EXPECT_EQ(CacheEntries(), entries_before) << "a graph that failed to compile left a cache entry";
  // The runtime goes on: a good graph compiles, runs and is stored.
  EXPECT_EQ((Values({4}, 1.0f) * 2.0).to_vector<float>(), (std::vector<float>{-12, -10, -8, -6}));
  EXPECT_EQ(CounterValue(counters::kGraphsCompiled), compiled_before + 1);
  EXPECT_EQ(CacheEntries(), entries_before + 1);
}

TEST(RuntimeFaults, FailedComputationIsReportedWhenReadAndDoesNotPoisonLaterSteps) {
  const int64_t idle = BytesInUse();
  {
    const std::vector<int64_t> idx = {0, 7, 1};
    Tensor table = Values({3, 2}, 1.0f);
    // Computed on the device: known indices are refused at the call (tests/lazy/indexing_test.cc).
    Tensor bad = index_select(table, 0, Tensor::FromData(std::span<const int64_t>(idx), {3}) * int64_t{1});
    Tensor derived = bad * 2.0;
    sync();                         // launching succeeds: the index is data, checked when the kernel runs
    const int line = __LINE__ + 2;  // the call, below `try {`
    try {
      bad.to_vector<float>();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("index 7"), HasSubstr("size 3"),
                                  HasSubstr("runtime_faults_test.cc:" + std::to_string(line))));
    }
    // A tensor computed from the failed one, in a later step, reports the same error.
    Tensor later = sum(derived) + 1.0;
    try {
      later.item();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("index 7"));
    }
    // Unrelated work goes on.
    EXPECT_EQ(sum(table).item(), -21.0);
  }
  EXPECT_EQ(BytesInUse(), idle);
}

}  // namespace runtime_faults_test
}  // namespace lazyrt
