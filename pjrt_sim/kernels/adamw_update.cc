#include "pjrt_sim/kernels/adamw_update.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "pjrt_sim/kernels/chunks.h"
#include "pjrt_sim/kernels/thread_scratch.h"
#include "pjrt_sim/opcode.h"
#include "pjrt_sim/vector_math.h"

namespace lazyrt::pjrt {
namespace {

// Reads a fused program as the dataflow of an AdamW update, from its result steps down.
class Matcher {
 public:
  explicit Matcher(const FusedProgram& program) : steps_(program.steps()), roots_(program.roots()) {}

  std::optional<AdamWUpdateLoop> Match() const {
    if (roots_.size() > 3) return std::nullopt;
    // root: decayed - step / denom
    const std::optional<Args> root = Op(roots_[0], Opcode::kSubtract);
    if (!root) return std::nullopt;
    AdamWUpdateLoop loop;
    if (const std::optional<int64_t> p = Contiguous(root->a)) {
      loop.param = *p;
    } else if (!OneArrayOneUniform(root->a, &loop.param, &loop.decay)) {
      return std::nullopt;
    }
    const std::optional<Args> quotient = Op(root->b, Opcode::kDivide);
    if (!quotient) return std::nullopt;
    // step = m * step_size
    int32_t m_step = -1;
    if (!StepTimesUniform(quotient->a, &m_step, &loop.step_size)) return std::nullopt;
    // denom = sqrt(v) / correction + eps
    const std::optional<Args> denom = Op(quotient->b, Opcode::kAdd);
    if (!denom) return std::nullopt;
    int32_t scaled = -1;
    if (!StepPlusUniform(denom->a, denom->b, &scaled, &loop.eps)) return std::nullopt;
    const std::optional<Args> divided = Op(scaled, Opcode::kDivide);
    if (!divided || !Uniform(divided->b, &loop.correction)) return std::nullopt;
    const std::optional<Args> root_of_v = Op(divided->a, Opcode::kSqrt);
    if (!root_of_v) return std::nullopt;
    if (!Moment(m_step, &loop.m) || !Moment(root_of_v->a, &loop.v)) return std::nullopt;
    // Every result is the parameter or a moment the loop computes, each once.
    const size_t computed = (loop.m.result >= 0) + (loop.v.result >= 0);
    if (computed + 1 != roots_.size() || (computed == 2 && loop.m.result == loop.v.result)) return std::nullopt;
    return loop;
  }

 private:
  using Step = FusedProgram::Step;
  struct Args {
    int32_t a = -1, b = -1;
  };

  // The arguments of step i if it is `op` on f32 values (unary: a only).
  std::optional<Args> Op(int32_t i, Opcode op) const {
    const Step& s = steps_[static_cast<size_t>(i)];
    if (s.load || s.opcode != op || s.type != PrimitiveType::kF32) return std::nullopt;
    return Args{s.args[0], ClassOf(op) == OpClass::kUnary ? -1 : s.args[1]};
  }

  // The input step i loads in the iteration space's order from element 0 (point k at element k).
  std::optional<int64_t> Contiguous(int32_t i) const {
    const Step& s = steps_[static_cast<size_t>(i)];
    if (!s.load || s.access != Step::Access::kContiguous || s.offset != 0 || s.type != PrimitiveType::kF32)
      return std::nullopt;
    return s.input;
  }

  // Whether step i is an f32 value the same at every point: u = i.
  bool Uniform(int32_t i, int32_t* u) const {
    const Step& s = steps_[static_cast<size_t>(i)];
    if (!s.uniform || s.type != PrimitiveType::kF32) return false;
    *u = i;
    return true;
  }

  // Step i = x * u, either order, with x an array read contiguously and u uniform.
  bool OneArrayOneUniform(int32_t i, int64_t* array, int32_t* u) const {
    const std::optional<Args> mul = Op(i, Opcode::kMultiply);
    if (!mul) return false;
    for (const auto& [x, y] : {std::pair{mul->a, mul->b}, std::pair{mul->b, mul->a}}) {
      if (const std::optional<int64_t> in = Contiguous(x); in && Uniform(y, u)) {
        *array = *in;
        return true;
      }
    }
    return false;
  }
  // Step i = s * u, either order, with u uniform: s's index.
  bool StepTimesUniform(int32_t i, int32_t* step, int32_t* u) const {
    const std::optional<Args> mul = Op(i, Opcode::kMultiply);
    return mul && StepPlusUniform(mul->a, mul->b, step, u);
  }
  // {a, b} = {s, u}, either order, with u uniform.
  bool StepPlusUniform(int32_t a, int32_t b, int32_t* step, int32_t* u) const {
    if (Uniform(b, u)) return *step = a, true;
    if (Uniform(a, u)) return *step = b, true;
    return false;
  }

  // Step i as a moment: read (a contiguous load), or computed as a k1 + b k2 or a k1 + (b c) k2 and then
  // one of the extra results (a moment the loop computes but does not store would be no update).
  bool Moment(int32_t i, AdamWMoment* moment) const {
    if (const std::optional<int64_t> in = Contiguous(i)) {
      *moment = AdamWMoment{-1, *in, -1, -1, -1, -1};
      return true;
    }
    const std::optional<Args> sum = Op(i, Opcode::kAdd);
    const auto root = std::find(roots_.begin() + 1, roots_.end(), i);
    if (!sum || root == roots_.end()) return false;
    const int64_t result = root - roots_.begin();
    for (const auto& [kept, added] : {std::pair{sum->a, sum->b}, std::pair{sum->b, sum->a}}) {
      AdamWMoment m{result, -1, -1, -1, -1, -1};
      if (!OneArrayOneUniform(kept, &m.a, &m.k1)) continue;
      if (OneArrayOneUniform(added, &m.b, &m.k2)) return *moment = m, true;
      int32_t square = -1;
      if (!StepTimesUniform(added, &square, &m.k2)) continue;
      const std::optional<Args> product = Op(square, Opcode::kMultiply);
      if (!product) continue;
      const std::optional<int64_t> b = Contiguous(product->a), c = Contiguous(product->b);
      if (b && c) return *moment = AdamWMoment{result, m.a, *b, *c, m.k1, m.k2}, true;
    }
    return false;
  }

