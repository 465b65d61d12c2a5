// Every device op against a naive reference loop written here, over random shapes that include
// broadcasting, size-0 and size-1 dims. Each test runs with fusion on and off.
#include "pjrt_sim/kernels/kernels.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <set>

#include "pjrt_sim/cpu_isa.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/kernels/fused_program.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace kernels_test {

// bf16 rounding (branch-free, so that its loops vectorize) against its definition: round to nearest, ties to
// even, on the bits; every NaN the quiet NaN 0x7fc0. Over a stride through all 2^32 bit patterns, every
// tie and its neighbours, and the special values.
TEST(ElementOps, FloatToBf16RoundsToNearestEvenAndQuietsEveryNaN) {
  const auto reference = [](uint32_t bits) -> uint16_t {
    if (std::isnan(std::bit_cast<float>(bits))) return 0x7fc0;
    const uint32_t kept = bits >> 16, rest = bits & 0xffff;
    const bool up = rest > 0x8000 || (rest == 0x8000 && (kept & 1) != 0);
    return static_cast<uint16_t>(kept + (up ? 1 : 0));
  };
  std::vector<uint32_t> patterns = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7f800001, 0xff800001,
                                    0x7fc00000, 0xffffffff, 0x7fbfffff, 0x7f7fffff, 0xff7fffff, 0x00000001,
                                    0x007fffff, 0x80008000, 0x3f808000, 0x3f818000};
  for (uint64_t b = 0; b <= 0xffffffffu; b += 65521) patterns.push_back(static_cast<uint32_t>(b));
  for (uint32_t kept = 0; kept < 0x10000; kept += 7) {
    for (uint32_t rest : {0x7fffu, 0x8000u, 0x8001u}) patterns.push_back(kept << 16 | rest);
  }
  for (uint32_t bits : patterns) {
    ASSERT_EQ(FloatToBf16(std::bit_cast<float>(bits)), reference(bits)) << std::hex << "bits 0x" << bits;
  }
}

using testing::Dims;
using testing::HostArray;
using testing::MakeArray;
using testing::ModuleBuilder;

// Arrays rounded to bf16 as a kernel stores them (StoreBlock) and as a fused program rounds a value it goes
// on computing with (convert to bf16 and back): FloatToBf16's bits for every element, on CPUs that round in
// hardware too (whose instruction keeps NaN payloads and flushes subnormals: a vector holding one is
// rounded by FloatToBf16). NaNs and subnormals alone, among normal values, at every position of a vector
// and in tails.
TEST(ElementOps, ArraysOfFloatsRoundToFloatToBf16sBits) {
  RecordProperty("rounded_by_the_cpu", HostHas("avx512_bf16") ? "yes" : "no");
  // NaNs (signaling ones whose payload the CPU would keep: 0x7f810000, 0xff800001), subnormals, and values
  // the CPU rounds as FloatToBf16 does (infinities, zeros, the largest finite, ties).
  const std::vector<uint32_t> specials = {0x7f800001, 0x7f810000, 0xff800001, 0xffc12345, 0x7fc00000, 0x00000001,
                                          0x807fffff, 0x00400000, 0x7f800000, 0xff800000, 0x00000000, 0x80000000,
                                          0x7f7fffff, 0x3f808000, 0x3f818000, 0x00800000};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> normal(-3, 3);
  for (int64_t n : {1, 15, 16, 17, 31, 32, 33, 64, 100}) {
    for (size_t which = 0; which < specials.size(); ++which) {
      for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
        std::vector<float> x(static_cast<size_t>(n));
        for (float& v : x) v = normal(rng);
        x[static_cast<size_t>(at)] = std::bit_cast<float>(specials[which]);
        std::vector<uint16_t> stored(x.size());
        StoreBlock(x.data(), ComputeType::kF32, PrimitiveType::kBF16, stored.data(), n);
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_EQ(stored[i], FloatToBf16(x[i]))
              << std::hex << "bits 0x" << std::bit_cast<uint32_t>(x[i]) << " at " << std::dec << i << " of " << n;
        }
      }
    }
  }
  // A stride through all 2^32 bit patterns, 32 and more at a time.
  std::vector<float> patterns;
  for (uint64_t b = 0; b <= 0xffffffffu; b += 65521) patterns.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  std::vector<uint16_t> stored(patterns.size());
  StoreBlock(patterns.data(), ComputeType::kF32, PrimitiveType::kBF16, stored.data(),
             static_cast<int64_t>(patterns.size()));
  for (size_t i = 0; i < patterns.size(); ++i) {
    ASSERT_EQ(stored[i], FloatToBf16(patterns[i])) << std::hex << "bits 0x" << std::bit_cast<uint32_t>(patterns[i]);
  }
  // Through a kernel: x rounded to bf16, widened and halved, one fused loop.
  std::vector<float> values;
  for (int i = 0; i < 300; ++i) values.push_back(normal(rng));
  for (size_t i = 0; i < specials.size(); ++i) values[i * 19] = std::bit_cast<float>(specials[i]);
  const Dims d = {static_cast<int64_t>(values.size())};
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, d);
  const int64_t rounded = b.Convert(b.Convert(x, proto::BF16), proto::F32);
  b.Output(b.Mul(rounded, b.Constant(0.5, proto::F32, d)));
  std::unique_ptr<Client> client = testing::MakeClient();
  absl::StatusOr<std::vector<HostArray>> r =
      testing::CompileAndRun(*client, b.module(), {}, {MakeArray<float>(PrimitiveType::kF32, d, values)});
  ASSERT_TRUE(r.ok()) << r.status();
  for (size_t i = 0; i < values.size(); ++i) {
    const float want = Bf16ToFloat(FloatToBf16(values[i])) * 0.5f;
    ASSERT_EQ(std::bit_cast<uint32_t>((*r)[0].at<float>(static_cast<int64_t>(i))), std::bit_cast<uint32_t>(want))
        << std::hex << "bits 0x" << std::bit_cast<uint32_t>(values[i]);
  }
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// --- element types --------------------------------------------------------------------------------
template <typename T>
struct Type;
template <>
struct Type<float> {
  static constexpr PrimitiveType kType = PrimitiveType::kF32;
  static constexpr proto::ElementType kProto = proto::F32;
};
template <>
struct Type<double> {
  static constexpr PrimitiveType kType = PrimitiveType::kF64;
  static constexpr proto::ElementType kProto = proto::F64;
};
template <>
struct Type<int32_t> {
  static constexpr PrimitiveType kType = PrimitiveType::kS32;
  static constexpr proto::ElementType kProto = proto::S32;
};
template <>
struct Type<int64_t> {
  static constexpr PrimitiveType kType = PrimitiveType::kS64;
  static constexpr proto::ElementType kProto = proto::S64;
};
template <>
struct Type<uint8_t> {
  static constexpr PrimitiveType kType = PrimitiveType::kPred;
  static constexpr proto::ElementType kProto = proto::PRED;
};

// Random values typical of each type, with the awkward ones mixed in.
template <typename T>
std::vector<T> RandomValues(std::mt19937_64& rng, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  std::uniform_int_distribution<int> pick(0, 9);
  for (T& x : v) {
    if constexpr (std::is_floating_point_v<T>) {
      static constexpr T kSpecial[] = {0,
                                       -0.0,
                                       1,
                                       -1,
                                       std::numeric_limits<T>::quiet_NaN(),
                                       std::numeric_limits<T>::infinity(),
                                       -std::numeric_limits<T>::infinity(),
                                       0.5};
      x = pick(rng) == 0 ? kSpecial[rng() % 8] : std::uniform_real_distribution<T>(-3, 3)(rng);
    } else if constexpr (std::is_same_v<T, uint8_t>) {
      x = static_cast<uint8_t>(rng() & 1);
    } else {
      static constexpr T kSpecial[] = {0, -1, 1, std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), 2};
      x = pick(rng) == 0 ? kSpecial[rng() % 6] : static_cast<T>(std::uniform_int_distribution<int>(-20, 20)(rng));
    }
  }
  return v;
}

template <typename T>
HostArray RandomArray(std::mt19937_64& rng, const Dims& dims) {
  return MakeArray<T>(Type<T>::kType, dims, RandomValues<T>(rng, testing::NumElements(dims)));
}

// Exact (NaN == NaN, -0 == +0) when rel == 0, else within `rel` relative (or `rel` absolute near 0).
template <typename T>
bool Close(T got, T want, double rel) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
    if (std::isinf(want) || std::isinf(got)) return got == want;
    return std::fabs(static_cast<double>(got) - static_cast<double>(want)) <=
           rel * std::max(1.0, std::fabs(static_cast<double>(want)));
  } else {
    return got == want;
  }
}

template <typename T>
std::string Show(T v) {
  if constexpr (std::is_same_v<T, uint8_t>)
    return std::to_string(static_cast<int>(v));
  else
    return absl::StrCat(v);
}

// Checks every element of `got` against ref(i); reports the first few differences.
template <typename T, typename Ref>
void ExpectArray(const HostArray& got, const Dims& dims, Ref ref, double rel, const std::string& what) {
  ASSERT_EQ(got.shape.dims, dims) << what;
  ASSERT_EQ(got.shape.type, Type<T>::kType) << what;
  int reported = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const T want = static_cast<T>(ref(i));
    const T have = got.at<T>(i);
    if (!Close<T>(have, want, rel) && reported++ < 5) {
      ADD_FAILURE() << what << " at " << testing::DimsText(testing::Unravel(i, dims)) << ": got " << Show(have)
                    << ", want " << Show(want);
    }
  }
}

// --- shapes ---------------------------------------------------------------------------------------
Dims RandomDims(std::mt19937_64& rng, int min_rank, int max_rank, bool allow_zero = true) {
  static constexpr int64_t kSizes[] = {1, 2, 3, 5, 7, 0};
  const int rank = std::uniform_int_distribution<int>(min_rank, max_rank)(rng);
  Dims d;
  for (int i = 0; i < rank; ++i) {
    int64_t s = kSizes[rng() % (allow_zero ? 6 : 5)];
    if (s == 0 && rng() % 3 != 0) s = 4;  // keep size-0 dims present but not dominant
    d.push_back(s);
  }
  return d;
}

// An operand broadcast into `out`: which result dims it maps to, and its own dims (1 where it is
// stretched).
struct BroadcastSpec {
  Dims in_dims, map;
};

BroadcastSpec RandomBroadcast(std::mt19937_64& rng, const Dims& out) {
  BroadcastSpec s;
  for (size_t d = 0; d < out.size(); ++d) {
    if (rng() % 4 == 0) continue;  // a dimension the operand lacks
    s.map.push_back(static_cast<int64_t>(d));
    s.in_dims.push_back(rng() % 4 == 0 ? 1 : out[d]);
  }
  return s;
}

// The operand element that result element `i` reads.
int64_t SourceIndex(int64_t i, const Dims& out, const BroadcastSpec& s) {
  const Dims c = testing::Unravel(i, out);
  Dims in(s.in_dims.size());
  for (size_t k = 0; k < in.size(); ++k) in[k] = s.in_dims[k] == 1 ? 0 : c[static_cast<size_t>(s.map[k])];
  return testing::Ravel(in, s.in_dims);
}

// --- reference arithmetic (independent of element_ops.h) ------------------------------------------
template <typename T>
T RefUnary(Opcode op, T x) {
  if constexpr (std::is_floating_point_v<T>) {
    const double d = x;
    switch (op) {
      case Opcode::kNegate: return -x;
      case Opcode::kAbs: return x < 0 ? -x : (x == 0 ? T{0} : x);
      case Opcode::kExp: return static_cast<T>(std::exp(d));
      case Opcode::kLog: return static_cast<T>(std::log(d));
      case Opcode::kSqrt: return static_cast<T>(std::sqrt(d));
      case Opcode::kRsqrt: return static_cast<T>(1.0 / std::sqrt(d));
      case Opcode::kTanh: return static_cast<T>(std::tanh(d));
      case Opcode::kLogistic: return static_cast<T>(1.0 / (1.0 + std::exp(-d)));
      case Opcode::kSign: return std::isnan(x) ? T{0} : (x > 0 ? T{1} : (x < 0 ? T{-1} : x));  // as PyTorch
      default: ADD_FAILURE() << "no reference for " << op; return x;
    }
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    EXPECT_EQ(op, Opcode::kNot);
    return x ? 0 : 1;
  } else {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case Opcode::kNegate: return static_cast<T>(U{0} - static_cast<U>(x));
      case Opcode::kAbs: return x >= 0 ? x : static_cast<T>(U{0} - static_cast<U>(x));
      case Opcode::kSign: return x > 0 ? 1 : (x < 0 ? -1 : 0);
      default: ADD_FAILURE() << "no reference for " << op; return x;
    }
  }
}

