#include "pjrt_sim/module_verifier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace module_verifier_test {

using ::testing::HasSubstr;
using testing::ModuleBuilder;

// Expects INVALID_ARGUMENT whose message contains every one of `parts`.
void ExpectRejected(const proto::Module& module, std::initializer_list<absl::string_view> parts) {
  absl::Status s = VerifyModule(module);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (absl::string_view part : parts) EXPECT_THAT(std::string(s.message()), HasSubstr(std::string(part)));
}

// Two f32[2,3] parameters: the start of most malformed modules below.
ModuleBuilder TwoParameters() {
  ModuleBuilder b;
  b.Parameter(0, proto::F32, {2, 3});
  b.Parameter(1, proto::F32, {2, 3});
  return b;
}

ModuleBuilder EveryOpcode() {
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {2, 3});
  const int64_t seed = b.Parameter(1, proto::S64, {});
  const int64_t idx = b.Parameter(2, proto::S32, {4});
  const int64_t gidx = b.Parameter(3, proto::S64, {2, 2});
  const int64_t c = b.Constant(1.5, proto::F32, {2, 3});
  b.Iota(proto::S32, {2, 3}, 1, 5, 2);
  b.Rng(Opcode::kRngUniform, seed, proto::F32, {2, 3}, 7);
  b.Rng(Opcode::kRngNormal, seed, proto::BF16, {4}, 8);
  for (Opcode op : {Opcode::kNegate, Opcode::kAbs, Opcode::kExp, Opcode::kLog, Opcode::kSqrt, Opcode::kRsqrt,
                    Opcode::kTanh, Opcode::kLogistic, Opcode::kSign}) {
    b.Unary(op, x);
  }
  for (Opcode op : {Opcode::kAdd, Opcode::kSubtract, Opcode::kMultiply, Opcode::kDivide, Opcode::kPower,
                    Opcode::kMaximum, Opcode::kMinimum}) {
    b.Binary(op, x, c);
  }
  const int64_t p = b.Compare(CompareDirection::kLt, x, c);
  b.Unary(Opcode::kNot, p);
  b.Binary(Opcode::kAnd, p, p);
  b.Binary(Opcode::kOr, p, p);
  b.Select(p, x, c);
  b.Convert(x, proto::S64);
  b.Convert(x, proto::BF16);
  const int64_t row = b.Parameter(4, proto::F32, {3});
  b.Broadcast(row, {2, 3}, {1});
  b.Broadcast(b.Parameter(5, proto::F32, {1, 3}), {4, 2, 3}, {1, 2});
  b.Reshape(x, {3, 2});
  b.Reshape(x, {6});
  b.Transpose(x, {1, 0});
  b.Slice(x, {0, 1}, {2, 3}, {2, 1});
  b.Concatenate({x, c, x}, 1);
  b.IndexSelect(x, idx, 1);
  b.Gather(x, gidx, 1);
  b.Reduce(Combiner::kSum, x, {0, 1});
  b.Reduce(Combiner::kMax, x, {1});
  b.Reduce(Combiner::kSum, x, {});
  b.Argmax(x, 1);
  b.Op(Opcode::kCumsum, {x}, proto::F32, {2, 3}, [](proto::Instruction& i) { i.set_axis(1); });
  b.Op(Opcode::kArgsort, {x}, proto::S64, {2, 3}, [](proto::Instruction& i) {
    i.set_axis(0);
    i.set_direction(static_cast<int32_t>(CompareDirection::kGt));
  });
  const int64_t w = b.Parameter(6, proto::F32, {3, 4});
  b.Dot(x, w);
  b.Dot(b.Transpose(x, {1, 0}), w, /*transpose_lhs=*/true);
  const int64_t batched = b.Parameter(7, proto::F32, {5, 2, 3});
  b.Dot(batched, w);  // rhs shared across the batch
  b.Dot(batched, b.Parameter(8, proto::F32, {5, 4, 3}), false, true);
  // Attention forward (a pred mask broadcast over the batch) and backward (causal).
  const int64_t q = b.Parameter(9, proto::F32, {2, 3, 4});
  const int64_t k = b.Parameter(10, proto::F32, {2, 5, 4});
  const int64_t v = b.Parameter(11, proto::F32, {2, 5, 2});
  const int64_t fwd = b.Op(Opcode::kAttention, {q, k, v, b.Parameter(12, proto::PRED, {1, 3, 5})}, proto::F32,
                           {2, 3, 3}, [](proto::Instruction& i) { i.set_value(0.5); });
  b.Op(Opcode::kAttentionGrad, {q, k, v, fwd, b.Parameter(13, proto::F32, {2, 3, 2})}, proto::F32, {2, 42},
       [](proto::Instruction& i) {
         i.set_value(0.5);
         i.set_causal(true);
       });
  for (Opcode op : {Opcode::kLayerNorm, Opcode::kRmsNorm}) {
    b.Op(op, {x}, proto::F32, {2, 3}, [](proto::Instruction& i) {
      i.set_axis(1);
      i.set_value(1e-5);
    });
  }
  b.Op(Opcode::kScatterAdd, {x, gidx, b.Parameter(14, proto::F32, {2, 2})}, proto::F32, {2, 3},
       [](proto::Instruction& i) { i.set_site(1); });
  b.Op(Opcode::kIndexAdd, {x, idx, b.Parameter(15, proto::F32, {2, 4})}, proto::F32, {2, 3},
       [](proto::Instruction& i) { i.set_axis(1); });
  for (Opcode op : {Opcode::kLayerNormGrad, Opcode::kRmsNormGrad}) {
    b.Op(op, {x, c}, proto::F32, {2, 3}, [](proto::Instruction& i) { i.set_value(1e-5); });
  }
  // Layer norm with its affine (weight and bias f32[3]), its gradient packed [2 + 2, 3].
  const int64_t weight = b.Parameter(16, proto::F32, {3});
  b.Op(Opcode::kLayerNorm, {x, weight, row}, proto::F32, {2, 3}, [](proto::Instruction& i) { i.set_axis(1); });
  b.Op(Opcode::kLayerNormGrad, {x, c, weight}, proto::F32, {4, 3}, [](proto::Instruction& i) { i.set_axis(1); });
  b.Output(x);
  b.Output(x);  // an id may repeat
  b.Output(b.module().instructions_size() - 1);
  return b;
}

