#include "pjrt_sim/kernels/fused_program.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/hlo.h"

namespace lazyrt::pjrt {

ComputeType ComputeTypeOf(PrimitiveType type) {
  switch (type) {
    case PrimitiveType::kF64: return ComputeType::kF64;
    case PrimitiveType::kS32: return ComputeType::kS32;
    case PrimitiveType::kS64: return ComputeType::kS64;
    case PrimitiveType::kPred: return ComputeType::kPred;
    default: return ComputeType::kF32;
  }
}

namespace {

using Step = FusedProgram::CompiledStep;
using Access = Step::Access;

// Calls f.template operator()<T>() with T the C++ type of compute type `t`.
template <typename F>
decltype(auto) Dispatch(ComputeType t, F&& f) {
  switch (t) {
    case ComputeType::kF64: return f.template operator()<double>();
    case ComputeType::kS32: return f.template operator()<int32_t>();
    case ComputeType::kS64: return f.template operator()<int64_t>();
    case ComputeType::kPred: return f.template operator()<uint8_t>();
    case ComputeType::kF32: break;
  }
  return f.template operator()<float>();
}

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

// Coordinates of linear point `p` in `dims` (row-major).
void Unravel(int64_t p, std::span<const int64_t> dims, int64_t* coords) {
  for (size_t d = dims.size(); d-- > 0;) {
    coords[d] = dims[d] == 0 ? 0 : p % dims[d];
    p = dims[d] == 0 ? 0 : p / dims[d];
  }
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
    default: return false;
  }
}

// Copies `run` elements at `index`, `index + stride`, ... into `out`.
template <typename T>
void LoadRun(const void* base, PrimitiveType type, int64_t index, int64_t stride, int64_t run, T* out) {
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
  for (int64_t j = 0; j < run; ++j) out[j] = LoadAs<T>(base, type, index + j * stride);
}

template <typename T>
void RunLoad(const Step& s, std::span<const int64_t> dims, const void* base, int64_t begin, int64_t n, T* out) {
  if (s.access == Step::Access::kScalar) {
    std::fill_n(out, n, LoadAs<T>(base, s.type, s.offset));
    return;
  }
  if (s.access == Step::Access::kContiguous) {
    LoadRun<T>(base, s.type, s.offset + begin, 1, n, out);
    return;
  }
  // Strided: walk the coordinates of the block like an odometer, a run of the innermost dim at a time.
  const size_t rank = dims.size();
  int64_t coords[16];
  Unravel(begin, dims, coords);
  int64_t index = s.offset;
  for (size_t d = 0; d < rank; ++d) index += coords[d] * s.strides[d];
  const int64_t inner_dim = dims[rank - 1], inner_stride = s.strides[rank - 1];
  int64_t i = 0;
  while (i < n) {
    const int64_t run = std::min(n - i, inner_dim - coords[rank - 1]);
    LoadRun<T>(base, s.type, index, inner_stride, run, out + i);
    i += run;
    index += run * inner_stride;
    coords[rank - 1] += run;
    for (size_t d = rank - 1; d > 0 && coords[d] == dims[d]; --d) {  // carry
      index -= coords[d] * s.strides[d];
      coords[d] = 0;
      ++coords[d - 1];
      index += s.strides[d - 1];
    }
  }
}

template <typename T>
void RunGenerator(const Step& s, std::span<const int64_t> dims, uint64_t seed, int64_t begin, int64_t n, T* out) {
  switch (s.opcode) {
    case proto::CONSTANT:
      std::fill_n(out, n, SaturatingCast<T>(s.value));
      return;
    case proto::IOTA: {
      if (s.axis < 0) {
        std::fill_n(out, n, static_cast<T>(s.start));
        return;
      }
      int64_t inner = 1;
      for (size_t d = static_cast<size_t>(s.axis) + 1; d < dims.size(); ++d) inner *= dims[d];
      const int64_t size = dims[static_cast<size_t>(s.axis)];
      for (int64_t i = 0; i < n; ++i) {
        // Wrapping (unsigned) arithmetic: start and step come from the executable and may be anything.
        const uint64_t coord = static_cast<uint64_t>(((begin + i) / inner) % size);
        out[i] = static_cast<T>(static_cast<int64_t>(static_cast<uint64_t>(s.start) + static_cast<uint64_t>(s.step) * coord));
      }
      return;
    }
    case proto::RNG_UNIFORM: {
      // As many random bits as the stored type's significand holds (24 f32, 8 bf16, 11 f16, 53 f64):
      // exactly representable, so rounding to the type can never reach 1.
      const int kept = s.type == PrimitiveType::kBF16 ? 8 : (s.type == PrimitiveType::kF16 ? 11 : 24);
      const float scale = std::ldexp(1.0f, -kept);
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t bits = RandomBits(seed, s.stream, static_cast<uint64_t>(begin + i));
        if constexpr (std::is_same_v<T, float>) {
          out[i] = static_cast<float>(bits >> (64 - kept)) * scale;
        } else {
          out[i] = static_cast<T>(UniformFromBits(bits));
        }
      }
      return;
    }
    case proto::RNG_NORMAL:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(RandomNormal(seed, s.stream, static_cast<uint64_t>(begin + i)));
      return;
    default: return;
  }
}

