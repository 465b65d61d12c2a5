// CUMSUM and ARGSORT through every device layer: the verifier's rules, the kernels against reference
// loops, the executable's round trip and the loader's checks of their kernel fields.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "pjrt_sim/executable.h"
#include "pjrt_sim/module_verifier.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace sort_and_scan_test {

using testing::Dims;
using ::testing::HasSubstr;
using testing::HostArray;
using testing::MakeArray;
using testing::ModuleBuilder;

int64_t AlongAxis(ModuleBuilder& b, Opcode op, int64_t x, int64_t axis, CompareDirection direction,
                  proto::ElementType type) {
  return b.Op(op, {x}, type, b.dims(x), [&](proto::Instruction& i) {
    i.set_axis(axis);
    if (op == Opcode::kArgsort) i.set_direction(static_cast<int32_t>(direction));
  });
}

ModuleBuilder OneOp(Opcode op, proto::ElementType in_type, const Dims& in, proto::ElementType out_type, const Dims& out,
                    int64_t axis, int32_t direction = 2) {
  ModuleBuilder b;
  b.Parameter(0, in_type, in);
  b.Op(op, {0}, out_type, out, [&](proto::Instruction& i) {
    i.set_axis(axis);
    i.set_direction(direction);
  });
  return b;
}

void ExpectRejected(const ModuleBuilder& b, const std::string& part) {
  const absl::Status s = VerifyModule(b.module());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(part));
}

TEST(SortAndScanVerifier, AcceptsWellFormedAndRejectsMalformed) {
  EXPECT_TRUE(VerifyModule(OneOp(Opcode::kCumsum, proto::F32, {2, 3}, proto::F32, {2, 3}, 1).module()).ok());
  EXPECT_TRUE(VerifyModule(OneOp(Opcode::kCumsum, proto::S32, {4}, proto::S32, {4}, 0).module()).ok());
  EXPECT_TRUE(VerifyModule(OneOp(Opcode::kArgsort, proto::PRED, {2, 3}, proto::S64, {2, 3}, 0, 4).module()).ok());
  EXPECT_TRUE(VerifyModule(OneOp(Opcode::kArgsort, proto::BF16, {0, 3}, proto::S64, {0, 3}, 0, 2).module()).ok());

  ExpectRejected(OneOp(Opcode::kCumsum, proto::F32, {2, 3}, proto::F32, {2, 3}, 2), "axis 2 is out of range");
  ExpectRejected(OneOp(Opcode::kCumsum, proto::F32, {2, 3}, proto::F32, {2, 3}, -1), "axis -1 is out of range");
  ExpectRejected(OneOp(Opcode::kCumsum, proto::F32, {}, proto::F32, {}, 0), "out of range for rank 0");
  ExpectRejected(OneOp(Opcode::kCumsum, proto::F32, {2, 3}, proto::F32, {3, 2}, 0), "must have the dims");
  ExpectRejected(OneOp(Opcode::kCumsum, proto::F32, {2, 3}, proto::F64, {2, 3}, 0), "types differ");
  ExpectRejected(OneOp(Opcode::kCumsum, proto::PRED, {2}, proto::PRED, {2}, 0), "not pred");
  ExpectRejected(OneOp(Opcode::kArgsort, proto::F32, {2, 3}, proto::S32, {2, 3}, 0), "result must be s64");
  ExpectRejected(OneOp(Opcode::kArgsort, proto::F32, {2, 3}, proto::S64, {2, 3}, 0, 0), "direction 0");
  ExpectRejected(OneOp(Opcode::kArgsort, proto::F32, {2, 3}, proto::S64, {2, 3}, 0, 99), "direction 99");
  ExpectRejected(OneOp(Opcode::kArgsort, proto::F32, {2, 3}, proto::S64, {2, 3}, 1 << 20), "out of range");
  ModuleBuilder two;
  two.Parameter(0, proto::F32, {3});
  two.Op(Opcode::kArgsort, {0, 0}, proto::S64, {3},
         [](proto::Instruction& i) { i.set_direction(static_cast<int32_t>(CompareDirection::kLt)); });
  ExpectRejected(two, "expects 1 operand");
}