template <typename T>
T RefBinary(Opcode op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case Opcode::kAdd: return a + b;
      case Opcode::kSubtract: return a - b;
      case Opcode::kMultiply: return a * b;
      case Opcode::kDivide: return a / b;
      case Opcode::kPower: return static_cast<T>(std::pow(static_cast<double>(a), static_cast<double>(b)));
      case Opcode::kMaximum:
        return std::isnan(a) || std::isnan(b) ? std::numeric_limits<T>::quiet_NaN() : std::max(a, b);
      case Opcode::kMinimum:
        return std::isnan(a) || std::isnan(b) ? std::numeric_limits<T>::quiet_NaN() : std::min(a, b);
      default: ADD_FAILURE() << "no reference for " << op; return a;
    }
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    if (op == Opcode::kAnd) return a & b;
    EXPECT_EQ(op, Opcode::kOr);
    return a | b;
  } else {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case Opcode::kAdd: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case Opcode::kSubtract: return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
      case Opcode::kMultiply: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case Opcode::kDivide:
        if (b == 0) return -1;
        if (b == -1) return static_cast<T>(U{0} - static_cast<U>(a));  // MIN / -1 wraps to MIN
        return a / b;
      case Opcode::kPower: {
        if (b < 0) {
          if (a == 1) return 1;
          if (a == -1) return (b % 2 != 0) ? -1 : 1;
          return 0;
        }
        U r = 1;
        for (T e = 0; e < b && e < 200; ++e) r = static_cast<U>(r * static_cast<U>(a));
        if (b >= 200) {  // large exponents: exact by squaring instead
          r = 1;
          U base = static_cast<U>(a);
          for (T e = b; e > 0; e /= 2) {
            if (e % 2) r = static_cast<U>(r * base);
            base = static_cast<U>(base * base);
          }
        }
        return static_cast<T>(r);
      }
      case Opcode::kMaximum: return std::max(a, b);
      case Opcode::kMinimum: return std::min(a, b);
      default: ADD_FAILURE() << "no reference for " << op; return a;
    }
  }
}

template <typename T>
uint8_t RefCompare(CompareDirection dir, T a, T b) {
  switch (dir) {
    case CompareDirection::kEq: return a == b;
    case CompareDirection::kNe: return a != b;
    case CompareDirection::kLt: return a < b;
    case CompareDirection::kLe: return a <= b;
    case CompareDirection::kGt: return a > b;
    case CompareDirection::kGe: return a >= b;
    default: return 2;
  }
}

bool IsTranscendental(Opcode op) {
  return op == Opcode::kExp || op == Opcode::kLog || op == Opcode::kSqrt || op == Opcode::kRsqrt ||
         op == Opcode::kTanh || op == Opcode::kLogistic || op == Opcode::kPower;
}

// --- the fixture ----------------------------------------------------------------------------------
class KernelTest : public ::testing::TestWithParam<bool> {
 protected:
  CompileOptions Options() const { return {.fusion = GetParam(), .autotune = false}; }

  std::vector<HostArray> Run(const proto::Module& module, const std::vector<HostArray>& args) {
    absl::StatusOr<std::vector<HostArray>> r = testing::CompileAndRun(*client_, module, Options(), args);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_EQ(r->size(), static_cast<size_t>(module.outputs_size()));
    return *std::move(r);
  }

  template <typename T>
  void CheckUnaryOps(const std::vector<Opcode>& ops, int iterations) {
    for (int it = 0; it < iterations; ++it) {
      const Dims dims = RandomDims(rng_, 0, 4);
      ModuleBuilder b;
      const int64_t x = b.Parameter(0, Type<T>::kProto, dims);
      for (Opcode op : ops) b.Output(b.Unary(op, x));
      const HostArray in = RandomArray<T>(rng_, dims);
      const std::vector<HostArray> out = Run(b.module(), {in});
      if (out.size() != ops.size()) return;
      for (size_t k = 0; k < ops.size(); ++k) {
        ExpectArray<T>(
            out[k], dims, [&](int64_t i) { return RefUnary<T>(ops[k], in.at<T>(i)); },
            IsTranscendental(ops[k]) ? 1e-5 : 0, absl::StrCat(OpcodeName(ops[k]), " ", testing::DimsText(dims)));
      }
    }
  }

  // Each op applied to two operands broadcast (differently) into a random result shape.
  template <typename T>
  void CheckBinaryOps(const std::vector<Opcode>& ops, int iterations) {
    for (int it = 0; it < iterations; ++it) {
      const Dims dims = RandomDims(rng_, 0, 4);
      const BroadcastSpec sa = RandomBroadcast(rng_, dims), sb = RandomBroadcast(rng_, dims);
      ModuleBuilder b;
      const int64_t pa = b.Parameter(0, Type<T>::kProto, sa.in_dims);
      const int64_t pb = b.Parameter(1, Type<T>::kProto, sb.in_dims);
      const int64_t xa = b.Broadcast(pa, dims, sa.map), xb = b.Broadcast(pb, dims, sb.map);
      for (Opcode op : ops) b.Output(b.Binary(op, xa, xb));
      const HostArray a = RandomArray<T>(rng_, sa.in_dims), c = RandomArray<T>(rng_, sb.in_dims);
      const std::vector<HostArray> out = Run(b.module(), {a, c});
      if (out.size() != ops.size()) return;
      for (size_t k = 0; k < ops.size(); ++k) {
        ExpectArray<T>(
            out[k], dims,
            [&](int64_t i) {
              return RefBinary<T>(ops[k], a.at<T>(SourceIndex(i, dims, sa)), c.at<T>(SourceIndex(i, dims, sb)));
            },
            IsTranscendental(ops[k]) ? 1e-5 : 0,
            absl::StrCat(OpcodeName(ops[k]), " ", testing::DimsText(sa.in_dims), " ", testing::DimsText(sb.in_dims),
                         " -> ", testing::DimsText(dims)));
      }
    }
  }

  template <typename T>
  void CheckCompare(int iterations) {
    const std::vector<CompareDirection> dirs = {CompareDirection::kEq, CompareDirection::kNe, CompareDirection::kLt,
                                                CompareDirection::kLe, CompareDirection::kGt, CompareDirection::kGe};
    for (int it = 0; it < iterations; ++it) {
      const Dims dims = RandomDims(rng_, 0, 3);
      const BroadcastSpec sa = RandomBroadcast(rng_, dims), sb = RandomBroadcast(rng_, dims);
      ModuleBuilder b;
      const int64_t xa = b.Broadcast(b.Parameter(0, Type<T>::kProto, sa.in_dims), dims, sa.map);
      const int64_t xb = b.Broadcast(b.Parameter(1, Type<T>::kProto, sb.in_dims), dims, sb.map);
      for (CompareDirection d : dirs) b.Output(b.Compare(d, xa, xb));
      // Few distinct values, so equality is common.
      std::vector<T> va = RandomValues<T>(rng_, testing::NumElements(sa.in_dims));
      std::vector<T> vb = RandomValues<T>(rng_, testing::NumElements(sb.in_dims));
      if constexpr (!std::is_same_v<T, uint8_t>) {
        for (T& v : va) v = (rng_() % 2) ? static_cast<T>(rng_() % 3) : v;
        for (T& v : vb) v = (rng_() % 2) ? static_cast<T>(rng_() % 3) : v;
      }
      const HostArray a = MakeArray<T>(Type<T>::kType, sa.in_dims, va),
                      c = MakeArray<T>(Type<T>::kType, sb.in_dims, vb);
      const std::vector<HostArray> out = Run(b.module(), {a, c});
      if (out.size() != dirs.size()) return;
      for (size_t k = 0; k < dirs.size(); ++k) {
        ExpectArray<uint8_t>(
            out[k], dims,
            [&](int64_t i) {
              return RefCompare<T>(dirs[k], a.at<T>(SourceIndex(i, dims, sa)), c.at<T>(SourceIndex(i, dims, sb)));
            },
            0, absl::StrCat("compare ", CompareDirectionName(dirs[k]), " ", testing::DimsText(dims)));
      }
    }
  }

  std::unique_ptr<Client> client_ = testing::MakeClient();
  std::mt19937_64 rng_{20240611};
};

INSTANTIATE_TEST_SUITE_P(, KernelTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Fused" : "Unfused"; });

// --- elementwise ----------------------------------------------------------------------------------
TEST_P(KernelTest, UnaryF32) {
  CheckUnaryOps<float>({Opcode::kNegate, Opcode::kAbs, Opcode::kExp, Opcode::kLog, Opcode::kSqrt, Opcode::kRsqrt,
                        Opcode::kTanh, Opcode::kLogistic, Opcode::kSign},
                       40);
}
TEST_P(KernelTest, UnaryF64) {
  CheckUnaryOps<double>({Opcode::kNegate, Opcode::kAbs, Opcode::kExp, Opcode::kTanh, Opcode::kSign}, 10);
}
TEST_P(KernelTest, UnaryIntegers) {
  CheckUnaryOps<int32_t>({Opcode::kNegate, Opcode::kAbs, Opcode::kSign}, 20);
  CheckUnaryOps<int64_t>({Opcode::kNegate, Opcode::kAbs, Opcode::kSign}, 20);
}
TEST_P(KernelTest, UnaryPred) { CheckUnaryOps<uint8_t>({Opcode::kNot}, 12); }

TEST_P(KernelTest, BinaryF32WithBroadcasting) {
  CheckBinaryOps<float>({Opcode::kAdd, Opcode::kSubtract, Opcode::kMultiply, Opcode::kDivide, Opcode::kPower,
                         Opcode::kMaximum, Opcode::kMinimum},
                        50);
}
TEST_P(KernelTest, BinaryF64WithBroadcasting) {
  CheckBinaryOps<double>({Opcode::kAdd, Opcode::kMultiply, Opcode::kDivide, Opcode::kMaximum}, 12);
}
TEST_P(KernelTest, BinaryIntegersWithBroadcasting) {
  const std::vector<Opcode> ops = {Opcode::kAdd,   Opcode::kSubtract, Opcode::kMultiply, Opcode::kDivide,
                                   Opcode::kPower, Opcode::kMaximum,  Opcode::kMinimum};
  CheckBinaryOps<int32_t>(ops, 30);
  CheckBinaryOps<int64_t>(ops, 30);
}
TEST_P(KernelTest, BinaryPredWithBroadcasting) { CheckBinaryOps<uint8_t>({Opcode::kAnd, Opcode::kOr}, 20); }

TEST_P(KernelTest, CompareAllDirections) {
  CheckCompare<float>(20);
  CheckCompare<int32_t>(12);
  CheckCompare<int64_t>(12);
  CheckCompare<uint8_t>(8);
}

TEST_P(KernelTest, IntegerEdgeCases) {
  // Division by zero, the overflowing quotient, wrapping products and negative powers, spelled out.
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  ModuleBuilder b;
  const int64_t a = b.Parameter(0, proto::S32, {6});
  const int64_t c = b.Parameter(1, proto::S32, {6});
  b.Output(b.Binary(Opcode::kDivide, a, c));
  b.Output(b.Binary(Opcode::kPower, a, c));
  b.Output(b.Binary(Opcode::kMultiply, a, c));
  const std::vector<HostArray> out =
      Run(b.module(), {MakeArray<int32_t>(PrimitiveType::kS32, {6}, {7, kMin, -7, -1, 2, 65536}),
                       MakeArray<int32_t>(PrimitiveType::kS32, {6}, {0, -1, 2, -3, -1, 2})});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_THAT(out[0].values<int32_t>(), ::testing::ElementsAre(-1, kMin, -3, 0, -2, 32768));
  EXPECT_THAT(out[1].values<int32_t>(), ::testing::ElementsAre(1, 0, 49, -1, 0, 0));
  EXPECT_THAT(out[2].values<int32_t>(), ::testing::ElementsAre(0, kMin, -14, 3, -2, 131072));
}

TEST_P(KernelTest, SelectWithBroadcasting) {
  for (int it = 0; it < 30; ++it) {
    const Dims dims = RandomDims(rng_, 0, 4);
    const BroadcastSpec sp = RandomBroadcast(rng_, dims), st = RandomBroadcast(rng_, dims),
                        sf = RandomBroadcast(rng_, dims);
    ModuleBuilder b;
    const int64_t p = b.Broadcast(b.Parameter(0, proto::PRED, sp.in_dims), dims, sp.map);
    const int64_t t = b.Broadcast(b.Parameter(1, proto::F32, st.in_dims), dims, st.map);
    const int64_t f = b.Broadcast(b.Parameter(2, proto::F32, sf.in_dims), dims, sf.map);
    b.Output(b.Select(p, t, f));
    const HostArray hp = RandomArray<uint8_t>(rng_, sp.in_dims), ht = RandomArray<float>(rng_, st.in_dims),
                    hf = RandomArray<float>(rng_, sf.in_dims);
    const std::vector<HostArray> out = Run(b.module(), {hp, ht, hf});
    ASSERT_EQ(out.size(), 1u);
    ExpectArray<float>(
        out[0], dims,
        [&](int64_t i) {
          return hp.at<uint8_t>(SourceIndex(i, dims, sp)) ? ht.at<float>(SourceIndex(i, dims, st))
                                                          : hf.at<float>(SourceIndex(i, dims, sf));
        },
        0, absl::StrCat("select ", testing::DimsText(dims)));
  }
}

// --- conversions ----------------------------------------------------------------------------------
template <typename To>
To RefSaturate(float x) {
  if (std::isnan(x)) return 0;
  if (x <= -std::ldexp(1.0f, std::numeric_limits<To>::digits)) return std::numeric_limits<To>::min();
  if (x >= std::ldexp(1.0f, std::numeric_limits<To>::digits)) return std::numeric_limits<To>::max();
  return static_cast<To>(std::trunc(x));
}

// Round to nearest even, by picking the nearer of the two truncations.
uint16_t RefToBf16(float x) {
  if (std::isnan(x)) return 0x7fc0;
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t lo = bits & 0xffff0000u, rest = bits & 0xffffu;
  if (rest > 0x8000u || (rest == 0x8000u && ((lo >> 16) & 1))) return static_cast<uint16_t>((lo >> 16) + 1);
  return static_cast<uint16_t>(lo >> 16);
}
float Bf16Value(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

std::vector<float> ConversionInputs(std::mt19937_64& rng, int64_t n) {
  static constexpr float kSpecial[] = {0.0f,     -0.0f,         1.5f,  -2.5f,       2.7f,        -2.7f,  3e9f,
                                       -3e9f,    2147483520.0f, 1e20f, -1e20f,      kNaN,        kInf,   -kInf,
                                       65504.0f, 65520.0f,      1e-8f, 1.00390625f, 1.01171875f, 3.0e38f};
  std::vector<float> v = testing::RandomFloats(rng, n, -1000, 1000);
  for (size_t i = 0; i < v.size(); ++i) {
    if (i < std::size(kSpecial)) v[i] = kSpecial[i];
  }
  return v;
}

TEST_P(KernelTest, ConvertFromF32) {
  for (const Dims& dims : {Dims{40}, Dims{4, 5}, Dims{0, 3}, Dims{1}, Dims{}}) {
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, dims);
    for (proto::ElementType t : {proto::S32, proto::S64, proto::PRED, proto::BF16, proto::F16, proto::F64}) {
      b.Output(b.Convert(x, t));
    }
    const HostArray in =
        MakeArray<float>(PrimitiveType::kF32, dims, ConversionInputs(rng_, testing::NumElements(dims)));
    const std::vector<HostArray> out = Run(b.module(), {in});
    ASSERT_EQ(out.size(), 6u);
    const std::string where = testing::DimsText(dims);
    ExpectArray<int32_t>(
        out[0], dims, [&](int64_t i) { return RefSaturate<int32_t>(in.at<float>(i)); }, 0, "f32->s32 " + where);
    ExpectArray<int64_t>(
        out[1], dims, [&](int64_t i) { return RefSaturate<int64_t>(in.at<float>(i)); }, 0, "f32->s64 " + where);
    ExpectArray<uint8_t>(
        out[2], dims, [&](int64_t i) { return in.at<float>(i) != 0.0f ? 1 : 0; }, 0, "f32->pred " + where);
    ExpectArray<double>(
        out[5], dims, [&](int64_t i) { return static_cast<double>(in.at<float>(i)); }, 0, "f32->f64 " + where);
    for (int64_t i = 0; i < in.numel(); ++i) {
      const float x = in.at<float>(i);
      const uint16_t bf = out[3].at<uint16_t>(i), h = out[4].at<uint16_t>(i);
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(Bf16Value(bf)));
        EXPECT_TRUE(std::isnan(static_cast<float>(std::bit_cast<_Float16>(h))));
        continue;
      }
      EXPECT_EQ(bf, RefToBf16(x)) << "f32->bf16 of " << x;
      EXPECT_EQ(h, std::bit_cast<uint16_t>(static_cast<_Float16>(x))) << "f32->f16 of " << x;
    }
  }
}