TEST(ModuleVerifier, AcceptsEveryOpcodeWellFormed) {
  absl::Status s = VerifyModule(EveryOpcode().module());
  EXPECT_TRUE(s.ok()) << s;
}

// Random single-field mutations of a module using every opcode. Whatever the verifier accepts must
// compile and run (possibly failing with a status, as for an out-of-range index) without crashing;
// the verifier is the only gate in front of the compiler.
TEST(ModuleVerifier, EveryAcceptedMutationCompilesAndRuns) {
  const proto::Module base = EveryOpcode().module();
  auto client = testing::MakeClient();
  std::mt19937_64 rng(2024);
  int accepted = 0;
  for (int it = 0; it < 4000; ++it) {
    proto::Module m = base;
    for (int edits = 1 + static_cast<int>(rng() % 2); edits > 0; --edits) {
      proto::Instruction& inst =
          *m.mutable_instructions(static_cast<int>(rng() % static_cast<uint64_t>(m.instructions_size())));
      const int64_t small = static_cast<int64_t>(rng() % 6) - 1;  // -1 .. 4
      const auto pick = [&](auto* field) {
        if (field->empty()) return;
        field->Set(static_cast<int>(rng() % static_cast<uint64_t>(field->size())), small);
      };
      switch (rng() % 12) {
        case 0: inst.set_opcode(static_cast<int32_t>(rng() % 64)); break;
        case 1: pick(inst.mutable_operands()); break;
        case 2: pick(inst.mutable_shape()->mutable_dims()); break;
        case 3:
          if (rng() % 2)
            inst.mutable_shape()->add_dims(small);
          else if (inst.shape().dims_size() > 0)
            inst.mutable_shape()->mutable_dims()->RemoveLast();
          break;
        case 4: inst.mutable_shape()->set_type(static_cast<proto::ElementType>(rng() % 7)); break;
        case 5: pick(inst.mutable_dims()); break;
        case 6:
          pick(inst.mutable_start());
          pick(inst.mutable_limit());
          break;
        case 7: pick(inst.mutable_stride()); break;
        case 8: inst.set_axis(small); break;
        case 9: inst.set_transpose_lhs(!inst.transpose_lhs()); break;
        case 10: inst.set_direction(static_cast<int32_t>(rng() % 6)); break;
        default: inst.set_value(rng() % 2 ? 1e300 : -0.5); break;
      }
    }
    if (!VerifyModule(m).ok()) continue;
    ++accepted;
    std::vector<testing::HostArray> args;
    for (const proto::Instruction& inst : m.instructions()) {
      if (inst.opcode() != static_cast<int32_t>(Opcode::kParameter)) continue;
      if (static_cast<size_t>(inst.parameter_number()) >= args.size())
        args.resize(static_cast<size_t>(inst.parameter_number()) + 1);
      testing::HostArray a(FromProto(inst.shape()));
      std::fill(a.bytes.begin(), a.bytes.end(), 0);
      args[static_cast<size_t>(inst.parameter_number())] = std::move(a);
    }
    const CompileOptions options{.fusion = it % 2 == 0, .autotune = false, .max_fusion_steps = it % 3 == 0 ? 2 : 48};
    absl::StatusOr<std::vector<testing::HostArray>> r = testing::CompileAndRun(*client, m, options, args);
    if (!r.ok()) {
      // Data-dependent failures only (an index into an empty dimension); never a rejected compile.
      EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange) << r.status() << "\n" << m.DebugString();
    }
    if (HasFailure()) return;
  }
  EXPECT_GT(accepted, 100);
}