#define LAZYRT_UNARY_CASE(OP) \
  case proto::OP:             \
    for (int64_t i = 0; i < n; ++i) out[i] = ApplyUnary<T>(proto::OP, x[i]); \
    return;

template <typename T>
void RunUnary(proto::Opcode op, const T* x, int64_t n, T* out) {
  switch (op) {
    LAZYRT_UNARY_CASE(NEGATE)
    LAZYRT_UNARY_CASE(ABS)
    LAZYRT_UNARY_CASE(EXP)
    LAZYRT_UNARY_CASE(LOG)
    LAZYRT_UNARY_CASE(SQRT)
    LAZYRT_UNARY_CASE(RSQRT)
    LAZYRT_UNARY_CASE(TANH)
    LAZYRT_UNARY_CASE(LOGISTIC)
    LAZYRT_UNARY_CASE(SIGN)
    LAZYRT_UNARY_CASE(NOT)
    default: std::copy_n(x, n, out);
  }
}
#undef LAZYRT_UNARY_CASE

#define LAZYRT_BINARY_CASE(OP) \
  case proto::OP:              \
    for (int64_t i = 0; i < n; ++i) out[i] = ApplyBinary<T>(proto::OP, a[i], b[i]); \
    return;

template <typename T>
void RunBinary(proto::Opcode op, const T* a, const T* b, int64_t n, T* out) {
  switch (op) {
    LAZYRT_BINARY_CASE(ADD)
    LAZYRT_BINARY_CASE(SUBTRACT)
    LAZYRT_BINARY_CASE(MULTIPLY)
    LAZYRT_BINARY_CASE(DIVIDE)
    LAZYRT_BINARY_CASE(POWER)
    LAZYRT_BINARY_CASE(MAXIMUM)
    LAZYRT_BINARY_CASE(MINIMUM)
    LAZYRT_BINARY_CASE(AND)
    LAZYRT_BINARY_CASE(OR)
    default: std::copy_n(a, n, out);
  }
}
#undef LAZYRT_BINARY_CASE

template <typename T>
void RunCompare(proto::CompareDirection dir, const T* a, const T* b, int64_t n, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ApplyCompare<T>(dir, a[i], b[i]);
}

template <typename To, typename From>
void RunConvert(const From* x, int64_t n, To* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = SaturatingCast<To>(x[i]);
}

template <typename To>
void RunConvertFrom(ComputeType from, const void* x, int64_t n, To* out) {
  Dispatch(from, [&]<typename From>() { RunConvert<To, From>(static_cast<const From*>(x), n, out); });
}

}  // namespace

