// Walks the opcode table (pjrt_sim/opcode.h): every elementwise opcode and reduce combiner, for every
// element type, has a verifier rule, a kernel and (elementwise) a constant-folding rule that gives the
// kernel's bits; a type the row does not accept is refused by the verifier. A row added without its
// pieces fails here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/module_verifier.h"
#include "pjrt_sim/opcode.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace opcode_table_test {

using ::testing::HasSubstr;
using testing::HostArray;
using testing::ModuleBuilder;

constexpr int64_t kPoints = 6;

// Inputs that exercise each type's edges: negatives, zero, fractions (floats), both truth values.
std::vector<double> SampleValues(PrimitiveType type, int operand) {
  switch (type) {
    case PrimitiveType::kPred:
      return operand == 0 ? std::vector<double>{0, 1, 1, 0, 1, 0} : std::vector<double>{0, 0, 1, 1, 1, 0};
    case PrimitiveType::kS32:
    case PrimitiveType::kS64:
      return operand == 0 ? std::vector<double>{-3, -1, 0, 2, 5, 7} : std::vector<double>{2, -2, 3, 0, 1, -1};
    case PrimitiveType::kF32:
    case PrimitiveType::kF64:
    case PrimitiveType::kBF16:
    case PrimitiveType::kF16:
      return operand == 0 ? std::vector<double>{-1.5, -0.25, 0, 0.5, 2, 0.75}
                          : std::vector<double>{2, 0.5, -1.25, 3, -0.5, 0.25};
  }
  return {};
}

HostArray MakeInput(PrimitiveType type, const std::vector<double>& values, testing::Dims dims = {kPoints}) {
  HostArray a(ArrayShape{type, std::move(dims)});
  for (size_t i = 0; i < values.size(); ++i) {
    StoreElement(values[i], type, a.bytes.data() + i * static_cast<size_t>(ByteWidth(type)));
  }
  return a;
}

std::vector<uint8_t> ElementBytes(const HostArray& a, int64_t i) {
  const int64_t w = ByteWidth(a.shape.type);
  return {a.bytes.begin() + i * w, a.bytes.begin() + (i + 1) * w};
}

int Arity(Opcode op) { return ClassOf(op) == OpClass::kUnary ? 1 : 2; }

TEST(OpcodeTable, NamesAndNumbersAreUniqueAndRoundTrip) {
  std::set<std::string> names;
  for (Opcode op : kAllOpcodes) {
    EXPECT_EQ(OpcodeFromNumber(static_cast<int64_t>(op)), op);
    EXPECT_FALSE(OpcodeName(op).empty());
    EXPECT_TRUE(names.insert(OpcodeName(op)).second) << "two opcodes are named " << OpcodeName(op);
  }
  EXPECT_EQ(OpcodeName(Opcode::kRngUniform), "rng_uniform");
  EXPECT_FALSE(OpcodeFromNumber(0).has_value());
  EXPECT_FALSE(OpcodeFromNumber(9999).has_value());
  for (Combiner c : kAllCombiners) EXPECT_EQ(CombinerFromNumber(static_cast<int64_t>(c)), c);
}