TEST(ModuleVerifier, AcceptsEmptyAndZeroSizedModules) {
  EXPECT_TRUE(VerifyModule(proto::Module()).ok());
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {0, 3});
  b.Output(b.Reduce(Combiner::kSum, b.Unary(Opcode::kExp, x), {0}));
  EXPECT_TRUE(VerifyModule(b.module()).ok());
}

TEST(ModuleVerifier, RejectsForwardAndOutOfRangeOperands) {
  ModuleBuilder b = TwoParameters();
  b.Op(Opcode::kAdd, {0, 3}, proto::F32, {2, 3});
  b.Op(Opcode::kNegate, {0}, proto::F32, {2, 3});
  ExpectRejected(b.module(), {"%2 add", "operand %3 is not an earlier instruction"});

  ModuleBuilder self = TwoParameters();
  self.Op(Opcode::kNegate, {2}, proto::F32, {2, 3});
  ExpectRejected(self.module(), {"%2 negate", "operand %2"});

  ModuleBuilder negative = TwoParameters();
  negative.Op(Opcode::kNegate, {-1}, proto::F32, {2, 3});
  ExpectRejected(negative.module(), {"%2 negate", "operand %-1"});
}

TEST(ModuleVerifier, RejectsOutOfRangeOutputs) {
  ModuleBuilder b = TwoParameters();
  b.Output(2);
  ExpectRejected(b.module(), {"output refers to %2"});
  ModuleBuilder negative = TwoParameters();
  negative.Output(-1);
  ExpectRejected(negative.module(), {"output refers to %-1"});
}

TEST(ModuleVerifier, RejectsAddShapeMismatch) {
  ModuleBuilder dims;
  dims.Parameter(0, proto::F32, {2, 3});
  dims.Parameter(1, proto::F32, {3, 2});
  dims.Op(Opcode::kAdd, {0, 1}, proto::F32, {2, 3});
  ExpectRejected(dims.module(), {"%2 add", "f32[2,3]", "f32[3,2]"});

  ModuleBuilder types;
  types.Parameter(0, proto::F32, {2, 3});
  types.Parameter(1, proto::S32, {2, 3});
  types.Op(Opcode::kAdd, {0, 1}, proto::F32, {2, 3});
  ExpectRejected(types.module(), {"%2 add", "s32[2,3]"});

  ModuleBuilder result = TwoParameters();
  result.Op(Opcode::kAdd, {0, 1}, proto::F32, {2, 3, 1});
  ExpectRejected(result.module(), {"%2 add", "f32[2,3,1]"});

  ModuleBuilder result_type = TwoParameters();
  result_type.Op(Opcode::kAdd, {0, 1}, proto::F64, {2, 3});
  ExpectRejected(result_type.module(), {"%2 add", "wrong result type"});

  ModuleBuilder arity = TwoParameters();
  arity.Op(Opcode::kAdd, {0}, proto::F32, {2, 3});
  ExpectRejected(arity.module(), {"%2 add", "expects 2 operand(s), has 1"});
}