absl::StatusOr<FusedProgram> FusedProgram::Build(const google::protobuf::RepeatedPtrField<proto::Step>& steps,
                                                 std::span<const ArrayShape> inputs, const ArrayShape& space) {
  FusedProgram program;
  program.space_dims_ = space.dims;
  const size_t rank = space.dims.size();
  if (steps.empty()) return absl::InvalidArgumentError("empty fused program");
  if (rank > 16) return absl::InvalidArgumentError("iteration space of rank > 16");
  for (int64_t d : space.dims) {
    if (d < 0) return absl::InvalidArgumentError("iteration space with a negative dimension");
  }
  std::vector<int64_t> row_major(rank, 1);
  for (size_t d = rank; d-- > 1;) row_major[d - 1] = row_major[d] * space.dims[d];

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
      // Bounds: the smallest and largest index reached over the whole space must be inside the input.
      // Overflow-checked: huge strides must not wrap around to an index that looks in range.
      if (space.numel() > 0) {
        int64_t lo = s.offset, hi = s.offset;
        bool overflow = false;
        for (size_t d = 0; d < rank; ++d) {
          int64_t reach = 0;
          overflow = overflow || __builtin_mul_overflow(s.strides[d], space.dims[d] - 1, &reach);
          int64_t& end = reach < 0 ? lo : hi;
          overflow = overflow || __builtin_add_overflow(end, reach, &end);
        }
        if (overflow || lo < 0 || hi >= in.numel()) return fail("load reaches outside its input");
      }
      const bool scalar = std::all_of(s.strides.begin(), s.strides.end(), [](int64_t x) { return x == 0; });
      s.access = scalar ? Access::kScalar
                        : (s.strides == row_major ? Access::kContiguous : Access::kStrided);
      if (s.access == Access::kStrided && rank == 0) s.access = Access::kScalar;
      program.steps_.push_back(std::move(s));
      continue;
    }
    s.opcode = p.opcode();
    if (!proto::Opcode_IsValid(s.opcode)) return fail("invalid opcode");
    int arity = 0;
    if (IsUnary(s.opcode)) {
      arity = 1;
    } else if (IsBinary(s.opcode)) {
      arity = 2;
    } else if (s.opcode == proto::SELECT) {
      arity = 3;
    } else if (s.opcode == proto::RNG_UNIFORM || s.opcode == proto::RNG_NORMAL) {
      arity = 1;  // the seed
    } else if (s.opcode != proto::CONSTANT && s.opcode != proto::IOTA) {
      return fail(absl::StrCat("opcode ", OpcodeName(s.opcode), " cannot be fused"));
    }
    if (p.args_size() != arity) return fail("wrong number of arguments");
    for (int a = 0; a < arity; ++a) {
      if (p.args(a) < 0 || p.args(a) >= i) return fail("argument is not an earlier step");
      s.args[a] = static_cast<int32_t>(p.args(a));
    }
    const auto arg_type = [&](int a) { return program.steps_[static_cast<size_t>(s.args[a])].type; };
    if (arity > 0) s.arg_type = arg_type(0);
    if ((s.opcode == proto::RNG_UNIFORM || s.opcode == proto::RNG_NORMAL)) {
      if (s.arg_type != PrimitiveType::kS64) return fail("the seed must be s64");
      if (ComputeTypeOf(s.type) != ComputeType::kF32 && ComputeTypeOf(s.type) != ComputeType::kF64) {
        return fail("random values must be floating");
      }
    } else if (s.opcode == proto::COMPARE) {
      if (s.type != PrimitiveType::kPred || arg_type(1) != s.arg_type) return fail("bad compare types");
      if (!proto::CompareDirection_IsValid(p.direction())) return fail("bad direction");
    } else if (s.opcode == proto::SELECT) {
      if (s.arg_type != PrimitiveType::kPred || arg_type(1) != s.type || arg_type(2) != s.type) {
        return fail("bad select types");
      }
    } else if (s.opcode != proto::CONVERT) {
      for (int a = 0; a < arity; ++a) {
        if (arg_type(a) != s.type) return fail("argument and result types differ");
      }
    }
    s.value = p.value();
    s.direction = p.direction();
    s.stream = static_cast<uint64_t>(p.stream());
    s.start = p.start();
    s.step = p.step();
    if (s.opcode == proto::IOTA) {
      if (p.axis() < -1 || p.axis() >= static_cast<int64_t>(rank)) return fail("iota axis out of range");
      s.axis = static_cast<int32_t>(p.axis());
    }
    program.steps_.push_back(std::move(s));
  }
  program.result_type_ = program.steps_.back().type;
  return program;
}