// Along axis 1 of [outer, size, inner]: running sums, and the positions in stable NaN-last order.
std::vector<double> CumsumReference(const std::vector<double>& x, int64_t outer, int64_t size, int64_t inner) {
  std::vector<double> out(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double sum = 0;
      for (int64_t a = 0; a < size; ++a) {
        const auto at = static_cast<size_t>((o * size + a) * inner + i);
        sum += x[at];
        out[at] = sum;
      }
    }
  }
  return out;
}

std::vector<int64_t> ArgsortReference(const std::vector<double>& x, int64_t outer, int64_t size, int64_t inner,
                                      bool descending) {
  std::vector<int64_t> out(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t a) { return static_cast<size_t>((o * size + a) * inner + i); };
      std::vector<int64_t> order(static_cast<size_t>(size));
      std::iota(order.begin(), order.end(), 0);
      // Insertion sort: stable by construction, independent of the kernel's std::stable_sort.
      auto key = [&](int64_t a) {
        const double v = x[at(a)];
        return std::isnan(v) ? std::numeric_limits<double>::max() : v;  // no test value reaches max
      };
      for (size_t k = 1; k < order.size(); ++k) {
        for (size_t j = k; j > 0; --j) {
          const double prev = key(order[j - 1]), cur = key(order[j]);
          if (descending ? cur > prev : cur < prev) {
            std::swap(order[j - 1], order[j]);
          } else {
            break;
          }
        }
      }
      for (int64_t a = 0; a < size; ++a) out[at(a)] = order[static_cast<size_t>(a)];
    }
  }
  return out;
}

TEST(SortAndScanKernels, MatchReferenceLoopsOnEveryAxisAndSerializeRoundTrip) {
  auto client = testing::MakeClient();
  std::mt19937_64 rng(5);
  const Dims dims = {3, 5, 4};
  std::vector<double> x(60);
  for (double& v : x) v = static_cast<double>(rng() % 7) - 3 + (rng() % 2 == 0 ? 0.5 : 0);  // many ties
  x[7] = std::numeric_limits<double>::quiet_NaN();
  x[31] = std::numeric_limits<double>::quiet_NaN();
  for (int64_t axis = 0; axis < 3; ++axis) {
    for (bool descending : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "axis " << axis << " descending " << descending);
      ModuleBuilder b;
      const int64_t p = b.Parameter(0, proto::F64, dims);
      b.Output(AlongAxis(b, Opcode::kArgsort, p, axis, descending ? CompareDirection::kGt : CompareDirection::kLt,
                         proto::S64));
      b.Output(AlongAxis(b, Opcode::kCumsum, p, axis, CompareDirection::kEq, proto::F64));
      absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(b.module(), {});
      ASSERT_TRUE(exe.ok()) << exe.status();
      // The loaded copy of the serialized executable computes the same.
      absl::StatusOr<std::shared_ptr<Executable>> loaded = client->LoadSerializedExecutable((*exe)->Serialize());
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < axis; ++d) outer *= dims[static_cast<size_t>(d)];
      for (int64_t d = axis + 1; d < 3; ++d) inner *= dims[static_cast<size_t>(d)];
      const int64_t size = dims[static_cast<size_t>(axis)];
      for (const Executable* e : {exe->get(), loaded->get()}) {
        absl::StatusOr<std::vector<HostArray>> out =
            testing::ExecuteOnHost(*client, *e, {MakeArray(PrimitiveType::kF64, dims, x)});
        ASSERT_TRUE(out.ok()) << out.status();
        EXPECT_EQ((*out)[0].values<int64_t>(), ArgsortReference(x, outer, size, inner, descending));
        const std::vector<double> sums = (*out)[1].values<double>();
        const std::vector<double> want = CumsumReference(x, outer, size, inner);
        for (size_t k = 0; k < want.size(); ++k) {
          EXPECT_TRUE(sums[k] == want[k] || (std::isnan(sums[k]) && std::isnan(want[k]))) << k;
        }
      }
    }
  }
}