TEST(ModuleVerifier, RejectsBadBroadcastDims) {
  const auto broadcast = [](const testing::Dims& in, const testing::Dims& out, const testing::Dims& map) {
    ModuleBuilder b;
    b.Parameter(0, proto::F32, in);
    b.Op(Opcode::kBroadcast, {0}, proto::F32, out, [&](proto::Instruction& i) {
      for (int64_t d : map) i.add_dims(d);
    });
    return b;
  };
  ExpectRejected(broadcast({3}, {2, 3}, {}).module(), {"%1 broadcast", "dims must map every operand dimension"});
  ExpectRejected(broadcast({3}, {2, 3}, {0, 1}).module(), {"%1 broadcast"});
  ExpectRejected(broadcast({3}, {2, 3}, {2}).module(), {"%1 broadcast", "within the result rank"});
  ExpectRejected(broadcast({3}, {2, 3}, {-1}).module(), {"%1 broadcast"});
  ExpectRejected(broadcast({3, 2}, {2, 3, 4}, {1, 0}).module(), {"%1 broadcast", "must increase"});
  ExpectRejected(broadcast({3}, {2, 3}, {0}).module(), {"%1 broadcast", "cannot broadcast f32[3] to f32[2,3]"});
  ExpectRejected(broadcast({2}, {2, 0}, {1}).module(), {"%1 broadcast", "cannot broadcast"});
  ModuleBuilder type;
  type.Parameter(0, proto::F32, {3});
  type.Op(Opcode::kBroadcast, {0}, proto::S32, {2, 3}, [](proto::Instruction& i) { i.add_dims(1); });
  ExpectRejected(type.module(), {"%1 broadcast"});
  // Size-1 dims broadcast to anything, including 0.
  EXPECT_TRUE(VerifyModule(broadcast({1, 3}, {0, 3}, {0, 1}).module()).ok());
}

TEST(ModuleVerifier, RejectsBadTransposePermutation) {
  const auto transpose = [](const testing::Dims& out, const testing::Dims& perm) {
    ModuleBuilder b;
    b.Parameter(0, proto::F32, {2, 3, 4});
    b.Op(Opcode::kTranspose, {0}, proto::F32, out, [&](proto::Instruction& i) {
      for (int64_t p : perm) i.add_dims(p);
    });
    return b;
  };
  EXPECT_TRUE(VerifyModule(transpose({4, 2, 3}, {2, 0, 1}).module()).ok());
  ExpectRejected(transpose({2, 2, 3}, {0, 0, 1}).module(), {"%1 transpose", "bad permutation"});
  ExpectRejected(transpose({2, 3, 4}, {0, 1, 3}).module(), {"%1 transpose", "bad permutation"});
  ExpectRejected(transpose({2, 3, 4}, {0, 1}).module(), {"%1 transpose", "bad permutation"});
  ExpectRejected(transpose({2, 3, 4}, {0, 2, 1}).module(), {"%1 transpose", "bad permutation"});
  ExpectRejected(transpose({2, 3, 4}, {0, -1, 2}).module(), {"%1 transpose", "bad permutation"});
}

TEST(ModuleVerifier, RejectsSliceOutOfRange) {
  const auto slice = [](const testing::Dims& start, const testing::Dims& limit, const testing::Dims& stride,
                        const testing::Dims& out) {
    ModuleBuilder b;
    b.Parameter(0, proto::F32, {5, 6});
    b.Op(Opcode::kSlice, {0}, proto::F32, out, [&](proto::Instruction& i) {
      for (int64_t v : start) i.add_start(v);
      for (int64_t v : limit) i.add_limit(v);
      for (int64_t v : stride) i.add_stride(v);
    });
    return b;
  };
  EXPECT_TRUE(VerifyModule(slice({1, 0}, {5, 6}, {2, 4}, {2, 2}).module()).ok());
  EXPECT_TRUE(VerifyModule(slice({5, 6}, {5, 6}, {1, 1}, {0, 0}).module()).ok());
  ExpectRejected(slice({0, 0}, {6, 6}, {1, 1}, {6, 6}).module(), {"%1 slice", "slice of dimension 0 is out of range"});
  ExpectRejected(slice({0, 4}, {5, 3}, {1, 1}, {5, 0}).module(), {"%1 slice", "dimension 1"});
  ExpectRejected(slice({-1, 0}, {5, 6}, {1, 1}, {6, 6}).module(), {"%1 slice", "dimension 0"});
  ExpectRejected(slice({0, 0}, {5, 6}, {1, 0}, {5, 6}).module(), {"%1 slice", "dimension 1"});
  ExpectRejected(slice({0, 0}, {5, 6}, {2, 1}, {3, 5}).module(), {"%1 slice", "dimension 1"});
  ExpectRejected(slice({0}, {5}, {1}, {5, 6}).module(), {"%1 slice", "a start, limit and stride per dimension"});
  // A stride past the end is legal (x[1::huge] is one element), and must not overflow the check.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(VerifyModule(slice({1, 0}, {5, 6}, {kMax, kMax}, {1, 1}).module()).ok());
  ExpectRejected(slice({1, 0}, {5, 6}, {kMax, kMax}, {2, 1}).module(), {"%1 slice", "dimension 0"});
}

