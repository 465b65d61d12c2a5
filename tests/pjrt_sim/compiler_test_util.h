// What the compiler tests share: a fixture that compiles and runs modules, and facts read off the
// executable they produce (kernels by kind, what each computes, pass timings).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {

using testing::Dims;
using ::testing::ElementsAre;
using testing::HostArray;
using testing::MakeArray;
using testing::ModuleBuilder;

inline const CompileOptions kUnfused{.fusion = false, .autotune = false};
inline const CompileOptions kFused{.fusion = true, .autotune = false};

// Compiles modules on a fresh client of one device.
class CompilerTest : public ::testing::Test {
 protected:
  proto::Executable CompileToProto(const proto::Module& module, const CompileOptions& options) {
    absl::StatusOr<std::shared_ptr<Executable>> exe = client_->Compile(module, options);
    EXPECT_TRUE(exe.ok()) << exe.status();
    return exe.ok() ? (*exe)->proto() : proto::Executable();
  }

  std::vector<HostArray> Run(const proto::Module& module, const CompileOptions& options,
                             const std::vector<HostArray>& args) {
    absl::StatusOr<std::vector<HostArray>> r = testing::CompileAndRun(*client_, module, options, args);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<HostArray>(static_cast<size_t>(module.outputs_size()));
  }

  std::unique_ptr<Client> client_ = testing::MakeClient();
};

inline int64_t PassChanges(const proto::Executable& exe, absl::string_view pass) {
  for (const proto::PassTiming& t : exe.pass_timings()) {
    if (t.pass() == pass) return t.changes();
  }
  ADD_FAILURE() << "no pass " << pass;
  return -1;
}

inline int CountKernels(const proto::Executable& exe, proto::Kernel::Kind kind) {
  int n = 0;
  for (const proto::Kernel& k : exe.kernels()) n += k.kind() == kind;
  return n;
}

inline bool Computes(const proto::Kernel& k, Opcode op) {
  for (const proto::Step& s : k.program()) {
    if (!s.load() && s.opcode() == static_cast<int32_t>(op)) return true;
  }
  return false;
}

// How many kernels compute `op` in their program.
inline int KernelsComputing(const proto::Executable& exe, Opcode op) {
  int n = 0;
  for (const proto::Kernel& k : exe.kernels()) n += Computes(k, op);
  return n;
}

// The points of the iteration space of each kernel that computes `op`, in schedule order: how many times
// the executable evaluates it.
inline std::vector<int64_t> PointsComputing(const proto::Executable& exe, Opcode op) {
  std::vector<int64_t> points;
  for (const proto::Kernel& k : exe.kernels()) {
    if (!Computes(k, op)) continue;
    int64_t n = 1;
    for (int64_t d : k.iteration_shape().dims()) n *= d;
    points.push_back(n);
  }
  return points;
}

inline std::string KernelSummary(const proto::Executable& exe) {
  std::string s;
  for (const proto::Kernel& k : exe.kernels()) {
    absl::StrAppend(&s, proto::Kernel::Kind_Name(k.kind()), " '", k.label(), "' steps=", k.program_size(), "\n");
  }
  return s;
}

inline HostArray F32(const Dims& dims, std::vector<float> v) { return MakeArray<float>(PrimitiveType::kF32, dims, v); }

}  // namespace lazyrt::pjrt
