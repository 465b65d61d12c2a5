// Bad input at the public API: every mistake a caller can make is a lazyrt::Error that says what was
// wrong (the shapes or dtypes involved, the valid choices) and where (the caller's file:line), raised
// at the call that made the mistake, and the runtime works normally afterwards.
//
// The runtime reads the environment once per process, so the cases that need an environment of
// their own skip themselves unless it is set; tests/reliability/CMakeLists.txt runs each of them
// as a separate process with that environment (BadInputTwoDevices.*: LAZYRT_DEVICES=2;
// BadInputEnvironment.UnknownSetting*: LAZYRT_NO_SUCH_SETTING=1;
// BadInputEnvironment.UnparsableValue: LAZYRT_DEVICES=two).
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace lazyrt {
namespace bad_input_test {

using ::testing::AllOf;
using ::testing::HasSubstr;

Tensor F32(std::vector<int64_t> dims, Device device = {}) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n), 1.0f);
  return Tensor::FromData(v, dims, device);
}

Tensor I64(std::vector<int64_t> values, std::vector<int64_t> dims) {
  return Tensor::FromData(std::span<const int64_t>(values), dims);
}

std::string Here(int line) { return "bad_input_test.cc:" + std::to_string(line); }

// Expects `statement` (on source line `line`) to throw lazyrt::Error whose message contains every
// one of `parts` and the caller's file:line.
#define EXPECT_BAD_INPUT(statement, ...)                                      \
  do {                                                                        \
    const int line_ = __LINE__;                                               \
    try {                                                                     \
      statement;                                                              \
      ADD_FAILURE() << "no lazyrt::Error from: " #statement;                  \
    } catch (const Error& e) {                                                \
      for (const std::string& part : std::vector<std::string>{__VA_ARGS__}) { \
        EXPECT_THAT(e.what(), HasSubstr(part)) << #statement;                 \
      }                                                                       \
      EXPECT_THAT(e.what(), HasSubstr(Here(line_))) << #statement;            \
    }                                                                         \
  } while (0)

bool EnvIs(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == value;
}

// The runtime works after the errors: a small graph computes the right numbers.
void ExpectRuntimeWorks() { EXPECT_EQ((F32({2, 2}) * 3.0 + 1.0).to_vector<float>(), (std::vector<float>{4, 4, 4, 4})); }

TEST(BadInput, WrongShapes) {
  Tensor a = F32({2, 3}), b = F32({4}), m = F32({4, 5});
  EXPECT_BAD_INPUT(a + b, "f32[2,3]", "f32[4]");
  EXPECT_BAD_INPUT(matmul(a, m), "matmul", "f32[2,3]", "f32[4,5]");
  EXPECT_BAD_INPUT(reshape(a, {4, 2}), "f32[2,3]", "[4,2]");
  EXPECT_BAD_INPUT(cat({a, m}, 0), "f32[2,3]", "f32[4,5]");
  EXPECT_BAD_INPUT(sum(a, {2}), "dimension 2", "rank 2", "valid: -2 to 1");
  EXPECT_BAD_INPUT(transpose(a, 0, 5), "dimension 5", "rank 2");
  EXPECT_BAD_INPUT(expand(a, {4, 3}), "f32[2,3]");
  EXPECT_BAD_INPUT(a.assign(b), "f32[4]", "f32[2,3]");
  EXPECT_BAD_INPUT(Tensor::FromData({1, 2, 3}, {2, 2}), "3 values", "[2,2]");
  EXPECT_BAD_INPUT(zeros({2, -1}), "-1");
  EXPECT_BAD_INPUT(a.item(), "item", "f32[2,3]");
  ExpectRuntimeWorks();
}

TEST(BadInput, WrongDtypes) {
  Tensor f = F32({3, 2});
  Tensor i = I64({0, 1, 2}, {3});
  EXPECT_BAD_INPUT(index_select(f, 0, f), "index_select", "f32[3,2]");
  EXPECT_BAD_INPUT(where(f, f, f), "where", "f32[3,2]");
  EXPECT_BAD_INPUT(one_hot(f, 3), "one_hot", "f32[3,2]");
  EXPECT_BAD_INPUT(mean(i), "mean", "i64[3]");
  EXPECT_BAD_INPUT(matmul(i, i), "matmul", "i64[3]");
  EXPECT_BAD_INPUT(logical_and(f, f), "f32[3,2]");
  ExpectRuntimeWorks();
}