TEST_P(KernelTest, ConvertToF32) {
  const Dims dims = {3, 7};
  ModuleBuilder b;
  b.Output(b.Convert(b.Parameter(0, proto::S32, dims), proto::F32));
  b.Output(b.Convert(b.Parameter(1, proto::S64, dims), proto::F32));
  b.Output(b.Convert(b.Parameter(2, proto::PRED, dims), proto::F32));
  b.Output(b.Convert(b.Parameter(3, proto::BF16, dims), proto::F32));
  b.Output(b.Convert(b.Parameter(4, proto::F16, dims), proto::F32));
  b.Output(b.Convert(b.Parameter(5, proto::F64, dims), proto::F32));
  const HostArray s32 = RandomArray<int32_t>(rng_, dims), s64 = RandomArray<int64_t>(rng_, dims),
                  pred = RandomArray<uint8_t>(rng_, dims), f64 = RandomArray<double>(rng_, dims);
  std::vector<uint16_t> bf(21), h(21);
  for (size_t i = 0; i < bf.size(); ++i) {
    bf[i] = static_cast<uint16_t>(rng_());
    h[i] = static_cast<uint16_t>(rng_());
  }
  const HostArray hbf = MakeArray<uint16_t>(PrimitiveType::kBF16, dims, bf),
                  hh = MakeArray<uint16_t>(PrimitiveType::kF16, dims, h);
  const std::vector<HostArray> out = Run(b.module(), {s32, s64, pred, hbf, hh, f64});
  ASSERT_EQ(out.size(), 6u);
  ExpectArray<float>(
      out[0], dims, [&](int64_t i) { return static_cast<float>(s32.at<int32_t>(i)); }, 0, "s32->f32");
  ExpectArray<float>(
      out[1], dims, [&](int64_t i) { return static_cast<float>(s64.at<int64_t>(i)); }, 0, "s64->f32");
  ExpectArray<float>(
      out[2], dims, [&](int64_t i) { return pred.at<uint8_t>(i) ? 1.0f : 0.0f; }, 0, "pred->f32");
  ExpectArray<float>(
      out[3], dims, [&](int64_t i) { return Bf16Value(bf[static_cast<size_t>(i)]); }, 0, "bf16->f32");
  ExpectArray<float>(
      out[4], dims, [&](int64_t i) { return static_cast<float>(std::bit_cast<_Float16>(h[static_cast<size_t>(i)])); },
      0, "f16->f32");
  ExpectArray<float>(
      out[5], dims, [&](int64_t i) { return static_cast<float>(f64.at<double>(i)); }, 0, "f64->f32");
}

TEST_P(KernelTest, Bf16ArithmeticRoundsEveryStep) {
  // (a * b) + c in bf16: the product is rounded to bf16 before the add, as if stored.
  const Dims dims = {64};
  ModuleBuilder b;
  const int64_t a = b.Parameter(0, proto::BF16, dims), c = b.Parameter(1, proto::BF16, dims),
                d = b.Parameter(2, proto::BF16, dims);
  b.Output(b.Add(b.Mul(a, c), d));
  std::vector<uint16_t> va(64), vc(64), vd(64);
  for (size_t i = 0; i < 64; ++i) {
    va[i] = RefToBf16(std::uniform_real_distribution<float>(-4, 4)(rng_));
    vc[i] = RefToBf16(std::uniform_real_distribution<float>(-4, 4)(rng_));
    vd[i] = RefToBf16(std::uniform_real_distribution<float>(-4, 4)(rng_));
  }
  const std::vector<HostArray> out = Run(b.module(), {MakeArray<uint16_t>(PrimitiveType::kBF16, dims, va),
                                                      MakeArray<uint16_t>(PrimitiveType::kBF16, dims, vc),
                                                      MakeArray<uint16_t>(PrimitiveType::kBF16, dims, vd)});
  ASSERT_EQ(out.size(), 1u);
  for (size_t i = 0; i < 64; ++i) {
    const float product = Bf16Value(RefToBf16(Bf16Value(va[i]) * Bf16Value(vc[i])));
    EXPECT_EQ(out[0].at<uint16_t>(static_cast<int64_t>(i)), RefToBf16(product + Bf16Value(vd[i]))) << i;
  }
}

// --- data movement --------------------------------------------------------------------------------
TEST_P(KernelTest, Broadcast) {
  for (int it = 0; it < 30; ++it) {
    const Dims dims = RandomDims(rng_, 0, 4);
    const BroadcastSpec s = RandomBroadcast(rng_, dims);
    ModuleBuilder b;
    b.Output(b.Broadcast(b.Parameter(0, proto::S32, s.in_dims), dims, s.map));
    const HostArray in = RandomArray<int32_t>(rng_, s.in_dims);
    const std::vector<HostArray> out = Run(b.module(), {in});
    ASSERT_EQ(out.size(), 1u);
    ExpectArray<int32_t>(
        out[0], dims, [&](int64_t i) { return in.at<int32_t>(SourceIndex(i, dims, s)); }, 0,
        absl::StrCat("broadcast ", testing::DimsText(s.in_dims), " -> ", testing::DimsText(dims)));
  }
}

TEST_P(KernelTest, Transpose) {
  for (int it = 0; it < 30; ++it) {
    const Dims dims = RandomDims(rng_, 1, 4);
    Dims perm(dims.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, dims);
    const int64_t t = b.Transpose(x, perm);
    b.Output(t);
    b.Output(b.Add(t, t));  // a transpose read through a fused view
    const Dims out_dims = b.dims(t);
    const HostArray in = RandomArray<float>(rng_, dims);
    const std::vector<HostArray> out = Run(b.module(), {in});
    ASSERT_EQ(out.size(), 2u);
    const auto ref = [&](int64_t i) {
      const Dims c = testing::Unravel(i, out_dims);
      Dims src(dims.size());
      for (size_t d = 0; d < perm.size(); ++d) src[static_cast<size_t>(perm[d])] = c[d];
      return in.at<float>(testing::Ravel(src, dims));
    };
    const std::string what = absl::StrCat("transpose ", testing::DimsText(dims), " by ", testing::DimsText(perm));
    ExpectArray<float>(out[0], out_dims, ref, 0, what);
    ExpectArray<float>(
        out[1], out_dims, [&](int64_t i) { return ref(i) + ref(i); }, 0, what + " + itself");
  }
}

TEST_P(KernelTest, SliceWithStrides) {
  for (int it = 0; it < 40; ++it) {
    const Dims dims = RandomDims(rng_, 1, 4);
    Dims start, limit, stride;
    for (int64_t d : dims) {
      const int64_t s = std::uniform_int_distribution<int64_t>(0, d)(rng_);
      start.push_back(s);
      limit.push_back(std::uniform_int_distribution<int64_t>(s, d)(rng_));
      stride.push_back(std::uniform_int_distribution<int64_t>(1, 3)(rng_));
    }
    ModuleBuilder b;
    const int64_t sl = b.Slice(b.Parameter(0, proto::S64, dims), start, limit, stride);
    b.Output(sl);
    b.Output(b.Unary(Opcode::kNegate, sl));
    const Dims out_dims = b.dims(sl);
    const HostArray in = RandomArray<int64_t>(rng_, dims);
    const std::vector<HostArray> out = Run(b.module(), {in});
    ASSERT_EQ(out.size(), 2u);
    const auto ref = [&](int64_t i) {
      Dims c = testing::Unravel(i, out_dims);
      for (size_t d = 0; d < c.size(); ++d) c[d] = start[d] + c[d] * stride[d];
      return in.at<int64_t>(testing::Ravel(c, dims));
    };
    const std::string what = absl::StrCat("slice ", testing::DimsText(dims), " start ", testing::DimsText(start),
                                          " limit ", testing::DimsText(limit), " stride ", testing::DimsText(stride));
    ExpectArray<int64_t>(out[0], out_dims, ref, 0, what);
    ExpectArray<int64_t>(
        out[1], out_dims, [&](int64_t i) { return RefUnary<int64_t>(Opcode::kNegate, ref(i)); }, 0, what);
  }
}