TEST(ModuleVerifier, RejectsDotContractionMismatch) {
  const auto dot = [](const testing::Dims& a, const testing::Dims& b, const testing::Dims& out, bool tl, bool tr,
                      proto::ElementType type = proto::F32) {
    ModuleBuilder m;
    m.Parameter(0, type, a);
    m.Parameter(1, type, b);
    m.Op(Opcode::kDot, {0, 1}, type, out, [&](proto::Instruction& i) {
      i.set_transpose_lhs(tl);
      i.set_transpose_rhs(tr);
    });
    return m;
  };
  EXPECT_TRUE(VerifyModule(dot({2, 3}, {3, 4}, {2, 4}, false, false).module()).ok());
  EXPECT_TRUE(VerifyModule(dot({3, 2}, {4, 3}, {2, 4}, true, true).module()).ok());
  EXPECT_TRUE(VerifyModule(dot({7, 2, 3}, {3, 4}, {7, 2, 4}, false, false).module()).ok());
  ExpectRejected(dot({2, 3}, {4, 5}, {2, 5}, false, false).module(),
                 {"%2 dot", "contraction of f32[2,3] and f32[4,5] does not give f32[2,5]"});
  ExpectRejected(dot({2, 3}, {3, 4}, {2, 4}, true, false).module(), {"%2 dot", "contraction"});
  ExpectRejected(dot({2, 3}, {3, 4}, {4, 2}, false, false).module(), {"%2 dot", "contraction"});
  ExpectRejected(dot({7, 2, 3}, {6, 3, 4}, {7, 2, 4}, false, false).module(), {"%2 dot", "batch dims"});
  ExpectRejected(dot({7, 2, 3}, {3, 4}, {2, 4}, false, false).module(), {"%2 dot", "batch dims"});
  ExpectRejected(dot({3}, {3, 4}, {4}, false, false).module(), {"%2 dot", "rank >= 2"});
  ExpectRejected(dot({2, 3}, {3, 4}, {2, 4}, false, false, proto::S32).module(), {"%2 dot", "floating"});
}

TEST(ModuleVerifier, RejectsMissingAndDuplicateParameterNumbers) {
  ModuleBuilder missing;
  missing.Parameter(0, proto::F32, {2});
  missing.Parameter(2, proto::F32, {2});
  missing.Unary(Opcode::kNegate, 0);
  ExpectRejected(missing.module(), {"parameter 1 is missing"});

  ModuleBuilder duplicate;
  duplicate.Parameter(0, proto::F32, {2});
  duplicate.Parameter(1, proto::F32, {2});
  duplicate.Parameter(0, proto::F32, {2});
  ExpectRejected(duplicate.module(), {"%2 parameter", "parameter 0 defined twice"});

  ModuleBuilder negative;
  negative.Parameter(-1, proto::F32, {2});
  ExpectRejected(negative.module(), {"%0 parameter", "bad parameter number -1"});

  ModuleBuilder huge;
  huge.Parameter(int64_t{1} << 40, proto::F32, {2});
  ExpectRejected(huge.module(), {"%0 parameter", "bad parameter number"});

  ModuleBuilder with_operand = TwoParameters();
  with_operand.Op(Opcode::kParameter, {0}, proto::F32, {2, 3},
                  [](proto::Instruction& i) { i.set_parameter_number(2); });
  ExpectRejected(with_operand.module(), {"%2 parameter", "expects 0 operand(s)"});
}

