#include "pjrt_sim/kernels/fused_program.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <iterator>
#include <optional>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "pjrt_sim/cpu_isa.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/hlo.h"
#include "pjrt_sim/kernels/prefetch.h"
#include "pjrt_sim/kernels/strided_view.h"
#include "pjrt_sim/module_verifier.h"
#include "pjrt_sim/vector_math.h"

namespace lazyrt::pjrt {

// What a step's loop needs besides its own description and its arguments' values.
struct FusedProgram::Context {
  std::span<const void* const> inputs;
  std::span<const int64_t> space_dims;
  int64_t begin, n;
};

namespace {

using Step = FusedProgram::Step;
using Access = Step::Access;
using Context = FusedProgram::Context;
using StepFn = FusedProgram::StepFn;

// Reads element `i` of an array of `type` as compute type T.
template <typename T>
T LoadAs(const void* base, PrimitiveType type, int64_t i) {
  switch (type) {
    case PrimitiveType::kF32: return static_cast<T>(static_cast<const float*>(base)[i]);
    case PrimitiveType::kF64: return static_cast<T>(static_cast<const double*>(base)[i]);
    case PrimitiveType::kBF16: return static_cast<T>(Bf16ToFloat(static_cast<const uint16_t*>(base)[i]));
    case PrimitiveType::kF16: return static_cast<T>(HalfToFloat(static_cast<const uint16_t*>(base)[i]));
    case PrimitiveType::kS32: return static_cast<T>(static_cast<const int32_t*>(base)[i]);
    case PrimitiveType::kS64: return static_cast<T>(static_cast<const int64_t*>(base)[i]);
    case PrimitiveType::kPred: return static_cast<T>(static_cast<const uint8_t*>(base)[i]);
  }
  return T{};
}

// Whether arrays of `type` hold exactly the compute type T (no conversion on load).
template <typename T>
bool Native(PrimitiveType type) {
  switch (type) {
    case PrimitiveType::kF32: return std::is_same_v<T, float>;
    case PrimitiveType::kF64: return std::is_same_v<T, double>;
    case PrimitiveType::kS32: return std::is_same_v<T, int32_t>;
    case PrimitiveType::kS64: return std::is_same_v<T, int64_t>;
    case PrimitiveType::kPred: return std::is_same_v<T, uint8_t>;
    case PrimitiveType::kBF16:
    case PrimitiveType::kF16: return false;
  }
  return false;
}

// Copies `run` elements at `index`, `index + stride`, ... into `out`.
template <typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE void LoadRun(const void* base, PrimitiveType type, int64_t index, int64_t stride,
                                           int64_t run, T* out) {
  if (Native<T>(type)) {
    const T* src = static_cast<const T*>(base) + index;
    if (stride == 1) {
      std::copy_n(src, run, out);
    } else if (stride == 0) {
      std::fill_n(out, run, *src);
    } else {
      for (int64_t j = 0; j < run; ++j) out[j] = src[j * stride];
    }
    return;
  }
  if (type == PrimitiveType::kBF16) {  // widened in a loop of its own, which vectorizes
    const uint16_t* src = static_cast<const uint16_t*>(base) + index;
    for (int64_t j = 0; j < run; ++j) out[j] = static_cast<T>(Bf16ToFloat(src[j * stride]));
    return;
  }
  for (int64_t j = 0; j < run; ++j) out[j] = LoadAs<T>(base, type, index + j * stride);
}

template <typename T>
void RunLoad(const Step& s, std::span<const int64_t> dims, const void* base, int64_t begin, int64_t n, T* out) {
  if (s.access == Access::kScalar) {
    std::fill_n(out, n, LoadAs<T>(base, s.type, s.offset));
    return;
  }
  if (s.access == Access::kContiguous) {
    LoadRun<T>(base, s.type, s.offset + begin, 1, n, out);
    return;
  }
  ForEachRun(dims, s.strides, s.offset, begin, n, [&](int64_t index, int64_t run, int64_t at) {
    LoadRun<T>(base, s.type, index, s.strides.back(), run, out + at);
  });
}

// --- The loop of each kind of step: what Evaluate calls, chosen once by Build ----------------------

template <typename T>
const T* Arg(const Step& s, const void* const* values, int a) {
  return static_cast<const T*>(values[s.args[a]]);
}

template <typename T>
const void* LoadStep(const Step& s, const void* const*, const Context& c, void* out) {
  const void* input = c.inputs[static_cast<size_t>(s.input)];
  if (s.in_place) return static_cast<const T*>(input) + s.offset + c.begin;
  RunLoad<T>(s, c.space_dims, input, c.begin, c.n, static_cast<T*>(out));
  return out;
}

template <typename T>
const void* ConstantStep(const Step& s, const void* const*, const Context& c, void* out) {
  std::fill_n(static_cast<T*>(out), c.n, SaturatingCast<T>(s.value));
  return out;
}

template <typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE const void* IotaStep(const Step& s, const void* const*, const Context& c, void* out) {
  T* o = static_cast<T*>(out);
  if (s.axis < 0) {
    std::fill_n(o, c.n, static_cast<T>(s.start));
    return out;
  }
  if (c.n == 0) return out;  // else the space has points: no dim is 0
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(s.axis) + 1; d < c.space_dims.size(); ++d) inner *= c.space_dims[d];
  const int64_t size = c.space_dims[static_cast<size_t>(s.axis)];
  // The point's coordinate along the axis, and its place in the run of `inner` points that share it,
  // divided out once a block (two divisions a point were most of a one_hot's loop). Then a run at a
  // time: along the last axis (inner 1) the values of coordinates up to the axis's end, a loop that
  // vectorizes; else `inner` copies of one value. A point at a time, counting and wrapping the coordinate,
  // it was a scalar loop of a few cycles a point (the GPT's cross-entropy gradient: [4096, 114]).
  int64_t coord = (c.begin / inner) % size, within = c.begin % inner;
  // Wrapping (unsigned) arithmetic: start and step come from the executable and may be anything. Copied:
  // stores through `o` could, for all the compiler knows, change the step's fields.
  const uint64_t start = static_cast<uint64_t>(s.start), step = static_cast<uint64_t>(s.step);
  const auto value = [start, step](int64_t at) {
    return static_cast<T>(static_cast<int64_t>(start + step * static_cast<uint64_t>(at)));
  };
  for (int64_t i = 0; i < c.n;) {
    if (inner == 1) {
      const int64_t run = std::min(c.n - i, size - coord);
      for (int64_t j = 0; j < run; ++j) o[i + j] = value(coord + j);
      i += run;
      coord += run;
      if (coord == size) coord = 0;
    } else {
      const int64_t run = std::min(c.n - i, inner - within);
      std::fill_n(o + i, run, value(coord));
      i += run;
      within += run;
      if (within == inner) {
        within = 0;
        if (++coord == size) coord = 0;
      }
    }
  }
  return out;
}

uint64_t Seed(const Step& s, const void* const* values) { return static_cast<uint64_t>(*Arg<int64_t>(s, values, 0)); }

template <typename T>
const void* UniformStep(const Step& s, const void* const* values, const Context& c, void* out) {
  // As many random bits as the stored type's significand holds (24 f32, 8 bf16, 11 f16, 53 f64):
  // exactly representable, so rounding to the type can never reach 1.
  const int kept = s.type == PrimitiveType::kBF16 ? 8 : (s.type == PrimitiveType::kF16 ? 11 : 24);
  const float scale = std::ldexp(1.0f, -kept);
  const uint64_t seed = Seed(s, values);
  T* o = static_cast<T*>(out);
  for (int64_t i = 0; i < c.n; ++i) {
    const uint64_t bits = RandomBits(seed, s.stream, static_cast<uint64_t>(c.begin + i));
    if constexpr (std::is_same_v<T, float>) {
      o[i] = static_cast<float>(bits >> (64 - kept)) * scale;
    } else {
      o[i] = static_cast<T>(UniformFromBits(bits));
    }
  }
  return out;
}

template <typename T>
const void* NormalStep(const Step& s, const void* const* values, const Context& c, void* out) {
  const uint64_t seed = Seed(s, values);
  T* o = static_cast<T*>(out);
  for (int64_t i = 0; i < c.n; ++i)
    o[i] = static_cast<T>(RandomNormal(seed, s.stream, static_cast<uint64_t>(c.begin + i)));
  return out;
}

// The opcode is a template argument: each loop is specialized and vectorized on its own, for the CPU's
// widest vectors (LAZYRT_VECTOR_CLONES; the baseline's 4 lanes made AdamW's divide and square root the
// MLP update's bound). Every width does the same IEEE operations on each element, so the CPU never
// changes a result. Loops count to a local `n`, not to c.n: a pred store (uint8_t) may alias anything, so
// c.n would be reloaded every iteration and the loop could not be vectorized.
// The f32 transcendental functions over a block, in vector_math's loops compiled for the CPU's widest
// vectors. Looked up by index: a function's address is no constant expression under the sanitizers.
using VectorLoop = void (*)(const float*, int64_t, float*);
constexpr Opcode kVectorLoopOpcodes[] = {Opcode::kExp, Opcode::kLog,  Opcode::kTanh,          Opcode::kLogistic,
                                         Opcode::kErf, Opcode::kGelu, Opcode::kGeluDerivative};
constexpr VectorLoop kVectorLoops[] = {&VectorExp, &VectorLog,  &VectorTanh,          &VectorLogistic,
                                       &VectorErf, &VectorGelu, &VectorGeluDerivative};
static_assert(std::size(kVectorLoopOpcodes) == std::size(kVectorLoops));
// The index of `op`'s loop in kVectorLoops, -1 when it has none.
constexpr int VectorLoopIndex(Opcode op) {
  for (size_t i = 0; i < std::size(kVectorLoopOpcodes); ++i) {
    if (kVectorLoopOpcodes[i] == op) return static_cast<int>(i);
  }
  return -1;
}

template <typename T, Opcode kOp>
LAZYRT_VECTOR_CLONES_TEMPLATE const void* UnaryStep(const Step& s, const void* const* values, const Context& c,
                                                    void* out) {
  const int64_t n = c.n;
  const T* x = Arg<T>(s, values, 0);
  T* o = static_cast<T*>(out);
  if constexpr (std::is_same_v<T, float> && VectorLoopIndex(kOp) >= 0) {
    kVectorLoops[VectorLoopIndex(kOp)](x, n, o);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = ApplyUnary<T>(kOp, x[i]);
  }
  return out;
}

// Which argument of a binary step is a uniform value held as one element (0: neither): the loop then
// reads it once instead of a block of copies of it.
enum ScalarArg : int { kNoScalarArg = 0, kFirstScalar = 1, kSecondScalar = 2 };

// A binary step: an arithmetic opcode (the result is a T) or a comparison direction (a pred). The
// scalar argument, if any, is read once.
template <typename T, auto kOp, int kScalar>
LAZYRT_VECTOR_CLONES_TEMPLATE const void* PairStep(const Step& s, const void* const* values, const Context& c,
                                                   void* out) {
  constexpr bool kCompare = std::is_same_v<decltype(kOp), CompareDirection>;
  using Out = std::conditional_t<kCompare, uint8_t, T>;
  const auto apply = [](T x, T y) -> Out {
    if constexpr (kCompare) {
      return ApplyCompare<T>(kOp, x, y);
    } else {
      return ApplyBinary<T>(kOp, x, y);
    }
  };
  const int64_t n = c.n;
  const T* a = Arg<T>(s, values, 0);
  const T* b = Arg<T>(s, values, 1);
  Out* o = static_cast<Out*>(out);
  if constexpr (kScalar == kFirstScalar) {
    const T x = a[0];
    for (int64_t i = 0; i < n; ++i) o[i] = apply(x, b[i]);
  } else if constexpr (kScalar == kSecondScalar) {
    const T y = b[0];
    for (int64_t i = 0; i < n; ++i) o[i] = apply(a[i], y);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = apply(a[i], b[i]);
  }
  return out;
}

template <typename T, auto kOp>
StepFn PairStepFor(int scalar) {
  switch (scalar) {
    case kFirstScalar: return &PairStep<T, kOp, kFirstScalar>;
    case kSecondScalar: return &PairStep<T, kOp, kSecondScalar>;
    default: return &PairStep<T, kOp, kNoScalarArg>;
  }
}

// Branch-free: a mask made from the predicate picks the bits of one argument. A branch per element
// mispredicts on data such as ReLU's mask (half true, at random) and costs ~3.5 ns per element; the
// masked blend vectorizes and gives the same bits.
template <typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE const void* SelectStep(const Step& s, const void* const* values, const Context& c,
                                                     void* out) {
  using Bits = std::conditional_t<sizeof(T) == 1, uint8_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
  static_assert(sizeof(Bits) == sizeof(T));
  const int64_t n = c.n;
  const uint8_t* p = Arg<uint8_t>(s, values, 0);
  const T* a = Arg<T>(s, values, 1);
  const T* b = Arg<T>(s, values, 2);
  T* o = static_cast<T*>(out);
  for (int64_t i = 0; i < n; ++i) {
    const Bits mask = static_cast<Bits>(Bits{0} - static_cast<Bits>(p[i] != 0));
    o[i] = std::bit_cast<T>(
        static_cast<Bits>((std::bit_cast<Bits>(a[i]) & mask) | (std::bit_cast<Bits>(b[i]) & static_cast<Bits>(~mask))));
  }
  return out;
}

template <typename To, typename From>
LAZYRT_VECTOR_CLONES_TEMPLATE void RunConvert(const From* x, int64_t n, To* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = SaturatingCast<To>(x[i]);
}

// A forwarding CONVERT's values: its argument's, where they are.
const void* ForwardStep(const Step& s, const void* const* values, const Context&, void*) { return values[s.args[0]]; }

template <typename To, typename From>
const void* ConvertStep(const Step& s, const void* const* values, const Context& c, void* out) {
  RunConvert<To, From>(Arg<From>(s, values, 0), c.n, static_cast<To*>(out));
  return out;
}

// The loop that computes `s` (`scalar`: which argument a binary step reads as one element). Build has
// checked the step's class and types, so every step has one.
StepFn ChooseStepFn(const Step& s, int scalar) {
  const ComputeType ct = ComputeTypeOf(s.type);
  if (s.load) return DispatchComputeType(ct, []<typename T>() -> StepFn { return &LoadStep<T>; });
  switch (s.opcode) {
    case Opcode::kConstant: return DispatchComputeType(ct, []<typename T>() -> StepFn { return &ConstantStep<T>; });
    case Opcode::kIota: return DispatchComputeType(ct, []<typename T>() -> StepFn { return &IotaStep<T>; });
    case Opcode::kRngUniform: return DispatchComputeType(ct, []<typename T>() -> StepFn { return &UniformStep<T>; });
    case Opcode::kRngNormal: return DispatchComputeType(ct, []<typename T>() -> StepFn { return &NormalStep<T>; });
    case Opcode::kSelect: return DispatchComputeType(ct, []<typename T>() -> StepFn { return &SelectStep<T>; });
    case Opcode::kConvert:
      return DispatchComputeType(ct, [&]<typename To>() {
        return DispatchComputeType(s.arg_type, []<typename From>() -> StepFn { return &ConvertStep<To, From>; });
      });
    case Opcode::kCompare:
      return DispatchComputeType(s.arg_type, [&]<typename T>() -> StepFn {
        switch (s.direction) {
#define LAZYRT_X(name, ...) \
  case CompareDirection::k##name: return PairStepFor<T, CompareDirection::k##name>(scalar);
          LAZYRT_COMPARE_DIRECTIONS(LAZYRT_X)
#undef LAZYRT_X
        }
        return nullptr;
      });
#define LAZYRT_X(name, ...) \
  case Opcode::k##name:     \
    return DispatchComputeType(ct, []<typename T>() -> StepFn { return &UnaryStep<T, Opcode::k##name>; });
      LAZYRT_UNARY_OPCODES(LAZYRT_X)
#undef LAZYRT_X
#define LAZYRT_X(name, ...) \
  case Opcode::k##name:     \
    return DispatchComputeType(ct, [&]<typename T>() -> StepFn { return PairStepFor<T, Opcode::k##name>(scalar); });
      LAZYRT_BINARY_OPCODES(LAZYRT_X)
#undef LAZYRT_X
    case Opcode::kParameter:
    case Opcode::kBroadcast:
    case Opcode::kReshape:
    case Opcode::kTranspose:
    case Opcode::kSlice:
    case Opcode::kConcatenate:
    case Opcode::kIndexSelect:
    case Opcode::kGather:
    case Opcode::kReduce:
    case Opcode::kArgmax:
    case Opcode::kDot:
    case Opcode::kAttention:
    case Opcode::kAttentionGrad:
    case Opcode::kLayerNorm:
    case Opcode::kRmsNorm:
    case Opcode::kLayerNormGrad:
    case Opcode::kRmsNormGrad:
    case Opcode::kCumsum:
    case Opcode::kArgsort:
    case Opcode::kScatterAdd:
    case Opcode::kIndexAdd: LAZYRT_COLLECTIVE_OPCODES(LAZYRT_CASE_OF_OPCODE) break;  // not steps: Build refuses them
  }
  return nullptr;
}

// Whether the CPU rounds f32 to bf16 itself (AVX512-BF16's VCVTNE2PS2BF16 and VCVTNEPS2BF16): to nearest
// even as FloatToBf16, but a NaN keeps its payload and a subnormal is flushed to zero. The native loops
// below give FloatToBf16's bits all the same: a vector holding either takes FloatToBf16, as does a tail.
#if defined(__x86_64__)
// The features the native loops are compiled for (LAZYRT_NATIVE_BF16).
bool NativeBf16() {
  static const bool has =
      HostHas("avx512_bf16") && HostHas("avx512f") && HostHas("avx512bw") && HostHas("avx512dq") && HostHas("avx512vl");
  return has;
}
#define LAZYRT_NATIVE_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
// VFPCLASSPS's classes: quiet NaN, signaling NaN, subnormal.
constexpr int kNanOrSubnormal = 0x01 | 0x80 | 0x20;

// dst[i] = FloatToBf16(x[i]) for i < n, 32 an instruction where the emulation took ten (the attention's
// bf16 probabilities and score gradients, every bf16 store of a loop).
LAZYRT_NATIVE_BF16 void NativeFloatsToBf16(const float* x, int64_t n, uint16_t* dst) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(x + i), hi = _mm512_loadu_ps(x + i + 16);
    if ((_mm512_fpclass_ps_mask(lo, kNanOrSubnormal) | _mm512_fpclass_ps_mask(hi, kNanOrSubnormal)) != 0) {
      for (int64_t k = i; k < i + 32; ++k) dst[k] = FloatToBf16(x[k]);
    } else {
      const __m512bh rounded = _mm512_cvtne2ps_pbh(hi, lo);
      std::memcpy(dst + i, &rounded, sizeof(rounded));
    }
  }
  for (; i < n; ++i) dst[i] = FloatToBf16(x[i]);
}

// f[i] = Bf16ToFloat(FloatToBf16(f[i])) for i < n, 16 at a time.
LAZYRT_NATIVE_BF16 void NativeRoundToBf16(float* f, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(f + i);
    if (_mm512_fpclass_ps_mask(x, kNanOrSubnormal) != 0) {
      for (int64_t k = i; k < i + 16; ++k) f[k] = Bf16ToFloat(FloatToBf16(f[k]));
    } else {
      using Bits16 = uint16_t __attribute__((vector_size(32)));
      using Bits32 = uint32_t __attribute__((vector_size(64)));
      const Bits32 widened = __builtin_convertvector((Bits16)_mm512_cvtneps_pbh(x), Bits32) << 16;
      std::memcpy(f + i, &widened, sizeof(widened));
    }
  }
  for (; i < n; ++i) f[i] = Bf16ToFloat(FloatToBf16(f[i]));
}
#undef LAZYRT_NATIVE_BF16
#endif

// Rounds f32 values to bf16/f16 and back, exactly as if they had been stored and loaded: fused and
// unfused programs give identical bits.
LAZYRT_VECTOR_CLONES void Round16(PrimitiveType type, float* f, int64_t n) {
  if (type == PrimitiveType::kBF16) {
#if defined(__x86_64__)
    if (NativeBf16()) return NativeRoundToBf16(f, n);
#endif
    for (int64_t k = 0; k < n; ++k) f[k] = Bf16ToFloat(FloatToBf16(f[k]));
  } else {
    for (int64_t k = 0; k < n; ++k) f[k] = HalfToFloat(FloatToHalf(f[k]));
  }
}

// Values rounded to bf16 or f16 (`to`) and stored as their bits.
template <typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE void Store16(PrimitiveType to, const T* x, int64_t n, uint16_t* dst) {
  if (to == PrimitiveType::kBF16) {
#if defined(__x86_64__)
    if constexpr (std::is_same_v<T, float>) {
      if (NativeBf16()) return NativeFloatsToBf16(x, n, dst);
    }
#endif
    for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBf16(static_cast<float>(x[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = FloatToHalf(static_cast<float>(x[i]));
  }
}

// Scratch layout: the value pointer of every step, the scalars (uniform values held as one element),
// then the registers, each a block of 8-byte elements (or as many as the space has, where fewer).
size_t RoundUp64(size_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

absl::StatusOr<FusedProgram> FusedProgram::Build(const google::protobuf::RepeatedPtrField<proto::Step>& steps,
                                                 std::span<const ArrayShape> inputs, const ArrayShape& space,
                                                 std::span<const int64_t> extra_roots, Stored stored) {
  FusedProgram program;
  program.space_dims_ = space.dims;
  program.space_numel_ = space.numel();
  // A register holds a block, or the whole space where that is smaller. At a block's 8 KiB each, the
  // GPT's gradient-norm sum (a scalar program of 97 steps, each held as a block for the stored result)
  // spread its scratch over 97 pages: 0.4-1.4 ms a step, where it took 6 us run again at once; its 128-point
  // optimizer loops took 25 us against 0.4 (benchmarks/RESULTS.md, session 41).
  program.register_bytes_ = RoundUp64(static_cast<size_t>(std::clamp<int64_t>(program.space_numel_, 1, kBlock)) * 8);
  const size_t rank = space.dims.size();
  if (steps.empty()) return absl::InvalidArgumentError("empty fused program");
  if (rank > 16) return absl::InvalidArgumentError("iteration space of rank > 16");
  if (!DimsInRange(space.dims)) return absl::InvalidArgumentError("iteration space with dimensions out of range");
  // A dim of one point is never stepped along: a load's stride for it counts as 0 whatever the executable
  // says, so that ForEachRun's walk past the last point cannot overflow on a huge one.
  const auto unstep_single_points = [&](std::vector<int64_t>& strides) {
    for (size_t d = 0; d < rank; ++d) {
      if (space.dims[d] == 1) strides[d] = 0;
    }
  };
  std::vector<int64_t> row_major(rank, 1);
  for (size_t d = rank; d-- > 1;) row_major[d - 1] = row_major[d] * space.dims[d];
  unstep_single_points(row_major);

  for (int i = 0; i < steps.size(); ++i) {
    const proto::Step& p = steps[i];
    Step s;
    auto fail = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat("fused program step ", i, ": ", what));
    };
    if (!proto::ElementType_IsValid(p.type())) return fail("invalid type");
    s.type = FromProto(p.type());
    s.load = p.load();
    if (s.load) {
      if (p.input() < 0 || p.input() >= static_cast<int64_t>(inputs.size())) return fail("input out of range");
      s.input = static_cast<int32_t>(p.input());
      const ArrayShape& in = inputs[static_cast<size_t>(s.input)];
      if (in.type != s.type) return fail("load type differs from the input's");
      if (static_cast<size_t>(p.strides_size()) != rank) return fail("a stride per iteration dim is needed");
      s.offset = p.offset();
      s.strides.assign(p.strides().begin(), p.strides().end());
      unstep_single_points(s.strides);
      if (!StridedViewInBounds(s.offset, s.strides, space.dims, in.numel()))
        return fail("load reaches outside its input");
      const bool scalar = std::all_of(s.strides.begin(), s.strides.end(), [](int64_t x) { return x == 0; });
      s.access = scalar ? Access::kScalar : (s.strides == row_major ? Access::kContiguous : Access::kStrided);
      if (s.access == Access::kStrided && rank == 0) s.access = Access::kScalar;
      program.steps_.push_back(std::move(s));
      continue;
    }
    const std::optional<Opcode> opcode = OpcodeFromNumber(p.opcode());
    if (!opcode.has_value()) return fail(absl::StrCat("invalid opcode ", p.opcode()));
    s.opcode = *opcode;
    int arity = 0;
    switch (ClassOf(s.opcode)) {
      case OpClass::kUnary:
      case OpClass::kConvert: arity = 1; break;
      case OpClass::kBinary:
      case OpClass::kCompare: arity = 2; break;
      case OpClass::kSelect: arity = 3; break;
      case OpClass::kGenerator:
        arity = s.opcode == Opcode::kRngUniform || s.opcode == Opcode::kRngNormal ? 1 : 0;  // RNG: the seed
        break;
      case OpClass::kParameter:
      case OpClass::kView:
      case OpClass::kReshape:
      case OpClass::kDataMovement:
      case OpClass::kReduce:
      case OpClass::kArgmax:
      case OpClass::kDot:
      case OpClass::kAttention:
      case OpClass::kNormalize:
      case OpClass::kAlongAxis:
      case OpClass::kScatter:
      case OpClass::kCollective: return fail(absl::StrCat("opcode ", OpcodeName(s.opcode), " cannot be fused"));
    }
    if (p.args_size() != arity) return fail("wrong number of arguments");
    for (int a = 0; a < arity; ++a) {
      if (p.args(a) < 0 || p.args(a) >= i) return fail("argument is not an earlier step");
      s.args[a] = static_cast<int32_t>(p.args(a));
    }
    const auto arg_type = [&](int a) { return program.steps_[static_cast<size_t>(s.args[a])].type; };
    if (arity > 0) s.arg_type = arg_type(0);
    if ((s.opcode == Opcode::kRngUniform || s.opcode == Opcode::kRngNormal)) {
      if (s.arg_type != PrimitiveType::kS64) return fail("the seed must be s64");
      if (ComputeTypeOf(s.type) != ComputeType::kF32 && ComputeTypeOf(s.type) != ComputeType::kF64) {
        return fail("random values must be floating");
      }
    } else if (s.opcode == Opcode::kCompare) {
      if (s.type != PrimitiveType::kPred || arg_type(1) != s.arg_type) return fail("bad compare types");
      const std::optional<CompareDirection> direction = CompareDirectionFromNumber(p.direction());
      if (!direction.has_value()) return fail("bad direction");
      s.direction = *direction;
    } else if (s.opcode == Opcode::kSelect) {
      if (s.arg_type != PrimitiveType::kPred || arg_type(1) != s.type || arg_type(2) != s.type) {
        return fail("bad select types");
      }
    } else if (s.opcode != Opcode::kConvert) {
      for (int a = 0; a < arity; ++a) {
        if (arg_type(a) != s.type) return fail("argument and result types differ");
      }
      if (!Accepts(TypeClassOf(s.opcode), s.type)) {
        return fail(absl::StrCat(OpcodeName(s.opcode), " is not defined on ", PrimitiveTypeName(s.type)));
      }
    }
    s.value = p.value();
    s.stream = static_cast<uint64_t>(p.stream());
    s.start = p.start();
    s.step = p.step();
    if (s.opcode == Opcode::kIota) {
      if (p.axis() < -1 || p.axis() >= static_cast<int64_t>(rank)) return fail("iota axis out of range");
      s.axis = static_cast<int32_t>(p.axis());
    }
    program.steps_.push_back(std::move(s));
  }
  program.roots_.push_back(steps.size() - 1);
  for (int64_t root : extra_roots) {
    if (root < 0 || root >= steps.size()) {
      return absl::InvalidArgumentError(absl::StrCat("extra result step ", root, " is not a step"));
    }
    program.roots_.push_back(static_cast<int32_t>(root));
  }
  program.Assign(stored);
  for (size_t i = 0; i < program.steps_.size(); ++i) {
    if (program.steps_[i].fn == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("fused program step ", i, ": no loop computes it"));
    }
  }
  return program;
}

void FusedProgram::Assign(Stored stored) {
  const size_t n = steps_.size();
  std::vector<int> arity(n, 0);
  std::vector<size_t> last_use(n, 0);  // 0: no step reads it (a reader comes after what it reads)
  for (size_t i = 0; i < n; ++i) {
    Step& s = steps_[i];
    arity[i] = s.load || s.opcode == Opcode::kConstant || s.opcode == Opcode::kIota ? 0
               : s.opcode == Opcode::kSelect                                        ? 3
               : IsBinary(s.opcode) || s.opcode == Opcode::kCompare                 ? 2
                                                                                    : 1;
    const bool varies = s.load ? s.access != Access::kScalar
                               : s.opcode == Opcode::kRngUniform || s.opcode == Opcode::kRngNormal ||
                                     (s.opcode == Opcode::kIota && s.axis >= 0);
    s.uniform = !varies;
    for (int a = 0; a < arity[i]; ++a) {
      s.uniform = s.uniform && steps_[static_cast<size_t>(s.args[a])].uniform;
      last_use[static_cast<size_t>(s.args[a])] = i;
    }
    s.in_place = s.load && s.access == Access::kContiguous &&
                 DispatchComputeType((s.type), [&]<typename T>() { return Native<T>(s.type); });
    s.round16 = !s.load && Is16BitFloat(s.type);
  }
  for (size_t r = stored == Stored::kAllResults ? 0 : 1; r < roots_.size(); ++r) {
    // Stored, a result is rounded by its store: rounding it before too was a pass for nothing (and a
    // reduction's bf16 extra result of an f32 value, no longer rounded, is that value: it forwards).
    const size_t root = static_cast<size_t>(roots_[r]);
    const bool reduced = stored == Stored::kExtraResults && roots_[r] == roots_[0];
    if (last_use[root] == 0 && !reduced) steps_[root].round16 = false;
  }
  for (int32_t root : roots_) last_use[static_cast<size_t>(root)] = n;  // results outlive the program
  for (Step& s : steps_) {
    // Within one compute type a conversion is the identity (a bf16 value is held as the f32 it is), and
    // copying a block for it cost as much as the loop's real work. Pred is left out: its conversion
    // makes any nonzero 1.
    s.forwards = !s.load && !s.uniform && s.opcode == Opcode::kConvert && !s.round16 &&
                 ComputeTypeOf(s.type) == ComputeTypeOf(s.arg_type) && ComputeTypeOf(s.type) != ComputeType::kPred;
  }
  // A forwarding step's argument lives as long as the step's own values are read (later steps first:
  // a forward of a forward extends the first argument too).
  for (size_t i = n; i-- > 0;) {
    if (!steps_[i].forwards) continue;
    const size_t arg = static_cast<size_t>(steps_[i].args[0]);
    last_use[arg] = std::max(last_use[arg], last_use[i]);
  }
  // A uniform value is held as one element, unless something reads it a block at a time: a result
  // (stored a block at a time), a select's argument, or an argument of a uniform value held as a block.
  std::vector<bool> as_block(n, false);
  for (int32_t root : roots_) as_block[static_cast<size_t>(root)] = true;
  for (size_t i = n; i-- > 0;) {
    const Step& s = steps_[i];
    const bool reads_blocks = s.uniform ? as_block[i] : s.opcode == Opcode::kSelect;
    for (int a = 0; a < arity[i] && reads_blocks; ++a) as_block[static_cast<size_t>(s.args[a])] = true;
  }
  for (size_t i = 0; i < n; ++i) {
    Step& s = steps_[i];
    s.scalar = s.uniform && !as_block[i];
    int scalar_arg = kNoScalarArg;
    if (!s.uniform && arity[i] == 2) {
      if (steps_[static_cast<size_t>(s.args[0])].scalar) scalar_arg = kFirstScalar;
      if (steps_[static_cast<size_t>(s.args[1])].scalar) scalar_arg = kSecondScalar;
    }
    s.fn = s.forwards ? &ForwardStep : ChooseStepFn(s, scalar_arg);
  }
  // Registers: uniform blocks keep theirs for the whole run; a per-block value's register is free
  // again after the last step that reads it (never before its own step has written: no aliasing).
  std::vector<int32_t> free;
  std::vector<std::vector<int32_t>> freed_after(n + 1);
  for (size_t i = 0; i < n; ++i) {
    Step& s = steps_[i];
    if (s.scalar) {
      s.reg = scalars_++;
    } else if (!s.in_place && !s.forwards) {
      if (s.uniform || free.empty()) {
        s.reg = registers_++;
      } else {
        s.reg = free.back();
        free.pop_back();
      }
      if (!s.uniform) freed_after[last_use[i]].push_back(s.reg);
    }
    if (!s.uniform) per_block_.push_back(static_cast<int32_t>(i));
    free.insert(free.end(), freed_after[i].begin(), freed_after[i].end());
  }
  // A step named by several results computes into the last one's destination: a reduction's value that
  // is also an extra result (a gradient stored and summed) gets no destination as result 0.
  for (size_t r = roots_.size(); r-- > 0;) {
    Step& s = steps_[static_cast<size_t>(roots_[r])];
    if (s.result < 0 && !s.uniform && s.reg >= 0 && !s.round16) s.result = static_cast<int32_t>(r);
  }
}

size_t FusedProgram::scratch_bytes() const {
  return RoundUp64(steps_.size() * sizeof(void*)) + RoundUp64(static_cast<size_t>(scalars_) * 8) +
         static_cast<size_t>(registers_) * register_bytes_;
}

char* FusedProgram::Registers(void* scratch) const {
  return static_cast<char*>(scratch) + RoundUp64(steps_.size() * sizeof(void*)) +
         RoundUp64(static_cast<size_t>(scalars_) * 8);
}

void FusedProgram::Prepare(std::span<const void* const> inputs, void* scratch) const {
  if (space_numel_ == 0) return;  // nothing to evaluate, and scalar loads may have nothing to read
  const void** values = static_cast<const void**>(scratch);
  char* scalars = static_cast<char*>(scratch) + RoundUp64(steps_.size() * sizeof(void*));
  char* registers = Registers(scratch);
  for (const Step& s : steps_) {
    if (!s.uniform) continue;
    // A whole register where blocks read it, but no more points than the space has: a loop over one point
    // (a scalar, [1]) computed 1024 a step: 5 us a kernel of 50 steps, now 0.3-0.4.
    const int64_t n = s.scalar ? 1 : std::min(kBlock, space_numel_);
    void* out =
        s.scalar ? scalars + static_cast<size_t>(s.reg) * 8 : registers + static_cast<size_t>(s.reg) * register_bytes_;
    values[&s - steps_.data()] = s.fn(s, values, Context{inputs, space_dims_, 0, n}, out);
    if (s.round16) Round16(s.type, static_cast<float*>(out), n);
  }
}

int64_t FusedProgram::prefetched_bytes_per_point() const {
  int64_t bytes = 0;
  for (int32_t i : per_block_) {
    const Step& s = steps_[static_cast<size_t>(i)];
    if (s.load && s.access == Access::kContiguous) bytes += ByteWidth(s.type);
  }
  return bytes;
}

void FusedProgram::Prefetch(std::span<const void* const> inputs, int64_t begin, int64_t n) const {
  for (int32_t i : per_block_) {
    const Step& s = steps_[static_cast<size_t>(i)];
    if (!s.load || s.access != Access::kContiguous) continue;
    const int64_t bytes = ByteWidth(s.type);
    PrefetchToRead(static_cast<const char*>(inputs[static_cast<size_t>(s.input)]) + (s.offset + begin) * bytes,
                   n * bytes);
  }
}

const void* FusedProgram::ResultBlock(const void* scratch, size_t r) const {
  return static_cast<const void* const*>(scratch)[roots_[r]];
}

const void* FusedProgram::Evaluate(std::span<const void* const> inputs, int64_t begin, int64_t n, void* scratch,
                                   std::span<void* const> result_dsts) const {
  const void** values = static_cast<const void**>(scratch);
  char* registers = Registers(scratch);
  const Context context{inputs, space_dims_, begin, n};
  for (int32_t i : per_block_) {
    const Step& s = steps_[static_cast<size_t>(i)];
    void* out = s.reg < 0 ? nullptr : registers + static_cast<size_t>(s.reg) * register_bytes_;
    const size_t result = static_cast<size_t>(s.result);
    if (s.result >= 0 && result < result_dsts.size() && result_dsts[result] != nullptr) out = result_dsts[result];
    values[i] = s.fn(s, values, context, out);
    if (s.round16) Round16(s.type, static_cast<float*>(out), n);
  }
  return values[steps_.size() - 1];
}

void StoreBlock(const void* block, ComputeType from, PrimitiveType to, void* dst, int64_t n) {
  DispatchComputeType(from, [&]<typename T>() {
    const T* x = static_cast<const T*>(block);
    switch (to) {
      case PrimitiveType::kF32: RunConvert<float, T>(x, n, static_cast<float*>(dst)); break;
      case PrimitiveType::kF64: RunConvert<double, T>(x, n, static_cast<double*>(dst)); break;
      case PrimitiveType::kS32: RunConvert<int32_t, T>(x, n, static_cast<int32_t*>(dst)); break;
      case PrimitiveType::kS64: RunConvert<int64_t, T>(x, n, static_cast<int64_t*>(dst)); break;
      case PrimitiveType::kPred: RunConvert<uint8_t, T>(x, n, static_cast<uint8_t*>(dst)); break;
      case PrimitiveType::kBF16:
      case PrimitiveType::kF16: Store16<T>(to, x, n, static_cast<uint16_t*>(dst)); break;
    }
  });
}

}  // namespace lazyrt::pjrt