TEST_P(KernelTest, SliceWithHugeStride) {
  // x[1::2^63-1, ::3]: one row (the stride past the end is legal), columns 0 and 3.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::S32, {5, 4});
  const int64_t sl = b.Slice(x, {1, 0}, {5, 4}, {std::numeric_limits<int64_t>::max(), 3});
  ASSERT_EQ(b.dims(sl), (Dims{1, 2}));
  b.Output(sl);
  b.Output(b.Add(sl, b.Parameter(1, proto::S32, {1, 2})));
  std::vector<int32_t> v(20);
  std::iota(v.begin(), v.end(), 0);
  const std::vector<HostArray> out = Run(b.module(), {MakeArray<int32_t>(PrimitiveType::kS32, {5, 4}, v),
                                                      MakeArray<int32_t>(PrimitiveType::kS32, {1, 2}, {100, 200})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(out[0].values<int32_t>(), ::testing::ElementsAre(4, 7));
  EXPECT_THAT(out[1].values<int32_t>(), ::testing::ElementsAre(104, 207));
}

TEST_P(KernelTest, ViewChains) {
  // slice(transpose(broadcast(x))) + y: every view composed into one affine load.
  for (int it = 0; it < 30; ++it) {
    const Dims dims = RandomDims(rng_, 2, 3, /*allow_zero=*/false);
    const BroadcastSpec s = RandomBroadcast(rng_, dims);
    Dims perm(dims.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, s.in_dims);
    const int64_t t = b.Transpose(b.Broadcast(x, dims, s.map), perm);
    const Dims td = b.dims(t);
    Dims start, limit, stride;
    for (int64_t d : td) {
      start.push_back(d > 1 ? 1 : 0);
      limit.push_back(d);
      stride.push_back(d > 2 ? 2 : 1);
    }
    const int64_t sl = b.Slice(t, start, limit, stride);
    const Dims out_dims = b.dims(sl);
    const int64_t y = b.Parameter(1, proto::F32, out_dims);
    b.Output(b.Add(sl, y));
    const HostArray hx = RandomArray<float>(rng_, s.in_dims), hy = RandomArray<float>(rng_, out_dims);
    const std::vector<HostArray> out = Run(b.module(), {hx, hy});
    ASSERT_EQ(out.size(), 1u);
    ExpectArray<float>(
        out[0], out_dims,
        [&](int64_t i) {
          Dims c = testing::Unravel(i, out_dims);
          for (size_t d = 0; d < c.size(); ++d) c[d] = start[d] + c[d] * stride[d];  // in t
          Dims bc(dims.size());
          for (size_t d = 0; d < perm.size(); ++d) bc[static_cast<size_t>(perm[d])] = c[d];  // in the broadcast
          return hx.at<float>(SourceIndex(testing::Ravel(bc, dims), dims, s)) + hy.at<float>(i);
        },
        0, absl::StrCat("view chain ", testing::DimsText(s.in_dims), " -> ", testing::DimsText(dims)));
  }
}

TEST_P(KernelTest, Reshape) {
  for (int it = 0; it < 30; ++it) {
    const Dims dims = RandomDims(rng_, 0, 4);
    // Another factorization of the same element count.
    const int64_t n = testing::NumElements(dims);
    Dims to;
    if (n == 0) {
      to = {2, 0, 3};
    } else {
      int64_t left = n;
      for (int64_t f : {2, 3, 5, 7}) {
        while (left % f == 0 && rng_() % 2) {
          to.push_back(f);
          left /= f;
        }
      }
      to.push_back(left);
      if (rng_() % 2) to.insert(to.begin(), 1);
      std::shuffle(to.begin(), to.end(), rng_);
    }
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, dims);
    const int64_t e = b.Unary(Opcode::kExp, x);
    const int64_t r = b.Reshape(e, to);
    b.Output(r);                            // an alias of a computed value, copied out
    b.Output(b.Unary(Opcode::kNegate, r));  // read through the alias
    b.Output(b.Reshape(x, to));             // an alias of a parameter
    const HostArray in = RandomArray<float>(rng_, dims);
    const std::vector<HostArray> out = Run(b.module(), {in});
    ASSERT_EQ(out.size(), 3u);
    const std::string what = absl::StrCat("reshape ", testing::DimsText(dims), " -> ", testing::DimsText(to));
    const auto ex = [&](int64_t i) { return RefUnary<float>(Opcode::kExp, in.at<float>(i)); };
    ExpectArray<float>(out[0], to, ex, 1e-5, what);
    ExpectArray<float>(
        out[1], to, [&](int64_t i) { return -ex(i); }, 1e-5, what);
    ExpectArray<float>(
        out[2], to, [&](int64_t i) { return in.at<float>(i); }, 0, what);
  }
}

TEST_P(KernelTest, Concatenate) {
  for (int it = 0; it < 30; ++it) {
    Dims dims = RandomDims(rng_, 1, 3);
    const int64_t axis = static_cast<int64_t>(rng_() % dims.size());
    const int count = 1 + static_cast<int>(rng_() % 3);
    ModuleBuilder b;
    std::vector<int64_t> params;
    std::vector<HostArray> args;
    std::vector<int64_t> offsets;
    int64_t total = 0;
    for (int k = 0; k < count; ++k) {
      Dims d = dims;
      d[static_cast<size_t>(axis)] = static_cast<int64_t>(rng_() % 4);
      params.push_back(b.Parameter(k, proto::S32, d));
      args.push_back(RandomArray<int32_t>(rng_, d));
      offsets.push_back(total);
      total += d[static_cast<size_t>(axis)];
    }
    const int64_t c = b.Concatenate(params, axis);
    b.Output(c);
    const Dims out_dims = b.dims(c);
    const std::vector<HostArray> out = Run(b.module(), args);
    ASSERT_EQ(out.size(), 1u);
    ExpectArray<int32_t>(
        out[0], out_dims,
        [&](int64_t i) {
          Dims co = testing::Unravel(i, out_dims);
          int k = count - 1;
          while (offsets[static_cast<size_t>(k)] > co[static_cast<size_t>(axis)]) --k;
          co[static_cast<size_t>(axis)] -= offsets[static_cast<size_t>(k)];
          return args[static_cast<size_t>(k)].at<int32_t>(testing::Ravel(co, args[static_cast<size_t>(k)].shape.dims));
        },
        0, absl::StrCat("concatenate ", count, " along ", axis, " -> ", testing::DimsText(out_dims)));
  }
}

TEST_P(KernelTest, IndexSelect) {
  for (int it = 0; it < 30; ++it) {
    const Dims dims = RandomDims(rng_, 1, 3, /*allow_zero=*/false);
    const int64_t axis = static_cast<int64_t>(rng_() % dims.size());
    const int64_t count = static_cast<int64_t>(rng_() % 6);
    const bool wide = rng_() % 2;
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, dims);
    const int64_t index = b.Parameter(1, wide ? proto::S64 : proto::S32, {count});
    const int64_t sel = b.IndexSelect(x, index, axis);
    b.Output(sel);
    const Dims out_dims = b.dims(sel);
    std::vector<int64_t> idx(static_cast<size_t>(count));
    for (int64_t& v : idx) v = static_cast<int64_t>(rng_() % static_cast<uint64_t>(dims[static_cast<size_t>(axis)]));
    HostArray hidx =
        wide ? MakeArray<int64_t>(PrimitiveType::kS64, {count}, idx)
             : MakeArray<int32_t>(PrimitiveType::kS32, {count}, std::vector<int32_t>(idx.begin(), idx.end()));
    const HostArray hx = RandomArray<float>(rng_, dims);
    const std::vector<HostArray> out = Run(b.module(), {hx, hidx});
    ASSERT_EQ(out.size(), 1u);
    ExpectArray<float>(
        out[0], out_dims,
        [&](int64_t i) {
          Dims c = testing::Unravel(i, out_dims);
          c[static_cast<size_t>(axis)] = idx[static_cast<size_t>(c[static_cast<size_t>(axis)])];
          return hx.at<float>(testing::Ravel(c, dims));
        },
        0, absl::StrCat("index_select ", testing::DimsText(dims), " axis ", axis, " count ", count));
  }
}

TEST_P(KernelTest, Gather) {
  for (int it = 0; it < 30; ++it) {
    const Dims dims = RandomDims(rng_, 1, 3, /*allow_zero=*/false);
    const int64_t axis = static_cast<int64_t>(rng_() % dims.size());
    Dims idims;
    for (size_t d = 0; d < dims.size(); ++d) {
      idims.push_back(static_cast<int64_t>(d) == axis
                          ? static_cast<int64_t>(rng_() % 5)
                          : 1 + static_cast<int64_t>(rng_() % static_cast<uint64_t>(dims[d])));
    }
    if (rng_() % 6 == 0) idims[0] = 0;
    const bool wide = rng_() % 2;
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::S32, dims);
    const int64_t index = b.Parameter(1, wide ? proto::S64 : proto::S32, idims);
    b.Output(b.Gather(x, index, axis));
    std::vector<int64_t> idx(static_cast<size_t>(testing::NumElements(idims)));
    for (int64_t& v : idx) v = static_cast<int64_t>(rng_() % static_cast<uint64_t>(dims[static_cast<size_t>(axis)]));
    HostArray hidx = wide
                         ? MakeArray<int64_t>(PrimitiveType::kS64, idims, idx)
                         : MakeArray<int32_t>(PrimitiveType::kS32, idims, std::vector<int32_t>(idx.begin(), idx.end()));
    const HostArray hx = RandomArray<int32_t>(rng_, dims);
    const std::vector<HostArray> out = Run(b.module(), {hx, hidx});
    ASSERT_EQ(out.size(), 1u);
    ExpectArray<int32_t>(
        out[0], idims,
        [&](int64_t i) {
          Dims c = testing::Unravel(i, idims);
          c[static_cast<size_t>(axis)] = idx[static_cast<size_t>(i)];
          return hx.at<int32_t>(testing::Ravel(c, dims));
        },
        0, absl::StrCat("gather ", testing::DimsText(dims), " axis ", axis, " index ", testing::DimsText(idims)));
  }
}

// --- reductions -----------------------------------------------------------------------------------
// Reference reduction: each output accumulates its inputs in row-major order.
template <typename T>
std::vector<T> RefReduce(const HostArray& in, const Dims& dims, const Dims& rdims, bool sum) {
  Dims out_dims;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (std::find(rdims.begin(), rdims.end(), static_cast<int64_t>(d)) == rdims.end()) out_dims.push_back(dims[d]);
  }
  T init = sum ? T{0}
               : (std::is_floating_point_v<T> ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest());
  std::vector<T> out(static_cast<size_t>(testing::NumElements(out_dims)), init);
  for (int64_t i = 0; i < in.numel(); ++i) {
    const Dims c = testing::Unravel(i, dims);
    Dims oc;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (std::find(rdims.begin(), rdims.end(), static_cast<int64_t>(d)) == rdims.end()) oc.push_back(c[d]);
    }
    T& acc = out[static_cast<size_t>(testing::Ravel(oc, out_dims))];
    const T x = in.at<T>(i);
    if (sum) {
      acc = RefBinary<T>(Opcode::kAdd, acc, x);  // integers wrap
    } else if constexpr (std::is_floating_point_v<T>) {
      acc = std::isnan(acc) || std::isnan(x) ? std::numeric_limits<T>::quiet_NaN() : std::max(acc, x);
    } else {
      acc = std::max(acc, x);
    }
  }
  return out;
}

Dims RandomReduceDims(std::mt19937_64& rng, size_t rank, int it) {
  Dims r;
  switch (it % 5) {
    case 0: r = {0}; break;                               // leading
    case 1: r = {static_cast<int64_t>(rank) - 1}; break;  // trailing
    case 2:
      if (rank >= 3) r = {1};
      break;  // middle
    case 3:
      for (size_t d = 0; d < rank; ++d) r.push_back(static_cast<int64_t>(d));
      break;  // all
    default:
      for (size_t d = 0; d < rank; ++d) {
        if (rng() % 2) r.push_back(static_cast<int64_t>(d));
      }
  }
  return r;
}