TEST(ModuleVerifier, RejectsInvalidEnumValues) {
  ModuleBuilder opcode = TwoParameters();
  opcode.Op(static_cast<Opcode>(999), {0}, proto::F32, {2, 3});
  ExpectRejected(opcode.module(), {"%2", "invalid opcode 999"});

  ModuleBuilder zero = TwoParameters();
  zero.Op(static_cast<Opcode>(0), {}, proto::F32, {2, 3});
  ExpectRejected(zero.module(), {"%2", "invalid opcode 0"});

  ModuleBuilder type = TwoParameters();
  type.Op(Opcode::kNegate, {0}, static_cast<proto::ElementType>(42), {2, 3});
  ExpectRejected(type.module(), {"%2 negate", "invalid element type"});

  ModuleBuilder param_type;
  param_type.Parameter(0, static_cast<proto::ElementType>(-3), {2});
  ExpectRejected(param_type.module(), {"%0 parameter", "invalid element type"});

  ModuleBuilder direction = TwoParameters();
  direction.Op(Opcode::kCompare, {0, 1}, proto::PRED, {2, 3},
               [](proto::Instruction& i) { i.set_direction(static_cast<int32_t>(17)); });
  ExpectRejected(direction.module(), {"%2 compare", "invalid comparison direction"});
}

TEST(ModuleVerifier, RejectsBadShapes) {
  ModuleBuilder negative;
  negative.Parameter(0, proto::F32, {2, -1});
  ExpectRejected(negative.module(), {"%0 parameter", "bad dimension -1"});

  ModuleBuilder rank;
  rank.Parameter(0, proto::F32, testing::Dims(17, 1));
  ExpectRejected(rank.module(), {"%0 parameter", "rank 17 exceeds 16"});

  ModuleBuilder too_many;
  too_many.Parameter(0, proto::F32, {int64_t{1} << 30, int64_t{1} << 30});
  ExpectRejected(too_many.module(), {"%0 parameter", "too many elements"});

  // A zero dim does not excuse the others: strides and partial products are computed from them (2^78
  // would overflow), so their product is bounded as if it were 1.
  ModuleBuilder zero;
  zero.Parameter(0, proto::F32, {0, int64_t{1} << 39, int64_t{1} << 39});
  ExpectRejected(zero.module(), {"%0 parameter", "too many elements"});
  ModuleBuilder empty;
  empty.Parameter(0, proto::F32, {0, int64_t{1} << 20, int64_t{1} << 20});
  EXPECT_TRUE(VerifyModule(empty.module()).ok());
}

TEST(ModuleVerifier, RejectsBadElementwiseTypes) {
  ModuleBuilder not_f32 = TwoParameters();
  not_f32.Unary(Opcode::kNot, 0);
  ExpectRejected(not_f32.module(), {"%2 not", "takes pred, not f32"});

  ModuleBuilder exp_int;
  exp_int.Parameter(0, proto::S32, {2});
  exp_int.Unary(Opcode::kExp, 0);
  ExpectRejected(exp_int.module(), {"%1 exp", "takes floating types, not s32"});

  ModuleBuilder unary_type = TwoParameters();
  unary_type.Op(Opcode::kNegate, {0}, proto::F64, {2, 3});
  ExpectRejected(unary_type.module(), {"%2 negate", "types differ"});

  ModuleBuilder unary_dims = TwoParameters();
  unary_dims.Op(Opcode::kConvert, {0}, proto::S32, {3, 2});
  ExpectRejected(unary_dims.module(), {"%2 convert", "f32[2,3]", "s32[3,2]"});

  ModuleBuilder and_f32 = TwoParameters();
  and_f32.Binary(Opcode::kAnd, 0, 1);
  ExpectRejected(and_f32.module(), {"%2 and", "takes pred, not f32"});

  ModuleBuilder compare_type = TwoParameters();
  compare_type.Op(Opcode::kCompare, {0, 1}, proto::F32, {2, 3});
  ExpectRejected(compare_type.module(), {"%2 compare", "wrong result type"});

  ModuleBuilder select_cond = TwoParameters();
  select_cond.Op(Opcode::kSelect, {0, 0, 1}, proto::F32, {2, 3});
  ExpectRejected(select_cond.module(), {"%2 select", "the condition must be pred"});

  ModuleBuilder select_dims = TwoParameters();
  const int64_t p = select_dims.Compare(CompareDirection::kEq, 0, 1);
  const int64_t other = select_dims.Parameter(2, proto::F32, {3, 2});
  select_dims.Op(Opcode::kSelect, {p, 0, other}, proto::F32, {2, 3});
  ExpectRejected(select_dims.module(), {"%4 select", "operand dims differ"});

  ModuleBuilder select_types = TwoParameters();
  const int64_t q = select_types.Compare(CompareDirection::kEq, 0, 1);
  const int64_t ints = select_types.Parameter(2, proto::S32, {2, 3});
  select_types.Op(Opcode::kSelect, {q, 0, ints}, proto::F32, {2, 3});
  ExpectRejected(select_types.module(), {"%4 select", "value types differ"});
}