TEST(SortAndScanKernels, CumsumTypesAndLongRowsInParallel) {
  auto client = testing::MakeClient();
  // f32 sums in f64: 2^18 rows' worth of 0.1f ends where the f64 sum of the f32 values does.
  const int64_t rows = 64, size = 1 << 12;
  ModuleBuilder b;
  b.Output(
      AlongAxis(b, Opcode::kCumsum, b.Parameter(0, proto::F32, {rows, size}), 1, CompareDirection::kEq, proto::F32));
  absl::StatusOr<std::vector<HostArray>> out = testing::CompileAndRun(
      *client, b.module(), {},
      {MakeArray(PrimitiveType::kF32, {rows, size}, std::vector<float>(static_cast<size_t>(rows * size), 0.1F))});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t a : {int64_t{0}, size / 2, size - 1}) {
      const float want = static_cast<float>(static_cast<double>(a + 1) * static_cast<double>(0.1F));
      ASSERT_EQ((*out)[0].at<float>(r * size + a), want) << r << " " << a;
    }
  }
  // Integers wrap around in their own type (two's complement), without undefined behaviour.
  ModuleBuilder ints;
  ints.Output(
      AlongAxis(ints, Opcode::kCumsum, ints.Parameter(0, proto::S32, {3}), 0, CompareDirection::kEq, proto::S32));
  const int32_t max = std::numeric_limits<int32_t>::max();
  out = testing::CompileAndRun(*client, ints.module(), {},
                               {MakeArray(PrimitiveType::kS32, {3}, std::vector<int32_t>{max, 1, 5})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].values<int32_t>(),
            (std::vector<int32_t>{max, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::min() + 5}));
}

TEST(SortAndScanKernels, LoaderRejectsBadKernelFields) {
  auto client = testing::MakeClient();
  ModuleBuilder b;
  const int64_t p = b.Parameter(0, proto::F32, {4, 3});
  b.Output(AlongAxis(b, Opcode::kArgsort, p, 1, CompareDirection::kGt, proto::S64));
  b.Output(AlongAxis(b, Opcode::kCumsum, p, 0, CompareDirection::kEq, proto::F32));
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(b.module(), {.fusion = false, .autotune = false});
  ASSERT_TRUE(exe.ok()) << exe.status();
  const proto::Executable good = (*exe)->proto();
  int sort_kernel = -1, scan_kernel = -1;
  for (int k = 0; k < good.kernels_size(); ++k) {
    if (good.kernels(k).kind() == proto::Kernel::ARGSORT) sort_kernel = k;
    if (good.kernels(k).kind() == proto::Kernel::CUMSUM) scan_kernel = k;
  }
  ASSERT_GE(sort_kernel, 0);
  ASSERT_GE(scan_kernel, 0);
  EXPECT_EQ(good.kernels(sort_kernel).direction(), static_cast<int32_t>(CompareDirection::kGt));
  EXPECT_TRUE(Executable::Load(good).ok());
  const auto rejected = [&](const std::function<void(proto::Executable&)>& mutate, const std::string& what) {
    proto::Executable bad = good;
    mutate(bad);
    const absl::Status s = Executable::Load(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(what));
  };
  for (int32_t direction : {0, 1, 3, 5, -1, 1 << 30}) {
    rejected([&](proto::Executable& e) { e.mutable_kernels(sort_kernel)->set_direction(direction); }, "bad argsort");
  }
  for (int64_t axis : {int64_t{-1}, int64_t{2}, std::numeric_limits<int64_t>::max()}) {
    rejected([&](proto::Executable& e) { e.mutable_kernels(sort_kernel)->set_axis(axis); }, "bad argsort");
    rejected([&](proto::Executable& e) { e.mutable_kernels(scan_kernel)->set_axis(axis); }, "bad cumsum");
  }
  rejected(
      [&](proto::Executable& e) { e.mutable_kernels(scan_kernel)->add_inputs(good.kernels(scan_kernel).inputs(0)); },
      "bad cumsum");
  rejected([&](proto::Executable& e) { e.mutable_kernels(sort_kernel)->mutable_iteration_shape()->add_dims(1); },
           "bad argsort");
  EXPECT_EQ(KernelIterationText(good, good.kernels(scan_kernel)), "4x3");
}

}  // namespace sort_and_scan_test
}  // namespace lazyrt::pjrt