TEST(OpcodeTable, EveryElementwiseOpcodeAndTypeHasAVerifierRuleAKernelAndAFoldingRuleThatAgree) {
  std::unique_ptr<Client> client = testing::MakeClient();
  ASSERT_NE(client, nullptr);
  int checked = 0;
  for (Opcode op : kAllOpcodes) {
    if (!IsUnary(op) && !IsBinary(op)) continue;
    for (PrimitiveType type : kAllPrimitiveTypes) {
      SCOPED_TRACE(OpcodeName(op) + " on " + std::string(PrimitiveTypeName(type)));
      const proto::ElementType t = ToProto(type);
      ModuleBuilder kernel;
      std::vector<int64_t> params;
      std::vector<HostArray> args;
      for (int k = 0; k < Arity(op); ++k) {
        params.push_back(kernel.Parameter(k, t, {kPoints}));
        args.push_back(MakeInput(type, SampleValues(type, k)));
      }
      kernel.Output(kernel.Op(op, params, t, {kPoints}));
      if (!Accepts(TypeClassOf(op), type)) {
        const absl::Status s = VerifyModule(kernel.module());
        EXPECT_FALSE(s.ok());
        EXPECT_THAT(std::string(s.message()), HasSubstr("takes"));
        continue;
      }
      absl::StatusOr<std::vector<HostArray>> ran = testing::CompileAndRun(*client, kernel.module(), {}, args);
      ASSERT_TRUE(ran.ok()) << ran.status();
      // The same op on splat constants is folded by the compiler: it must give the kernel's bits.
      for (int64_t i = 0; i < kPoints; ++i) {
        ModuleBuilder folded;
        std::vector<int64_t> constants;
        for (int k = 0; k < Arity(op); ++k) {
          constants.push_back(folded.Constant(SampleValues(type, k)[static_cast<size_t>(i)], t, {}));
        }
        folded.Output(folded.Op(op, constants, t, {}));
        absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(folded.module(), {});
        ASSERT_TRUE(exe.ok()) << exe.status();
        for (const proto::Kernel& k : (*exe)->proto().kernels()) {
          for (const proto::Step& s : k.program()) {
            EXPECT_NE(s.opcode(), static_cast<int32_t>(op)) << "not folded";
          }
        }
        absl::StatusOr<std::vector<HostArray>> value = testing::ExecuteOnHost(*client, **exe, {});
        ASSERT_TRUE(value.ok()) << value.status();
        EXPECT_EQ(ElementBytes((*value)[0], 0), ElementBytes((*ran)[0], i)) << "point " << i;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

// An independent reference for each combiner over doubles.
double ReferenceReduce(Combiner c, const std::vector<double>& v) {
  switch (c) {
    case Combiner::kSum: {
      double s = 0;
      for (double x : v) s += x;
      return s;
    }
    case Combiner::kProd: {
      double p = 1;
      for (double x : v) p *= x;
      return p;
    }
    case Combiner::kMax: return *std::max_element(v.begin(), v.end());
    case Combiner::kMin: return *std::min_element(v.begin(), v.end());
    case Combiner::kAll: return std::all_of(v.begin(), v.end(), [](double x) { return x != 0; });
    case Combiner::kAny: return std::any_of(v.begin(), v.end(), [](double x) { return x != 0; });
  }
  return NAN;
}

TEST(OpcodeTable, EveryCombinerAndTypeHasAVerifierRuleAndAKernel) {
  std::unique_ptr<Client> client = testing::MakeClient();
  ASSERT_NE(client, nullptr);
  for (Combiner combiner : kAllCombiners) {
    for (PrimitiveType type : kAllPrimitiveTypes) {
      SCOPED_TRACE(CombinerName(combiner) + " on " + std::string(PrimitiveTypeName(type)));
      const proto::ElementType t = ToProto(type);
      ModuleBuilder b;
      const int64_t x = b.Parameter(0, t, {2, 3});
      b.Output(b.Reduce(combiner, x, {1}));
      if (!Accepts(TypeClassOf(combiner), type)) {
        EXPECT_FALSE(VerifyModule(b.module()).ok());
        continue;
      }
      const std::vector<double> values = SampleValues(type, 0);
      absl::StatusOr<std::vector<HostArray>> ran =
          testing::CompileAndRun(*client, b.module(), {}, {MakeInput(type, values, {2, 3})});
      ASSERT_TRUE(ran.ok()) << ran.status();
      for (int64_t row = 0; row < 2; ++row) {
        const std::vector<double> run(values.begin() + row * 3, values.begin() + row * 3 + 3);
        alignas(8) uint8_t want[8];
        StoreElement(ReferenceReduce(combiner, run), type, want);
        EXPECT_EQ(ElementBytes((*ran)[0], row), std::vector<uint8_t>(want, want + ByteWidth(type))) << "row " << row;
      }
    }
  }
}

}  // namespace opcode_table_test
}  // namespace lazyrt::pjrt