TEST(ModuleVerifier, RejectsBadLeaves) {
  ModuleBuilder iota_axis;
  iota_axis.Iota(proto::S32, {2, 3}, 2);
  ExpectRejected(iota_axis.module(), {"%0 iota", "axis out of range"});
  ModuleBuilder iota_start;
  iota_start.Op(Opcode::kIota, {}, proto::S32, {4}, [](proto::Instruction& i) { i.add_start(0); });
  ExpectRejected(iota_start.module(), {"%0 iota", "one start and one step"});
  ModuleBuilder constant_operand = TwoParameters();
  constant_operand.Op(Opcode::kConstant, {0}, proto::F32, {2, 3});
  ExpectRejected(constant_operand.module(), {"%2 constant", "expects 0 operand(s)"});

  ModuleBuilder rng_seed;
  rng_seed.Parameter(0, proto::S32, {});
  rng_seed.Rng(Opcode::kRngUniform, 0, proto::F32, {4}, 0);
  ExpectRejected(rng_seed.module(), {"%1 rng_uniform", "the seed must be s64[]"});
  ModuleBuilder rng_seed_rank;
  rng_seed_rank.Parameter(0, proto::S64, {1});
  rng_seed_rank.Rng(Opcode::kRngNormal, 0, proto::F32, {4}, 0);
  ExpectRejected(rng_seed_rank.module(), {"%1 rng_normal", "the seed must be s64[]"});
  ModuleBuilder rng_type;
  rng_type.Parameter(0, proto::S64, {});
  rng_type.Rng(Opcode::kRngUniform, 0, proto::S32, {4}, 0);
  ExpectRejected(rng_type.module(), {"%1 rng_uniform", "needs a floating result"});
}

TEST(ModuleVerifier, RejectsBadDataMovement) {
  ModuleBuilder reshape = TwoParameters();
  reshape.Reshape(0, {7});
  ExpectRejected(reshape.module(), {"%2 reshape", "cannot reshape f32[2,3] to f32[7]"});

  ModuleBuilder concat_sum = TwoParameters();
  concat_sum.Op(Opcode::kConcatenate, {0, 1}, proto::F32, {2, 7}, [](proto::Instruction& i) { i.set_axis(1); });
  ExpectRejected(concat_sum.module(), {"%2 concatenate", "sizes along the axis do not add up"});
  ModuleBuilder concat_dims;
  concat_dims.Parameter(0, proto::F32, {2, 3});
  concat_dims.Parameter(1, proto::F32, {3, 3});
  concat_dims.Op(Opcode::kConcatenate, {0, 1}, proto::F32, {2, 6}, [](proto::Instruction& i) { i.set_axis(1); });
  ExpectRejected(concat_dims.module(), {"%2 concatenate", "operand dims differ"});
  ModuleBuilder concat_axis = TwoParameters();
  concat_axis.Op(Opcode::kConcatenate, {0, 1}, proto::F32, {4, 3}, [](proto::Instruction& i) { i.set_axis(2); });
  ExpectRejected(concat_axis.module(), {"%2 concatenate", "axis out of range"});
  ModuleBuilder concat_none;
  concat_none.Op(Opcode::kConcatenate, {}, proto::F32, {0});
  ExpectRejected(concat_none.module(), {"%0 concatenate", "needs operands"});

  ModuleBuilder index_float = TwoParameters();
  index_float.Parameter(2, proto::F32, {4});
  index_float.Op(Opcode::kIndexSelect, {0, 2}, proto::F32, {2, 4}, [](proto::Instruction& i) { i.set_axis(1); });
  ExpectRejected(index_float.module(), {"%3 index_select", "bad operands"});
  ModuleBuilder index_rank = TwoParameters();
  index_rank.Parameter(2, proto::S32, {4, 1});
  index_rank.Op(Opcode::kIndexSelect, {0, 2}, proto::F32, {2, 4}, [](proto::Instruction& i) { i.set_axis(1); });
  ExpectRejected(index_rank.module(), {"%3 index_select", "the index must be 1-D"});
  ModuleBuilder index_result = TwoParameters();
  index_result.Parameter(2, proto::S64, {4});
  index_result.Op(Opcode::kIndexSelect, {0, 2}, proto::F32, {2, 3}, [](proto::Instruction& i) { i.set_axis(1); });
  ExpectRejected(index_result.module(), {"%3 index_select", "result dims are wrong"});

  ModuleBuilder gather_big = TwoParameters();
  gather_big.Parameter(2, proto::S64, {3, 5});
  gather_big.Op(Opcode::kGather, {0, 2}, proto::F32, {3, 5}, [](proto::Instruction& i) { i.set_axis(1); });
  ExpectRejected(gather_big.module(), {"%3 gather", "index larger than the operand"});
  ModuleBuilder gather_dims = TwoParameters();
  gather_dims.Parameter(2, proto::S64, {2, 5});
  gather_dims.Op(Opcode::kGather, {0, 2}, proto::F32, {2, 4}, [](proto::Instruction& i) { i.set_axis(1); });
  ExpectRejected(gather_dims.module(), {"%3 gather", "the index must have the result's dims"});
}