TEST_P(KernelTest, ReduceSumAndMaxExact) {
  // Integer-valued floats and ints: sums are exact in any order.
  for (int it = 0; it < 80; ++it) {
    const Dims dims = RandomDims(rng_, 1, 4);
    const Dims rdims = RandomReduceDims(rng_, dims.size(), it);
    ModuleBuilder b;
    const int64_t xf = b.Parameter(0, proto::F32, dims);
    const int64_t xi = b.Parameter(1, proto::S32, dims);
    b.Output(b.Reduce(Combiner::kSum, xf, rdims));
    b.Output(b.Reduce(Combiner::kMax, xf, rdims));
    b.Output(b.Reduce(Combiner::kSum, xi, rdims));
    b.Output(b.Reduce(Combiner::kMax, xi, rdims));
    // A fused producer: reduce_sum(x * x) and reduce_max(-x).
    b.Output(b.Reduce(Combiner::kSum, b.Mul(xi, xi), rdims));
    b.Output(b.Reduce(Combiner::kMax, b.Unary(Opcode::kNegate, xf), rdims));
    std::vector<float> vf(static_cast<size_t>(testing::NumElements(dims)));
    for (float& v : vf) v = static_cast<float>(static_cast<int>(rng_() % 41) - 20);
    const HostArray hf = MakeArray<float>(PrimitiveType::kF32, dims, vf);
    const HostArray hi = RandomArray<int32_t>(rng_, dims);
    const std::vector<HostArray> out = Run(b.module(), {hf, hi});
    ASSERT_EQ(out.size(), 6u);
    const Dims od = b.dims(b.module().outputs(0));
    const std::string what = absl::StrCat(testing::DimsText(dims), " over ", testing::DimsText(rdims));
    const std::vector<float> sf = RefReduce<float>(hf, dims, rdims, true),
                             mf = RefReduce<float>(hf, dims, rdims, false);
    const std::vector<int32_t> si = RefReduce<int32_t>(hi, dims, rdims, true),
                               mi = RefReduce<int32_t>(hi, dims, rdims, false);
    HostArray sq = hi, neg = hf;
    for (int64_t i = 0; i < hi.numel(); ++i) {
      sq.data<int32_t>()[i] = RefBinary<int32_t>(Opcode::kMultiply, hi.at<int32_t>(i), hi.at<int32_t>(i));
      neg.data<float>()[i] = -hf.at<float>(i);
    }
    const std::vector<int32_t> ssq = RefReduce<int32_t>(sq, dims, rdims, true);
    const std::vector<float> mneg = RefReduce<float>(neg, dims, rdims, false);
    ExpectArray<float>(
        out[0], od, [&](int64_t i) { return sf[static_cast<size_t>(i)]; }, 0, "reduce_sum f32 " + what);
    ExpectArray<float>(
        out[1], od, [&](int64_t i) { return mf[static_cast<size_t>(i)]; }, 0, "reduce_max f32 " + what);
    ExpectArray<int32_t>(
        out[2], od, [&](int64_t i) { return si[static_cast<size_t>(i)]; }, 0, "reduce_sum s32 " + what);
    ExpectArray<int32_t>(
        out[3], od, [&](int64_t i) { return mi[static_cast<size_t>(i)]; }, 0, "reduce_max s32 " + what);
    ExpectArray<int32_t>(
        out[4], od, [&](int64_t i) { return ssq[static_cast<size_t>(i)]; }, 0, "reduce_sum(x*x) " + what);
    ExpectArray<float>(
        out[5], od, [&](int64_t i) { return mneg[static_cast<size_t>(i)]; }, 0, "reduce_max(-x) " + what);
  }
}

TEST_P(KernelTest, ReduceSumRandomFloats) {
  for (int it = 0; it < 20; ++it) {
    const Dims dims = RandomDims(rng_, 1, 4);
    const Dims rdims = RandomReduceDims(rng_, dims.size(), it);
    ModuleBuilder b;
    b.Output(b.Reduce(Combiner::kSum, b.Parameter(0, proto::F32, dims), rdims));
    const HostArray in =
        MakeArray<float>(PrimitiveType::kF32, dims, testing::RandomFloats(rng_, testing::NumElements(dims)));
    const std::vector<HostArray> out = Run(b.module(), {in});
    ASSERT_EQ(out.size(), 1u);
    HostArray wide(ArrayShape{PrimitiveType::kF64, dims});
    for (int64_t i = 0; i < in.numel(); ++i) wide.data<double>()[i] = in.at<float>(i);
    const std::vector<double> ref = RefReduce<double>(wide, dims, rdims, true);
    ExpectArray<float>(
        out[0], b.dims(b.module().outputs(0)), [&](int64_t i) { return ref[static_cast<size_t>(i)]; }, 1e-5,
        absl::StrCat("reduce_sum ", testing::DimsText(dims), " over ", testing::DimsText(rdims)));
  }
}

// Rows and runs shorter than a block, many blocks of them: several are evaluated at once (a partial block
// last), and row lengths around the block size (128, 255, 256, 257) take either path. Column reductions big
// enough to be cut into chunks of runs summed apart: chunk edges mid-block of short runs, runs longer than a
// block, and a [2, 3, many] space whose reduced dims come first. Sums against sums in order in double,
// maxima exactly.
TEST_P(KernelTest, ReduceOverManyBlocksAndChunks) {
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{300, 7}, {1}},        {{300, 7}, {0}},         {{70, 3, 5}, {1}}, {{2, 129, 2}, {1}}, {{1000, 1}, {1}},
      {{9, 128}, {1}},        {{5, 255}, {1}},         {{5, 256}, {1}},   {{5, 257}, {1}},    {{3, 255}, {0}},
      {{600, 10}, {0}},       {{600, 10}, {1}},        {{300, 700}, {0}}, {{5000, 37}, {0}},  {{200, 1500}, {0}},
      {{64, 4, 512}, {0, 1}}, {{2, 3, 40000}, {0, 1}},
  };
  for (const auto& [dims, rdims] : cases) {
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, dims);
    b.Output(b.Reduce(Combiner::kSum, b.Unary(Opcode::kExp, x), rdims));
    b.Output(b.Reduce(Combiner::kMax, x, rdims));
    const HostArray in =
        MakeArray<float>(PrimitiveType::kF32, dims, testing::RandomFloats(rng_, testing::NumElements(dims)));
    const std::vector<HostArray> out = Run(b.module(), {in});
    ASSERT_EQ(out.size(), 2u);
    HostArray wide(ArrayShape{PrimitiveType::kF64, dims});
    for (int64_t i = 0; i < in.numel(); ++i) wide.data<double>()[i] = std::exp(static_cast<double>(in.at<float>(i)));
    const std::vector<double> sums = RefReduce<double>(wide, dims, rdims, true);
    const std::vector<float> maxima = RefReduce<float>(in, dims, rdims, false);
    const Dims out_dims = b.dims(b.module().outputs(0));
    const std::string what = absl::StrCat(testing::DimsText(dims), " over ", testing::DimsText(rdims));
    ExpectArray<float>(
        out[0], out_dims, [&](int64_t i) { return sums[static_cast<size_t>(i)]; }, 1e-6, "sum(exp) " + what);
    ExpectArray<float>(
        out[1], out_dims, [&](int64_t i) { return maxima[static_cast<size_t>(i)]; }, 0, "max " + what);
  }
}

// A reduction over leading dims adds chunks of its runs into sums of their own, each started at the identity by
// the thread that adds into it: a maximum of negative values finds no zero (what fresh memory often holds) in any
// chunk, including the chunks left without runs ([9, 60000]: 8 chunks of 2 runs, the last three empty).
TEST_P(KernelTest, ColumnReductionChunksStartAtTheIdentity) {
  for (const Dims& dims : std::vector<Dims>{{32, 128, 128}, {9, 60000}}) {
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, dims);
    b.Output(b.Reduce(Combiner::kMax, x, {0}));
    const HostArray in =
        MakeArray<float>(PrimitiveType::kF32, dims, testing::RandomFloats(rng_, testing::NumElements(dims), -3, -1));
    const std::vector<HostArray> out = Run(b.module(), {in});
    ASSERT_EQ(out.size(), 1u);
    const std::vector<float> maxima = RefReduce<float>(in, dims, {0}, false);
    ExpectArray<float>(
        out[0], b.dims(b.module().outputs(0)), [&](int64_t i) { return maxima[static_cast<size_t>(i)]; }, 0,
        "max of negatives over dim 0 of " + testing::DimsText(dims));
  }
}

TEST_P(KernelTest, ReduceMaxPropagatesNaNAndEmptyIsIdentity) {
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {3, 4});
  b.Output(b.Reduce(Combiner::kMax, x, {1}));
  b.Output(b.Reduce(Combiner::kMax, b.Parameter(1, proto::F32, {2, 0}), {1}));
  b.Output(b.Reduce(Combiner::kSum, b.Parameter(2, proto::S64, {0, 3}), {0}));
  b.Output(b.Reduce(Combiner::kMax, b.Parameter(3, proto::S32, {2, 0}), {1}));
  const std::vector<HostArray> out =
      Run(b.module(),
          {MakeArray<float>(PrimitiveType::kF32, {3, 4}, {1, kNaN, 3, 2, -kInf, -kInf, -kInf, -kInf, 5, 4, 3, kNaN}),
           MakeArray<float>(PrimitiveType::kF32, {2, 0}, {}), MakeArray<int64_t>(PrimitiveType::kS64, {0, 3}, {}),
           MakeArray<int32_t>(PrimitiveType::kS32, {2, 0}, {})});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(std::isnan(out[0].at<float>(0)));
  EXPECT_EQ(out[0].at<float>(1), -kInf);
  EXPECT_TRUE(std::isnan(out[0].at<float>(2)));
  EXPECT_THAT(out[1].values<float>(), ::testing::ElementsAre(-kInf, -kInf));
  EXPECT_THAT(out[2].values<int64_t>(), ::testing::ElementsAre(0, 0, 0));
  EXPECT_THAT(out[3].values<int32_t>(), ::testing::Each(std::numeric_limits<int32_t>::min()));
}

// A row's max and min in the row reduction's order, bit for bit: kLanes = 8 lanes, element i into lane i % 8
// of each block of 1024 (from the previous blocks' result), the lanes combined pairwise. Rows with NaNs of
// distinct payloads and zeros of both signs, where the order decides the bits, in and after whole vectors of
// 8 lanes, in rows of one block and of two.
template <typename T>
T LaneOrderReduce(bool max, const T* x, int64_t n) {
  const auto combine = [&](T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return ((a != a) || (max ? a > b : a < b)) ? a : b;  // NOLINT(misc-redundant-expression): the NaN test
    } else {
      return (max ? a > b : a < b) ? a : b;
    }
  };
  const T identity = std::is_floating_point_v<T>
                         ? (max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity())
                         : (max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max());
  T a = identity;
  for (int64_t b = 0; b < n; b += 1024) {
    T lanes[8];
    std::fill_n(lanes, 8, identity);
    for (int64_t i = b; i < std::min(n, b + 1024); ++i) lanes[(i - b) % 8] = combine(lanes[(i - b) % 8], x[i]);
    for (int width = 4; width > 0; width /= 2) {
      for (int l = 0; l < width; ++l) lanes[l] = combine(lanes[l], lanes[l + width]);
    }
    a = combine(a, lanes[0]);
  }
  return a;
}

TEST_P(KernelTest, RowMaxAndMinGiveTheLaneOrdersBits) {
  for (const int64_t width : {8, 13, 16, 40, 1030}) {
    constexpr int64_t kRows = 6;
    std::vector<float> f(static_cast<size_t>(kRows * width));
    std::vector<int32_t> s(f.size());
    // Row 0: zeros only, -0 but in the last whole vector of lanes (which of two equal values a lane keeps
    // decides its sign); rows 1 and 2: NaNs among zeros and small integers; rows 3 to 5: no NaN.
    for (size_t i = 0; i < f.size(); ++i) {
      const uint64_t r = rng_();
      const int64_t row = static_cast<int64_t>(i) / width, j = static_cast<int64_t>(i) % width;
      switch (row == 0 ? 7 : r % (row < 3 ? 7 : 6)) {
        case 7: f[i] = j / 8 == width / 8 - 1 ? 0.0f : -0.0f; break;
        case 6: f[i] = std::bit_cast<float>(0x7fc00000u | static_cast<uint32_t>(i & 0xffff)); break;  // NaN i
        case 0: f[i] = 0.0f; break;
        case 1: f[i] = -0.0f; break;
        default: f[i] = static_cast<float>(static_cast<int>(r % 9)) - 4.0f;
      }
      s[i] = static_cast<int32_t>(r >> 32);
    }
    ModuleBuilder b;
    const int64_t xf = b.Parameter(0, proto::F32, {kRows, width});
    const int64_t xs = b.Parameter(1, proto::S32, {kRows, width});
    b.Output(b.Reduce(Combiner::kMax, xf, {1}));
    b.Output(b.Reduce(Combiner::kMin, xf, {1}));
    b.Output(b.Reduce(Combiner::kMax, xs, {1}));
    b.Output(b.Reduce(Combiner::kMin, xs, {1}));
    const std::vector<HostArray> out = Run(b.module(), {MakeArray<float>(PrimitiveType::kF32, {kRows, width}, f),
                                                        MakeArray<int32_t>(PrimitiveType::kS32, {kRows, width}, s)});
    ASSERT_EQ(out.size(), 4u);
    for (int64_t r = 0; r < kRows; ++r) {
      SCOPED_TRACE(absl::StrCat("row ", r, " of width ", width));
      const float* fr = f.data() + r * width;
      const int32_t* sr = s.data() + r * width;
      EXPECT_EQ(std::bit_cast<uint32_t>(out[0].at<float>(r)),
                std::bit_cast<uint32_t>(LaneOrderReduce(true, fr, width)));
      EXPECT_EQ(std::bit_cast<uint32_t>(out[1].at<float>(r)),
                std::bit_cast<uint32_t>(LaneOrderReduce(false, fr, width)));
      EXPECT_EQ(out[2].at<int32_t>(r), LaneOrderReduce(true, sr, width));
      EXPECT_EQ(out[3].at<int32_t>(r), LaneOrderReduce(false, sr, width));
    }
  }
}