  const std::vector<Step>& steps_;
  const std::vector<int32_t>& roots_;
};

// The run's arrays and values of a moment.
struct MomentArrays {
  const float *a, *b, *c;
  float k1, k2;
  float* out;  // null: read, not computed
};

// A moment at point i: read, or computed with the interpreter's rounding after each operation.
template <bool kComputed, bool kSquare>
[[gnu::always_inline]] inline float MomentAt(const MomentArrays& m, int64_t i) {
  if constexpr (!kComputed) {
    return m.a[i];
  } else {
    const float added = kSquare ? (m.b[i] * m.c[i]) * m.k2 : m.b[i] * m.k2;
    return m.a[i] * m.k1 + added;
  }
}

struct UpdateArrays {
  const float* p;
  float* out;
  float decay, step_size, correction, eps;
  MomentArrays m, v;
};

// Points computed into the thread's own arrays before they are stored: a result may be stored over its
// input (an update in place), which the loop could not be vectorized past if it stored as it went.
constexpr int64_t kPoints = 256;

// Points [begin, end) of the update, compiled for the CPU's widest vectors.
template <bool kDecay, bool kMComputed, bool kMSquare, bool kVComputed, bool kVSquare>
LAZYRT_VECTOR_CLONES_TEMPLATE void UpdatePoints(const UpdateArrays& u, int64_t begin, int64_t end) {
  float p_new[kPoints], m_new[kPoints], v_new[kPoints];
  for (int64_t first = begin; first < end; first += kPoints) {
    const int64_t n = std::min(kPoints, end - first);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = first + j;
      const float decayed = kDecay ? u.p[i] * u.decay : u.p[i];
      const float m = MomentAt<kMComputed, kMSquare>(u.m, i);
      const float v = MomentAt<kVComputed, kVSquare>(u.v, i);
      const float denom = std::sqrt(v) / u.correction + u.eps;
      p_new[j] = decayed - (m * u.step_size) / denom;
      m_new[j] = m;
      v_new[j] = v;
    }
    std::copy_n(p_new, n, u.out + first);
    if constexpr (kMComputed) std::copy_n(m_new, n, u.m.out + first);
    if constexpr (kVComputed) std::copy_n(v_new, n, u.v.out + first);
  }
}

using UpdateFn = void (*)(const UpdateArrays&, int64_t, int64_t);

// The instantiation for a loop's shape: a moment read is never squared.
template <bool... kFlags>
UpdateFn Pick(bool decay, const AdamWMoment& m, const AdamWMoment& v) {
  constexpr size_t kChosen = sizeof...(kFlags);
  if constexpr (kChosen == 5) {
    return &UpdatePoints<kFlags...>;
  } else {
    const bool flags[] = {decay, m.result >= 0, m.c >= 0, v.result >= 0, v.c >= 0};
    return flags[kChosen] ? Pick<kFlags..., true>(decay, m, v) : Pick<kFlags..., false>(decay, m, v);
  }
}

// The thread scratch the uniform values are computed in (ThreadScratch).
struct UniformScratch;

class AdamWUpdateKernel final : public Kernel {
 public:
  AdamWUpdateKernel(const AdamWUpdateLoop& loop, FusedProgram program, int64_t numel, int64_t grain)
      : loop_(loop),
        program_(std::move(program)),
        numel_(numel),
        grain_(grain),
        update_(Pick<>(loop.decay >= 0, loop.m, loop.v)) {}

  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    void* scratch = ThreadScratch<UniformScratch>(program_.scratch_bytes());
    program_.Prepare(inputs, scratch);
    const auto array = [&](int64_t input) { return input < 0 ? nullptr : static_cast<const float*>(inputs[input]); };
    const auto value = [&](int32_t step) {
      return step < 0 ? 1.0f : *static_cast<const float*>(program_.UniformValue(scratch, step));
    };
    const auto moment = [&](const AdamWMoment& m) {
      return MomentArrays{array(m.a),  array(m.b),  array(m.c),
                          value(m.k1), value(m.k2), m.result < 0 ? nullptr : static_cast<float*>(outputs[m.result])};
    };
    const UpdateArrays u{array(loop_.param),      static_cast<float*>(outputs[0]),
                         value(loop_.decay),      value(loop_.step_size),
                         value(loop_.correction), value(loop_.eps),
                         moment(loop_.m),         moment(loop_.v)};
    ForEachChunk(numel_, grain_, [&](int64_t begin, int64_t end) { update_(u, begin, end); });
    return absl::OkStatus();
  }
  bool SplitsOverPool() const override { return SplitsIntoChunks(numel_, grain_); }

 private:
  AdamWUpdateLoop loop_;
  FusedProgram program_;
  int64_t numel_, grain_;
  UpdateFn update_;
};

}  // namespace

std::optional<AdamWUpdateLoop> MatchAdamWUpdate(const FusedProgram& program) { return Matcher(program).Match(); }

std::unique_ptr<Kernel> MakeAdamWUpdateKernel(const AdamWUpdateLoop& loop, FusedProgram program, int64_t numel,
                                              int64_t grain) {
  return std::make_unique<AdamWUpdateKernel>(loop, std::move(program), numel, grain);
}

}  // namespace lazyrt::pjrt