TEST(ModuleVerifier, RejectsBadReductions) {
  const auto reduce = [](Combiner combiner, const testing::Dims& dims, const testing::Dims& out,
                         proto::ElementType type = proto::F32) {
    ModuleBuilder b;
    b.Parameter(0, proto::F32, {2, 3, 4});
    b.Op(Opcode::kReduce, {0}, type, out, [&](proto::Instruction& i) {
      i.set_combiner(static_cast<int32_t>(combiner));
      for (int64_t d : dims) i.add_dims(d);
    });
    return b;
  };
  EXPECT_TRUE(VerifyModule(reduce(Combiner::kSum, {0, 2}, {3}).module()).ok());
  ExpectRejected(reduce(Combiner::kSum, {2, 0}, {3}).module(), {"%1 reduce", "sorted and in range"});
  ExpectRejected(reduce(Combiner::kSum, {1, 1}, {2, 4}).module(), {"%1 reduce", "sorted and in range"});
  ExpectRejected(reduce(Combiner::kMax, {3}, {2, 3, 4}).module(), {"%1 reduce", "sorted and in range"});
  ExpectRejected(reduce(Combiner::kMax, {1}, {2, 3}).module(),
                 {"%1 reduce", "result f32[2,3] does not match reducing f32[2,3,4]"});
  ExpectRejected(reduce(Combiner::kSum, {1}, {2, 4}, proto::F64).module(), {"%1 reduce", "types differ"});

  const auto argmax = [](int64_t axis, const testing::Dims& in, const testing::Dims& out, proto::ElementType type) {
    ModuleBuilder b;
    b.Parameter(0, proto::F32, in);
    b.Op(Opcode::kArgmax, {0}, type, out, [&](proto::Instruction& i) { i.set_axis(axis); });
    return b;
  };
  EXPECT_TRUE(VerifyModule(argmax(1, {2, 3}, {2}, proto::S64).module()).ok());
  ExpectRejected(argmax(1, {2, 3}, {2}, proto::S32).module(), {"%1 argmax", "result must be s64"});
  ExpectRejected(argmax(2, {2, 3}, {2}, proto::S64).module(), {"%1 argmax", "axis out of range"});
  ExpectRejected(argmax(1, {2, 0}, {2}, proto::S64).module(), {"%1 argmax", "argmax over an empty dimension"});
  ExpectRejected(argmax(0, {2, 3}, {2}, proto::S64).module(), {"%1 argmax", "does not match"});
}

TEST(ModuleVerifier, CompileReportsTheVerifierError) {
  auto client = testing::MakeClient();
  ModuleBuilder b = TwoParameters();
  b.Op(Opcode::kAdd, {0, 5}, proto::F32, {2, 3});
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(b.module(), {});
  ASSERT_FALSE(exe.ok());
  EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(exe.status().message()), HasSubstr("%2 add"));
}

TEST(ModuleVerifier, RejectsArithmeticOnPred) {
  ModuleBuilder add;
  const int64_t p = add.Parameter(0, proto::PRED, {4});
  add.Output(add.Binary(Opcode::kAdd, p, p));
  ExpectRejected(add.module(), {"add", "pred"});
  ModuleBuilder total;
  const int64_t q = total.Parameter(0, proto::PRED, {4});
  total.Output(total.Reduce(Combiner::kSum, q, {0}));
  ExpectRejected(total.module(), {"reduce", "a sum takes numeric types (arithmetic is not defined on pred), not pred"});
}

}  // namespace module_verifier_test
}  // namespace lazyrt::pjrt