TEST_P(KernelTest, Argmax) {
  for (int it = 0; it < 40; ++it) {
    const Dims dims = RandomDims(rng_, 1, 3, /*allow_zero=*/false);
    const int64_t axis = static_cast<int64_t>(rng_() % dims.size());
    const bool ints = it % 2;
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, ints ? proto::S32 : proto::F32, dims);
    const int64_t am = b.Argmax(x, axis);
    b.Output(am);
    const Dims od = b.dims(am);
    HostArray in;
    if (ints) {
      std::vector<int32_t> v(static_cast<size_t>(testing::NumElements(dims)));
      for (int32_t& e : v) e = static_cast<int32_t>(rng_() % 4);  // many ties: the first maximum wins
      in = MakeArray<int32_t>(PrimitiveType::kS32, dims, v);
    } else {
      std::vector<float> v(static_cast<size_t>(testing::NumElements(dims)));
      for (float& e : v) e = rng_() % 15 == 0 ? kNaN : static_cast<float>(rng_() % 4) - 1.5f;
      in = MakeArray<float>(PrimitiveType::kF32, dims, v);
    }
    const std::vector<HostArray> out = Run(b.module(), {in});
    ASSERT_EQ(out.size(), 1u);
    ExpectArray<int64_t>(
        out[0], od,
        [&](int64_t i) {
          Dims c = testing::Unravel(i, od);
          c.insert(c.begin() + axis, 0);
          int64_t best = 0;
          double best_v = 0;
          for (int64_t a = 0; a < dims[static_cast<size_t>(axis)]; ++a) {
            c[static_cast<size_t>(axis)] = a;
            const int64_t src = testing::Ravel(c, dims);
            const double v = ints ? in.at<int32_t>(src) : in.at<float>(src);
            if (a == 0) {
              best_v = v;
            } else if (std::isnan(best_v)) {
              break;  // the first NaN is the maximum
            } else if (std::isnan(v) || v > best_v) {
              best = a;
              best_v = v;
            }
          }
          return best;
        },
        0, absl::StrCat("argmax ", testing::DimsText(dims), " axis ", axis));
  }
}

TEST_P(KernelTest, ArgmaxOfOtherTypesAndLargeIntegers) {
  constexpr int64_t k53 = int64_t{1} << 53;
  ModuleBuilder b;
  b.Output(b.Argmax(b.Parameter(0, proto::S64, {2, 3}), 1));
  b.Output(b.Argmax(b.Parameter(1, proto::PRED, {4}), 0));
  b.Output(b.Argmax(b.Parameter(2, proto::BF16, {3}), 0));
  b.Output(b.Argmax(b.Parameter(3, proto::F64, {3, 1}), 0));
  const std::vector<HostArray> out =
      Run(b.module(), {MakeArray<int64_t>(PrimitiveType::kS64, {2, 3},
                                          {k53, k53 + 1, k53 - 1, -5, std::numeric_limits<int64_t>::min(),
                                           std::numeric_limits<int64_t>::max()}),
                       MakeArray<uint8_t>(PrimitiveType::kPred, {4}, {0, 0, 1, 1}),
                       MakeArray<uint16_t>(PrimitiveType::kBF16, {3}, {RefToBf16(1), RefToBf16(3), RefToBf16(2)}),
                       MakeArray<double>(PrimitiveType::kF64, {3, 1}, {0.1, std::nan(""), 5})});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_THAT(out[0].values<int64_t>(), ::testing::ElementsAre(1, 2)) << "s64 beyond 2^53 compared inexactly";
  EXPECT_THAT(out[1].values<int64_t>(), ::testing::ElementsAre(2));
  EXPECT_THAT(out[2].values<int64_t>(), ::testing::ElementsAre(1));
  EXPECT_THAT(out[3].values<int64_t>(), ::testing::ElementsAre(1));
}

// --- dot ------------------------------------------------------------------------------------------
struct DotCase {
  Dims batch;
  int64_t m, k, n;
  bool tl, tr, lhs_shared, rhs_shared;
};

TEST_P(KernelTest, Dot) {
  const std::vector<DotCase> cases = {
      {{}, 3, 4, 5, false, false, false, false},   {{}, 1, 7, 1, false, false, false, false},
      {{}, 6, 5, 4, true, false, false, false},    {{}, 6, 5, 4, false, true, false, false},
      {{}, 6, 5, 4, true, true, false, false},     {{2}, 3, 4, 5, false, false, false, false},
      {{2, 3}, 2, 3, 4, true, true, false, false}, {{4}, 3, 4, 5, false, false, false, true},
      {{4}, 3, 4, 5, false, true, false, true},    {{3}, 5, 2, 3, true, false, true, false},
      {{}, 0, 3, 4, false, false, false, false},   {{}, 3, 4, 0, false, false, false, false},
      {{}, 3, 0, 4, false, false, false, false},   {{2}, 3, 0, 4, true, true, false, false},
      {{0}, 3, 4, 5, false, false, false, false},  {{}, 33, 65, 17, false, true, false, false},
  };
  for (const DotCase& c : cases) {
    for (bool f64 : {false, true}) {
      const proto::ElementType type = f64 ? proto::F64 : proto::F32;
      Dims da = c.lhs_shared ? Dims{} : c.batch, db = c.rhs_shared ? Dims{} : c.batch;
      da.insert(da.end(), c.tl ? std::initializer_list<int64_t>{c.k, c.m} : std::initializer_list<int64_t>{c.m, c.k});
      db.insert(db.end(), c.tr ? std::initializer_list<int64_t>{c.n, c.k} : std::initializer_list<int64_t>{c.k, c.n});
      ModuleBuilder b;
      const int64_t d = b.Dot(b.Parameter(0, type, da), b.Parameter(1, type, db), c.tl, c.tr);
      b.Output(d);
      Dims od = c.batch;
      od.push_back(c.m);
      od.push_back(c.n);
      ASSERT_EQ(b.dims(d), od);
      const std::vector<float> va = testing::RandomFloats(rng_, testing::NumElements(da), -1, 1);
      const std::vector<float> vb = testing::RandomFloats(rng_, testing::NumElements(db), -1, 1);
      HostArray ha, hb;
      if (f64) {
        ha = MakeArray<double>(PrimitiveType::kF64, da, std::vector<double>(va.begin(), va.end()));
        hb = MakeArray<double>(PrimitiveType::kF64, db, std::vector<double>(vb.begin(), vb.end()));
      } else {
        ha = MakeArray<float>(PrimitiveType::kF32, da, va);
        hb = MakeArray<float>(PrimitiveType::kF32, db, vb);
      }
      // Earlier cases leave garbage in the device's pooled memory: k = 0 must still give zeros.
      const std::vector<HostArray> out = Run(b.module(), {ha, hb});
      ASSERT_EQ(out.size(), 1u);
      const auto ref = [&](int64_t i) {
        const int64_t bi = i / std::max<int64_t>(1, c.m * c.n),
                      row = (i / std::max<int64_t>(1, c.n)) % std::max<int64_t>(1, c.m),
                      col = i % std::max<int64_t>(1, c.n);
        double acc = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          const int64_t ai = (c.lhs_shared ? 0 : bi * c.m * c.k) + (c.tl ? p * c.m + row : row * c.k + p);
          const int64_t bj = (c.rhs_shared ? 0 : bi * c.k * c.n) + (c.tr ? col * c.k + p : p * c.n + col);
          acc += static_cast<double>(va[static_cast<size_t>(ai)]) * vb[static_cast<size_t>(bj)];
        }
        return acc;
      };
      const std::string what = absl::StrCat("dot ", testing::DimsText(da), " x ", testing::DimsText(db),
                                            c.tl ? " tl" : "", c.tr ? " tr" : "", f64 ? " f64" : " f32");
      if (f64) {
        ExpectArray<double>(out[0], od, ref, 1e-12, what);
      } else {
        ExpectArray<float>(out[0], od, ref, 1e-5, what);
      }
    }
  }
}

TEST_P(KernelTest, DotBf16) {
  ModuleBuilder b;
  const int64_t d = b.Dot(b.Parameter(0, proto::BF16, {2, 3, 4}), b.Parameter(1, proto::BF16, {4, 5}));
  b.Output(d);
  std::vector<uint16_t> va(24), vb(20);
  for (uint16_t& v : va) v = RefToBf16(std::uniform_real_distribution<float>(-2, 2)(rng_));
  for (uint16_t& v : vb) v = RefToBf16(std::uniform_real_distribution<float>(-2, 2)(rng_));
  const std::vector<HostArray> out = Run(b.module(), {MakeArray<uint16_t>(PrimitiveType::kBF16, {2, 3, 4}, va),
                                                      MakeArray<uint16_t>(PrimitiveType::kBF16, {4, 5}, vb)});
  ASSERT_EQ(out.size(), 1u);
  for (int64_t i = 0; i < 30; ++i) {
    const int64_t bi = i / 15, row = (i / 5) % 3, col = i % 5;
    double acc = 0;
    for (int64_t p = 0; p < 4; ++p) {
      acc += static_cast<double>(Bf16Value(va[static_cast<size_t>(bi * 12 + row * 4 + p)])) *
             Bf16Value(vb[static_cast<size_t>(p * 5 + col)]);
    }
    EXPECT_NEAR(Bf16Value(out[0].at<uint16_t>(i)), acc, 1e-2 * std::max(1.0, std::fabs(acc))) << i;
  }
}

// --- generators -----------------------------------------------------------------------------------
TEST_P(KernelTest, Iota) {
  struct Case {
    proto::ElementType type;
    Dims dims;
    int64_t axis, start, step;
  };
  for (const Case& c : std::vector<Case>{{proto::S32, {5}, 0, 0, 1},
                                         {proto::S64, {3, 4}, 1, -2, 3},
                                         {proto::F32, {3, 4}, 0, 10, -1},
                                         {proto::S32, {2, 1, 3}, 2, 7, 2},
                                         {proto::F32, {0, 4}, 1, 0, 1},
                                         {proto::S64, {}, 0, 9, 4},
                                         // Several blocks, which begin inside a run of points that
                                         // share a coordinate and end inside another.
                                         {proto::S32, {3, 701, 3}, 1, 5, 2},
                                         {proto::S64, {5, 611}, 0, 3, -1},
                                         {proto::F32, {2, 3, 1100}, 2, 0, 1},
                                         // Along a short last axis: many runs, wrapping, in each block.
                                         {proto::S64, {40, 114}, 1, 0, 1},
                                         {proto::F32, {30, 50}, 1, -7, 3}}) {
    ModuleBuilder b;
    const int64_t io = b.Iota(c.type, c.dims, c.axis, c.start, c.step);
    b.Output(io);
    // Fused into a consumer through a transposing view too.
    const int64_t p = b.Parameter(0, c.type, c.dims);
    b.Output(b.Add(io, p));
    HostArray hp(ArrayShape{FromProto(c.type), c.dims});
    std::fill(hp.bytes.begin(), hp.bytes.end(), 0);
    const std::vector<HostArray> out = Run(b.module(), {hp});
    ASSERT_EQ(out.size(), 2u) << testing::DimsText(c.dims);
    const auto ref = [&](int64_t i) {
      return c.start + c.step * testing::Unravel(i, c.dims)[static_cast<size_t>(c.axis)];
    };
    const auto ref0 = [&](int64_t i) { return c.dims.empty() ? c.start : ref(i); };
    const std::string what = absl::StrCat("iota ", testing::DimsText(c.dims), " axis ", c.axis);
    for (int k = 0; k < 2; ++k) {
      if (c.type == proto::S32) ExpectArray<int32_t>(out[static_cast<size_t>(k)], c.dims, ref0, 0, what);
      if (c.type == proto::S64) ExpectArray<int64_t>(out[static_cast<size_t>(k)], c.dims, ref0, 0, what);
      if (c.type == proto::F32) ExpectArray<float>(out[static_cast<size_t>(k)], c.dims, ref0, 0, what);
    }
  }
}