const void* FusedProgram::Evaluate(std::span<const void* const> inputs, int64_t begin, int64_t n,
                                   void* scratch) const {
  auto reg = [scratch](size_t i) { return static_cast<char*>(scratch) + i * kBlock * 8; };
  // Where each step's values are: its register, or (for a contiguous load needing no conversion) the
  // input itself, read in place rather than copied.
  absl::InlinedVector<const void*, 64> values(steps_.size());
  auto at = [&values](int32_t step) { return values[static_cast<size_t>(step)]; };
  uint64_t seed = 0;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& s = steps_[i];
    void* out = reg(i);
    values[i] = out;
    const ComputeType ct = ComputeTypeOf(s.type);
    // A bf16/f16 result is rounded to its type at once, exactly as if it had been stored and loaded:
    // fused and unfused programs give identical bits.
    const bool round16 = !s.load && (s.type == PrimitiveType::kBF16 || s.type == PrimitiveType::kF16);
    if (s.load) {
      const void* input = inputs[static_cast<size_t>(s.input)];
      Dispatch(ct, [&]<typename T>() {
        if (s.access == Access::kContiguous && Native<T>(s.type)) {
          values[i] = static_cast<const T*>(input) + s.offset + begin;
        } else {
          RunLoad<T>(s, space_dims_, input, begin, n, static_cast<T*>(out));
        }
      });
      continue;
    }
    switch (s.opcode) {
      case proto::CONSTANT:
      case proto::IOTA:
      case proto::RNG_UNIFORM:
      case proto::RNG_NORMAL:
        if (s.opcode == proto::RNG_UNIFORM || s.opcode == proto::RNG_NORMAL) {
          seed = static_cast<uint64_t>(*reinterpret_cast<const int64_t*>(at(s.args[0])));
        }
        Dispatch(ct, [&]<typename T>() { RunGenerator<T>(s, space_dims_, seed, begin, n, static_cast<T*>(out)); });
        break;
      case proto::CONVERT:
        Dispatch(ct, [&]<typename T>() { RunConvertFrom<T>(ComputeTypeOf(s.arg_type), at(s.args[0]), n, static_cast<T*>(out)); });
        break;
      case proto::COMPARE:
        Dispatch(ComputeTypeOf(s.arg_type), [&]<typename T>() {
          RunCompare<T>(s.direction, reinterpret_cast<const T*>(at(s.args[0])),
                        reinterpret_cast<const T*>(at(s.args[1])), n, static_cast<uint8_t*>(out));
        });
        break;
      case proto::SELECT:
        Dispatch(ct, [&]<typename T>() {
          const uint8_t* c = reinterpret_cast<const uint8_t*>(at(s.args[0]));
          const T* a = reinterpret_cast<const T*>(at(s.args[1]));
          const T* b = reinterpret_cast<const T*>(at(s.args[2]));
          T* o = static_cast<T*>(out);
          for (int64_t k = 0; k < n; ++k) o[k] = c[k] ? a[k] : b[k];
        });
        break;
      default:
        if (IsUnary(s.opcode)) {
          Dispatch(ct, [&]<typename T>() { RunUnary<T>(s.opcode, reinterpret_cast<const T*>(at(s.args[0])), n, static_cast<T*>(out)); });
        } else {
          Dispatch(ct, [&]<typename T>() {
            RunBinary<T>(s.opcode, reinterpret_cast<const T*>(at(s.args[0])),
                         reinterpret_cast<const T*>(at(s.args[1])), n, static_cast<T*>(out));
          });
        }
    }
    if (round16) {
      float* f = static_cast<float*>(out);
      for (int64_t k = 0; k < n; ++k) {
        f[k] = s.type == PrimitiveType::kBF16 ? Bf16ToFloat(FloatToBf16(f[k])) : HalfToFloat(FloatToHalf(f[k]));
      }
    }
  }
  return values.back();
}

void StoreBlock(const void* block, ComputeType from, PrimitiveType to, void* dst, int64_t n) {
  Dispatch(from, [&]<typename T>() {
    const T* x = static_cast<const T*>(block);
    switch (to) {
      case PrimitiveType::kF32: RunConvert<float, T>(x, n, static_cast<float*>(dst)); break;
      case PrimitiveType::kF64: RunConvert<double, T>(x, n, static_cast<double*>(dst)); break;
      case PrimitiveType::kS32: RunConvert<int32_t, T>(x, n, static_cast<int32_t*>(dst)); break;
      case PrimitiveType::kS64: RunConvert<int64_t, T>(x, n, static_cast<int64_t*>(dst)); break;
      case PrimitiveType::kPred: RunConvert<uint8_t, T>(x, n, static_cast<uint8_t*>(dst)); break;
      case PrimitiveType::kBF16:
        for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = FloatToBf16(static_cast<float>(x[i]));
        break;
      case PrimitiveType::kF16:
        for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = FloatToHalf(static_cast<float>(x[i]));
        break;
    }
  });
}

}  // namespace lazyrt::pjrt