TEST(BadInput, UndefinedTensorAndUnknownDevice) {
  Tensor undefined;
  EXPECT_BAD_INPUT(undefined + 1.0, "undefined tensor");
  EXPECT_BAD_INPUT(undefined.item(), "undefined tensor");
  EXPECT_BAD_INPUT(zeros({2}, DType::kF32, Device{7}), "lazy:7", "does not exist", "LAZYRT_DEVICES");
  ExpectRuntimeWorks();
}

// A buffer deleted behind the tensor's back (what a runtime bug or a misuse of the device layer
// looks like): reading it, or computing with it, is a clear error, and dropping the tensors that
// depend on it leaves the runtime as it was.
TEST(BadInput, UseOfADeletedBuffer) {
  {
    Tensor t = F32({2, 3});
    t.impl()->buffer->Delete();
    EXPECT_BAD_INPUT(t.to_vector<float>(), "deleted", "f32[2,3]");
    Tensor u = t * 2.0;
    EXPECT_BAD_INPUT(u.to_vector<float>(), "deleted", "f32[2,3]");
  }
  ExpectRuntimeWorks();
}

TEST(BadInputTwoDevices, TensorFromAnotherDevice) {
  if (!EnvIs("LAZYRT_DEVICES", "2")) GTEST_SKIP() << "runs with LAZYRT_DEVICES=2 (a process of its own)";
  Tensor a = F32({2, 2}, Device{0});
  Tensor b = F32({2, 2}, Device{1});
  EXPECT_BAD_INPUT(a + b, "different devices", "lazy:0", "lazy:1");
  EXPECT_BAD_INPUT(matmul(a, b), "different devices");
  EXPECT_BAD_INPUT(a.assign(b), "different devices");
  EXPECT_BAD_INPUT(Tensor::FromData({1.0f, 2.0f}, {2}, Device{2}), "lazy:2", "2 device(s)");
  // Each device computes its own tensors.
  EXPECT_EQ((b + b).to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
  EXPECT_EQ((a * 5.0).to_vector<float>(), (std::vector<float>{5, 5, 5, 5}));
}

TEST(BadInputEnvironment, UnknownSetting) {
  if (!EnvIs("LAZYRT_NO_SUCH_SETTING", "1")) GTEST_SKIP() << "runs with LAZYRT_NO_SUCH_SETTING=1";
  // The first use of the runtime refuses the environment, naming the valid settings; so does every
  // later use (the runtime never starts with a configuration it was not given).
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      F32({2});
      FAIL() << "no error for an unknown LAZYRT_* setting";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("unknown setting LAZYRT_NO_SUCH_SETTING"), HasSubstr("LAZYRT_DEVICES"),
                                  HasSubstr("LAZYRT_CACHE_DIR")));
    }
  }
}

TEST(BadInputEnvironment, UnknownSettingWithOptionsInCode) {
  if (!EnvIs("LAZYRT_NO_SUCH_SETTING", "1")) GTEST_SKIP() << "runs with LAZYRT_NO_SUCH_SETTING=1";
  // Options given in code win over the environment, but a typo in it is still refused.
  try {
    configure(Options{});
    FAIL() << "configure() accepted an unknown LAZYRT_* setting";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("unknown setting LAZYRT_NO_SUCH_SETTING"), HasSubstr("LAZYRT_DEVICES")));
  }
}

TEST(BadInputEnvironment, UnparsableValue) {
  if (!EnvIs("LAZYRT_DEVICES", "two")) GTEST_SKIP() << "runs with LAZYRT_DEVICES=two";
  try {
    F32({2});
    FAIL() << "no error for LAZYRT_DEVICES=two";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("LAZYRT_DEVICES=two"), HasSubstr("number of simulated devices")));
  }
}

}  // namespace bad_input_test
}  // namespace lazyrt