TEST_P(KernelTest, IotaWrapsLikeIntegerArithmetic) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  ModuleBuilder b;
  const int64_t io = b.Iota(proto::S64, {4}, 0, kMax - 1, 1);
  b.Output(io);
  b.Output(b.Add(b.Slice(io, {1}, {4}, {2}), b.Parameter(0, proto::S64, {2})));  // through a view's offset
  const std::vector<HostArray> out = Run(b.module(), {MakeArray<int64_t>(PrimitiveType::kS64, {2}, {0, 0})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(out[0].values<int64_t>(), ::testing::ElementsAre(kMax - 1, kMax, kMin, kMin + 1));
  EXPECT_THAT(out[1].values<int64_t>(), ::testing::ElementsAre(kMax, kMin + 1));
}

TEST_P(KernelTest, IotaThroughViews) {
  // transpose(broadcast(iota)) sliced: the iota's axis is remapped through each view.
  ModuleBuilder b;
  const int64_t io = b.Iota(proto::S32, {4}, 0, 100, 10);
  const int64_t bc = b.Broadcast(io, {3, 4}, {1});
  const int64_t t = b.Transpose(bc, {1, 0});              // [4, 3]: value = 100 + 10 * row
  const int64_t sl = b.Slice(t, {1, 0}, {4, 3}, {2, 2});  // rows 1, 3; cols 0, 2
  b.Output(b.Add(sl, b.Parameter(0, proto::S32, {2, 2})));
  const std::vector<HostArray> out = Run(b.module(), {MakeArray<int32_t>(PrimitiveType::kS32, {2, 2}, {0, 1, 2, 3})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].values<int32_t>(), ::testing::ElementsAre(110, 111, 132, 133));
}

TEST_P(KernelTest, RngUniform) {
  const int64_t n = 4096;
  ModuleBuilder b;
  const int64_t seed = b.Parameter(0, proto::S64, {});
  b.Output(b.Rng(Opcode::kRngUniform, seed, proto::F32, {n}, 1));
  b.Output(b.Rng(Opcode::kRngUniform, seed, proto::F32, {n}, 2));
  b.Output(b.Rng(Opcode::kRngUniform, seed, proto::F64, {64, 64}, 1));
  b.Output(b.Rng(Opcode::kRngUniform, seed, proto::F32, {n}, 1));  // same stream: same values
  absl::StatusOr<std::shared_ptr<Executable>> exe = client_->Compile(b.module(), Options());
  ASSERT_TRUE(exe.ok()) << exe.status();
  const auto run = [&](int64_t s) {
    absl::StatusOr<std::vector<HostArray>> r =
        testing::ExecuteOnHost(*client_, **exe, {MakeArray<int64_t>(PrimitiveType::kS64, {}, {s})});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<HostArray>(4);
  };
  const std::vector<HostArray> a = run(7), again = run(7), other = run(8);
  for (size_t k = 0; k < 4; ++k) EXPECT_EQ(a[k].bytes, again[k].bytes) << "not deterministic, output " << k;
  EXPECT_EQ(a[0].bytes, a[3].bytes);
  EXPECT_NE(a[0].bytes, a[1].bytes) << "different streams gave the same values";
  EXPECT_NE(a[0].bytes, other[0].bytes) << "different seeds gave the same values";
  for (size_t k : {0, 1}) {
    double sum = 0;
    std::set<float> distinct;
    for (float v : a[k].values<float>()) {
      EXPECT_GE(v, 0.0f);
      EXPECT_LT(v, 1.0f);
      sum += v;
      distinct.insert(v);
    }
    EXPECT_NEAR(sum / n, 0.5, 0.03);
    EXPECT_GT(distinct.size(), static_cast<size_t>(n * 9 / 10));
  }
  double sum = 0;
  for (double v : a[2].values<double>()) {
    EXPECT_GE(v, 0.0);
    EXPECT_LT(v, 1.0);
    sum += v;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.03);
  // Compiling again gives the same numbers.
  absl::StatusOr<std::vector<HostArray>> recompiled =
      testing::CompileAndRun(*client_, b.module(), Options(), {MakeArray<int64_t>(PrimitiveType::kS64, {}, {7})});
  ASSERT_TRUE(recompiled.ok());
  EXPECT_EQ((*recompiled)[0].bytes, a[0].bytes);
}

TEST_P(KernelTest, RngUniformHalfTypesStayBelowOne) {
  // Rounding a uniform value to 8 (bf16) or 11 (f16) significant bits must not reach 1.0.
  ModuleBuilder b;
  const int64_t seed = b.Parameter(0, proto::S64, {});
  b.Output(b.Rng(Opcode::kRngUniform, seed, proto::BF16, {20000}, 3));
  b.Output(b.Rng(Opcode::kRngUniform, seed, proto::F16, {20000}, 3));
  const std::vector<HostArray> out = Run(b.module(), {MakeArray<int64_t>(PrimitiveType::kS64, {}, {42})});
  ASSERT_EQ(out.size(), 2u);
  int bf_bad = 0, h_bad = 0;
  double bf_sum = 0;
  for (uint16_t v : out[0].values<uint16_t>()) {
    const float f = Bf16Value(v);
    bf_bad += !(f >= 0.0f && f < 1.0f);
    bf_sum += f;
  }
  for (uint16_t v : out[1].values<uint16_t>()) {
    const float f = static_cast<float>(std::bit_cast<_Float16>(v));
    h_bad += !(f >= 0.0f && f < 1.0f);
  }
  EXPECT_EQ(bf_bad, 0) << "bf16 uniform values outside [0, 1)";
  EXPECT_EQ(h_bad, 0) << "f16 uniform values outside [0, 1)";
  EXPECT_NEAR(bf_sum / 20000, 0.5, 0.03);
}

TEST_P(KernelTest, RngNormal) {
  const int64_t n = 8192;
  ModuleBuilder b;
  const int64_t seed = b.Constant(1234, proto::S64);
  b.Output(b.Rng(Opcode::kRngNormal, seed, proto::F32, {n}, 0));
  b.Output(b.Rng(Opcode::kRngNormal, seed, proto::F32, {n}, 1));
  const std::vector<HostArray> out = Run(b.module(), {});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NE(out[0].bytes, out[1].bytes);
  double sum = 0, sq = 0;
  for (float v : out[0].values<float>()) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.05);
  EXPECT_NEAR(sq / n, 1.0, 0.06);
}

TEST_P(KernelTest, MultipleAndRepeatedOutputs) {
  // The same value twice, a parameter as a result and a constant as a result.
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {3});
  const int64_t e = b.Unary(Opcode::kNegate, x);
  b.Output(e);
  b.Output(x);
  b.Output(e);
  b.Output(b.Constant(2.5, proto::F32, {2}));
  const std::vector<HostArray> out = Run(b.module(), {MakeArray<float>(PrimitiveType::kF32, {3}, {1, 2, 3})});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_THAT(out[0].values<float>(), ::testing::ElementsAre(-1, -2, -3));
  EXPECT_THAT(out[1].values<float>(), ::testing::ElementsAre(1, 2, 3));
  EXPECT_THAT(out[2].values<float>(), ::testing::ElementsAre(-1, -2, -3));
  EXPECT_THAT(out[3].values<float>(), ::testing::ElementsAre(2.5, 2.5));
}

TEST_P(KernelTest, LargeElementwiseAndReduceAcrossBlocks) {
  // Rows shorter than a block (evaluated several a block) and longer (over several blocks), neither a
  // multiple of it, with strided loads crossing rows.
  for (const int64_t cols : {int64_t{301}, FusedProgram::kBlock + 277}) {
    SCOPED_TRACE(cols);
    const Dims dims = {37, cols};
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, proto::F32, dims);
    const int64_t t = b.Transpose(b.Parameter(1, proto::F32, {cols, 37}), {1, 0});
    const int64_t s = b.Add(b.Mul(x, t), x);
    b.Output(s);
    b.Output(b.Reduce(Combiner::kMax, s, {1}));
    b.Output(b.Reduce(Combiner::kMax, s, {0}));
    const HostArray hx = MakeArray<float>(PrimitiveType::kF32, dims, testing::RandomFloats(rng_, 37 * cols));
    const HostArray ht = MakeArray<float>(PrimitiveType::kF32, {cols, 37}, testing::RandomFloats(rng_, 37 * cols));
    const std::vector<HostArray> out = Run(b.module(), {hx, ht});
    ASSERT_EQ(out.size(), 3u);
    const auto ref = [&](int64_t i) {
      const int64_t r = i / cols, c = i % cols;
      return hx.at<float>(i) * ht.at<float>(c * 37 + r) + hx.at<float>(i);
    };
    ExpectArray<float>(out[0], dims, ref, 0, "fused chain");
    HostArray s_ref(ArrayShape{PrimitiveType::kF32, dims});
    for (int64_t i = 0; i < s_ref.numel(); ++i) s_ref.data<float>()[i] = ref(i);
    const std::vector<float> m1 = RefReduce<float>(s_ref, dims, {1}, false),
                             m0 = RefReduce<float>(s_ref, dims, {0}, false);
    ExpectArray<float>(
        out[1], {37}, [&](int64_t i) { return m1[static_cast<size_t>(i)]; }, 0, "row max");
    ExpectArray<float>(
        out[2], {cols}, [&](int64_t i) { return m0[static_cast<size_t>(i)]; }, 0, "column max");
  }
}

// --- fused and unfused give the same bits ---------------------------------------------------------
// Runs `module` compiled with fusion on/off and autotuning on/off; every configuration must give
// bit-identical results.
void ExpectSameBitsInEveryConfiguration(Client& client, const proto::Module& module, const std::vector<HostArray>& args,
                                        const std::string& what, bool autotune_too = true) {
  std::vector<HostArray> first;
  std::string first_name;
  for (bool fusion : {false, true}) {
    for (bool autotune : {false, true}) {
      if (autotune && !autotune_too) continue;
      const std::string name = absl::StrCat("fusion=", fusion, " autotune=", autotune);
      absl::StatusOr<std::vector<HostArray>> r =
          testing::CompileAndRun(client, module, {.fusion = fusion, .autotune = autotune}, args);
      ASSERT_TRUE(r.ok()) << what << " " << name << ": " << r.status();
      if (first.empty() && first_name.empty()) {
        first = *r;
        first_name = name;
        continue;
      }
      ASSERT_EQ(r->size(), first.size());
      for (size_t k = 0; k < first.size(); ++k) {
        ASSERT_EQ((*r)[k].bytes.size(), first[k].bytes.size());
        EXPECT_TRUE(first[k].bytes.empty() ||
                    std::memcmp((*r)[k].bytes.data(), first[k].bytes.data(), first[k].bytes.size()) == 0)
            << what << ": output " << k << " differs between " << first_name << " and " << name;
      }
    }
  }
}

class FusedVsUnfused : public ::testing::Test {
 protected:
  std::unique_ptr<Client> client_ = testing::MakeClient();
  std::mt19937_64 rng_{77};
};

TEST_F(FusedVsUnfused, MlpLayerForward) {
  // relu(x @ w1 + b1) @ w2 + b2, large enough for GEMM and loop autotuning.
  const int64_t batch = 64, in = 256, hidden = 256, out = 16;
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {batch, in});
  const int64_t w1 = b.Parameter(1, proto::F32, {in, hidden});
  const int64_t b1 = b.Parameter(2, proto::F32, {hidden});
  const int64_t w2 = b.Parameter(3, proto::F32, {hidden, out});
  const int64_t b2 = b.Parameter(4, proto::F32, {out});
  const int64_t h = b.Add(b.Dot(x, w1), b.Broadcast(b1, {batch, hidden}, {1}));
  const int64_t relu = b.Binary(Opcode::kMaximum, h, b.Constant(0, proto::F32, {batch, hidden}));
  const int64_t y = b.Add(b.Dot(relu, w2), b.Broadcast(b2, {batch, out}, {1}));
  b.Output(y);
  b.Output(relu);
  const auto arr = [&](const Dims& d) {
    return MakeArray<float>(PrimitiveType::kF32, d, testing::RandomFloats(rng_, testing::NumElements(d), -0.2f, 0.2f));
  };
  ExpectSameBitsInEveryConfiguration(
      *client_, b.module(), {arr({batch, in}), arr({in, hidden}), arr({hidden}), arr({hidden, out}), arr({out})},
      "mlp");
}

TEST_F(FusedVsUnfused, ResultsAlsoReadByLaterSteps) {
  // An optimizer-like update fused into one loop: m2 is a result and read by the steps after it, p2
  // is read by a bf16 and a pred result; f32 and pred results are computed straight into their outputs,
  // the bf16 one is stored from its register. Rows cross blocks and end mid-block; m2 is output twice.
  const Dims d = {3, FusedProgram::kBlock + 301};
  ModuleBuilder b;
  const int64_t p = b.Parameter(0, proto::F32, d), m = b.Parameter(1, proto::F32, d), g = b.Parameter(2, proto::F32, d);
  const int64_t m2 = b.Add(b.Mul(m, b.Constant(0.9, proto::F32, d)), g);
  const int64_t p2 =
      b.Binary(Opcode::kSubtract, p, b.Binary(Opcode::kDivide, m2, b.Add(b.Mul(m2, m2), b.Constant(1, proto::F32, d))));
  b.Output(m2);
  b.Output(p2);
  b.Output(b.Convert(p2, proto::BF16));
  b.Output(b.Compare(CompareDirection::kGt, p2, p));
  b.Output(m2);
  const auto arr = [&] {
    return MakeArray<float>(PrimitiveType::kF32, d, testing::RandomFloats(rng_, testing::NumElements(d), -2, 2));
  };
  const std::vector<HostArray> args = {arr(), arr(), arr()};
  ExpectSameBitsInEveryConfiguration(*client_, b.module(), args, "update", /*autotune_too=*/false);
  absl::StatusOr<std::vector<HostArray>> r = testing::CompileAndRun(*client_, b.module(), {}, args);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 5u);
  const auto want_m2 = [&](int64_t i) { return args[1].at<float>(i) * 0.9f + args[2].at<float>(i); };
  const auto want_p2 = [&](int64_t i) {
    const float v = want_m2(i);
    return args[0].at<float>(i) - v / (v * v + 1);
  };
  ExpectArray<float>((*r)[0], d, want_m2, 1e-6, "m2");
  ExpectArray<float>((*r)[1], d, want_p2, 1e-6, "p2");
  for (int64_t i = 0; i < (*r)[1].numel(); ++i) {
    ASSERT_EQ((*r)[2].at<uint16_t>(i), FloatToBf16((*r)[1].at<float>(i))) << "bf16 of p2 at " << i;
    ASSERT_EQ((*r)[3].at<uint8_t>(i), (*r)[1].at<float>(i) > args[0].at<float>(i) ? 1 : 0) << "p2 > p at " << i;
  }
  EXPECT_EQ((*r)[4].bytes, (*r)[0].bytes);
}

// softmax over the last dim of [rows, cols].
int64_t Softmax(ModuleBuilder& b, int64_t x) {
  const Dims d = b.dims(x);
  const int64_t mx = b.Reduce(Combiner::kMax, x, {1});
  const int64_t e = b.Unary(Opcode::kExp, b.Binary(Opcode::kSubtract, x, b.Broadcast(mx, d, {0})));
  const int64_t sum = b.Reduce(Combiner::kSum, e, {1});
  return b.Binary(Opcode::kDivide, e, b.Broadcast(sum, d, {0}));
}

TEST_F(FusedVsUnfused, Softmax) {
  for (const Dims& d : {Dims{64, 1000}, Dims{3, 5}, Dims{1, 1}, Dims{0, 4}, Dims{40, 1}}) {
    ModuleBuilder b;
    b.Output(Softmax(b, b.Parameter(0, proto::F32, d)));
    const HostArray x =
        MakeArray<float>(PrimitiveType::kF32, d, testing::RandomFloats(rng_, testing::NumElements(d), -5, 5));
    ExpectSameBitsInEveryConfiguration(*client_, b.module(), {x}, "softmax " + testing::DimsText(d));
    // And it is a softmax.
    absl::StatusOr<std::vector<HostArray>> r = testing::CompileAndRun(*client_, b.module(), {}, {x});
    ASSERT_TRUE(r.ok());
    for (int64_t row = 0; row < d[0]; ++row) {
      double total = 0;
      for (int64_t c = 0; c < d[1]; ++c) total += (*r)[0].at<float>(row * d[1] + c);
      EXPECT_NEAR(total, 1.0, 1e-5);
    }
  }
}

// A chain of `length` elementwise ops on x (and y), bounded so no value overflows.
int64_t ElementwiseChain(ModuleBuilder& b, int64_t x, int64_t y, int length, std::mt19937_64& rng) {
  const proto::ElementType t = b.type(x);
  const Dims d = b.dims(x);
  int64_t v = x;
  for (int i = 0; i < length; ++i) {
    switch (rng() % 9) {
      case 0: v = b.Unary(Opcode::kTanh, v); break;
      case 1: v = b.Add(v, y); break;
      case 2: v = b.Mul(v, b.Constant(0.75, t, d)); break;
      case 3: v = b.Unary(Opcode::kLogistic, v); break;
      case 4: v = b.Binary(Opcode::kMaximum, v, b.Unary(Opcode::kNegate, y)); break;
      case 5: v = b.Binary(Opcode::kDivide, v, b.Add(b.Unary(Opcode::kAbs, y), b.Constant(1, t, d))); break;
      case 6: v = b.Select(b.Compare(CompareDirection::kGt, v, y), v, b.Binary(Opcode::kSubtract, v, y)); break;
      case 7: v = b.Unary(Opcode::kSqrt, b.Add(b.Unary(Opcode::kAbs, v), b.Constant(0.5, t, d))); break;
      default: v = b.Binary(Opcode::kMinimum, b.Unary(Opcode::kExp, b.Unary(Opcode::kTanh, v)), y); break;
    }
  }
  return v;
}

TEST_F(FusedVsUnfused, ElementwiseChainOf100Ops) {
  const Dims d = {128, 260};  // past the autotuner's parallel threshold (2^15 points)
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, d), y = b.Parameter(1, proto::F32, d);
  b.Output(ElementwiseChain(b, x, y, 100, rng_));
  ExpectSameBitsInEveryConfiguration(*client_, b.module(),
                                     {MakeArray<float>(PrimitiveType::kF32, d, testing::RandomFloats(rng_, 128 * 260)),
                                      MakeArray<float>(PrimitiveType::kF32, d, testing::RandomFloats(rng_, 128 * 260))},
                                     "chain");
}

TEST_F(FusedVsUnfused, Bf16Chains) {
  // bf16 past the autotuner's parallel threshold; f16 (converted in software) smaller.
  for (const auto& [t, d] : {std::pair{proto::BF16, Dims{130, 260}}, std::pair{proto::F16, Dims{37, 53}}}) {
    ModuleBuilder b;
    const int64_t x = b.Parameter(0, t, d), y = b.Parameter(1, t, d);
    const int64_t chain = ElementwiseChain(b, x, y, 40, rng_);
    b.Output(chain);
    // Mixed precision: widen, compute in f32, narrow again, reduce in bf16.
    const int64_t wide = b.Unary(Opcode::kTanh, b.Convert(chain, proto::F32));
    const int64_t narrow = b.Convert(b.Mul(wide, b.Convert(y, proto::F32)), t);
    b.Output(narrow);
    b.Output(b.Reduce(Combiner::kSum, narrow, {1}));
    b.Output(b.Reduce(Combiner::kMax, b.Add(narrow, x), {0}));
    std::vector<uint16_t> vx(static_cast<size_t>(testing::NumElements(d))), vy(vx.size());
    for (size_t i = 0; i < vx.size(); ++i) {
      const float fx = std::uniform_real_distribution<float>(-3, 3)(rng_);
      const float fy = std::uniform_real_distribution<float>(-3, 3)(rng_);
      vx[i] = t == proto::BF16 ? RefToBf16(fx) : std::bit_cast<uint16_t>(static_cast<_Float16>(fx));
      vy[i] = t == proto::BF16 ? RefToBf16(fy) : std::bit_cast<uint16_t>(static_cast<_Float16>(fy));
    }
    const PrimitiveType pt = t == proto::BF16 ? PrimitiveType::kBF16 : PrimitiveType::kF16;
    ExpectSameBitsInEveryConfiguration(*client_, b.module(),
                                       {MakeArray<uint16_t>(pt, d, vx), MakeArray<uint16_t>(pt, d, vy)},
                                       proto::ElementType_Name(t) + " chain");
  }
}

// A widening conversion inside a loop computes nothing: its values are its argument's block. That block
// must then live as long as the conversion's values are read, past the argument's last direct reader
// (here the conversion itself), or the next value computed takes its register and c * d reads d * d.
TEST_F(FusedVsUnfused, WidenedValuesOutliveTheirArgumentsLastDirectUse) {
  const Dims d = {64, 300};
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::BF16, d);
  const int64_t c = b.Convert(b.Mul(x, x), proto::F32);
  b.Output(b.Mul(b.Add(c, b.Constant(1.5, proto::F32, d)), c));
  std::vector<uint16_t> vx(static_cast<size_t>(testing::NumElements(d)));
  for (uint16_t& v : vx) v = RefToBf16(std::uniform_real_distribution<float>(-3, 3)(rng_));
  ExpectSameBitsInEveryConfiguration(*client_, b.module(), {MakeArray<uint16_t>(PrimitiveType::kBF16, d, vx)},
                                     "widened");
}

// Random graphs over [r, c] values mixing elementwise ops, views, reductions broadcast back, slices
// concatenated into rotations, reshapes, dots and conversions.
proto::Module RandomGraph(std::mt19937_64& rng, int64_t r, int64_t c, int ops) {
  ModuleBuilder b("random");
  const Dims d = {r, c};
  std::vector<int64_t> pool = {b.Parameter(0, proto::F32, d), b.Parameter(1, proto::F32, d)};
  const auto pick = [&] { return pool[rng() % pool.size()]; };
  for (int i = 0; i < ops; ++i) {
    const int64_t x = pick(), y = pick();
    int64_t v = -1;
    switch (rng() % 14) {
      case 0: v = b.Unary(Opcode::kTanh, x); break;
      case 1: v = b.Add(x, y); break;
      case 2: v = b.Mul(x, y); break;
      case 3: v = b.Binary(Opcode::kMaximum, x, b.Unary(Opcode::kNegate, y)); break;
      case 4: v = b.Broadcast(b.Reduce(Combiner::kSum, x, {1}), d, {0}); break;
      case 5: v = b.Broadcast(b.Reduce(Combiner::kMax, x, {0}), d, {1}); break;
      case 6:  // rotate the columns by one: concatenate(x[:, 1:], x[:, :1])
        if (c >= 2) v = b.Concatenate({b.Slice(x, {0, 1}, {r, c}, {1, 1}), b.Slice(x, {0, 0}, {r, 1}, {1, 1})}, 1);
        break;
      case 7:
        if (r == c) v = b.Transpose(x, {1, 0});
        break;
      case 8:
        if (r == c) v = b.Dot(x, y, rng() % 2, rng() % 2);
        break;
      case 9: v = b.Transpose(b.Reshape(x, {c, r}), {1, 0}); break;  // a permutation of the elements
      case 10: v = b.Convert(b.Convert(x, proto::BF16), proto::F32); break;
      case 11: v = b.Add(x, b.Convert(b.Iota(proto::S32, d, rng() % 2, -3, 1), proto::F32)); break;
      case 12:
        v = b.Select(b.Compare(CompareDirection::kLt, x, y), b.Unary(Opcode::kExp, b.Unary(Opcode::kTanh, x)), y);
        break;
      default: v = b.Unary(Opcode::kLogistic, b.Binary(Opcode::kSubtract, x, b.Constant(0.5, proto::F32, d))); break;
    }
    if (v >= 0) pool.push_back(v);
  }
  b.Output(pool.back());
  // Intermediate values as results too: a value both read by later kernels and returned.
  for (int extra = static_cast<int>(rng() % 4); extra-- > 0;) b.Output(pick());
  b.Output(b.Reduce(Combiner::kSum, pick(), {0, 1}));
  return b.module();
}

TEST_F(FusedVsUnfused, RandomGraphs) {
  for (int it = 0; it < 150; ++it) {
    const int64_t r = 1 + static_cast<int64_t>(rng_() % (it % 2 ? 9 : 40));
    const int64_t c = it % 3 == 0 ? r : 1 + static_cast<int64_t>(rng_() % (it % 2 ? 9 : 40));
    const proto::Module m = RandomGraph(rng_, r, c, 4 + static_cast<int>(rng_() % 30));
    const Dims d = {r, c};
    ExpectSameBitsInEveryConfiguration(*client_, m,
                                       {MakeArray<float>(PrimitiveType::kF32, d, testing::RandomFloats(rng_, r * c)),
                                        MakeArray<float>(PrimitiveType::kF32, d, testing::RandomFloats(rng_, r * c))},
                                       absl::StrCat("random graph ", it, " ", testing::DimsText(d)),
                                       /*autotune_too=*/false);
    if (HasFailure()) {
      ADD_FAILURE() << m.DebugString();
      return;
    }
  }
}

TEST_F(FusedVsUnfused, SmallFusionLimitGivesSameBits) {
  // Programs cut into many kernels by a tiny step limit compute the same bits.
  const Dims d = {33, 17};
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, d), y = b.Parameter(1, proto::F32, d);
  b.Output(ElementwiseChain(b, x, y, 80, rng_));
  const std::vector<HostArray> args = {MakeArray<float>(PrimitiveType::kF32, d, testing::RandomFloats(rng_, 33 * 17)),
                                       MakeArray<float>(PrimitiveType::kF32, d, testing::RandomFloats(rng_, 33 * 17))};
  std::vector<std::vector<uint8_t>> results;
  for (int64_t steps : {1, 2, 5, 48, 1000}) {
    absl::StatusOr<std::vector<HostArray>> r = testing::CompileAndRun(
        *client_, b.module(), {.fusion = true, .autotune = false, .max_fusion_steps = steps}, args);
    ASSERT_TRUE(r.ok()) << steps << ": " << r.status();
    results.push_back((*r)[0].bytes);
  }
  for (size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[i], results[0]) << "limit index " << i;
}

}  // namespace kernels_test
}  // namespace lazyrt::pjrt
