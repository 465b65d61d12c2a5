#include "pjrt_sim/kernels/normalize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/kernels/prefetch.h"
#include "pjrt_sim/opcode.h"
#include "pjrt_sim/thread_pool.h"
#include "pjrt_sim/vector_math.h"

namespace lazyrt::pjrt {
namespace {

// Rows are independent: each is computed by one task in a fixed order, so the bits do not depend on
// the thread count. A task takes at least this many elements.
constexpr int64_t kGrainElements = 1 << 14;
// Rows computed together: each row's sums keep their order (element 0 first), but the sums of a block's
// rows are independent chains, one lane each.
constexpr int64_t kRowBlock = 8;

// Four doubles: one 256-bit register in the x86-64-v3 and v4 clones of a LAZYRT_VECTOR_CLONES function.
// A block's 8 lanes are two of them, not one 8-double vector type: GCC 12 kept such a type in memory in
// the AVX2 clone, moving its halves through the stack and general registers (layer norm and its gradient
// on [4096,128]: 3 ms on an AVX2 Zen 3). Each lane's arithmetic is the scalar IEEE operation (no
// contraction), so every clone computes the same bits.
using Quad = double __attribute__((vector_size(4 * sizeof(double))));
// Element i of a block's 8 rows: lane r of row r, rows 0-3 in lo and 4-7 in hi. Passed by pointer between
// functions that are not inlined: by value its ABI would differ between the clones.
struct Lanes {
  Quad lo, hi;
};

// The helpers below take and return vectors by value, which -Wpsabi notes (at their definitions, and at the
// end of the file where templates using them are instantiated) is an ABI of its own with and without AVX.
// They are always inlined, into each clone: no call, so no ABI.
#pragma GCC diagnostic ignored "-Wpsabi"

[[gnu::always_inline]] inline Lanes operator+(Lanes a, Lanes b) { return {a.lo + b.lo, a.hi + b.hi}; }
[[gnu::always_inline]] inline Lanes operator-(Lanes a, Lanes b) { return {a.lo - b.lo, a.hi - b.hi}; }
[[gnu::always_inline]] inline Lanes operator*(Lanes a, Lanes b) { return {a.lo * b.lo, a.hi * b.hi}; }
[[gnu::always_inline]] inline Lanes operator/(Lanes a, double b) { return {a.lo / b, a.hi / b}; }
[[gnu::always_inline]] inline Lanes& operator+=(Lanes& a, Lanes b) { return a = a + b; }

[[gnu::always_inline]] inline double Lane(const Lanes& a, int64_t r) { return r < 4 ? a.lo[r] : a.hi[r - 4]; }
[[gnu::always_inline]] inline void SetLane(Lanes& a, int64_t r, double value) {
  if (r < 4) {
    a.lo[r] = value;
  } else {
    a.hi[r - 4] = value;
  }
}

// Transposes a 4x4 block of doubles in place (q[r][c] becomes q[c][r]): two rounds of interleaving.
[[gnu::always_inline]] inline void Transpose4(Quad* q) {
  const Quad t0 = __builtin_shufflevector(q[0], q[1], 0, 4, 2, 6);
  const Quad t1 = __builtin_shufflevector(q[0], q[1], 1, 5, 3, 7);
  const Quad t2 = __builtin_shufflevector(q[2], q[3], 0, 4, 2, 6);
  const Quad t3 = __builtin_shufflevector(q[2], q[3], 1, 5, 3, 7);
  q[0] = __builtin_shufflevector(t0, t2, 0, 1, 4, 5);
  q[1] = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
  q[2] = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
  q[3] = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
}

// Transposes an 8x8 block of doubles in place (a[r] lane c becomes a[c] lane r): its four 4x4 quadrants
// each transposed, the two off the diagonal swapped. Always inlined: in each clone of its callers.
[[gnu::always_inline]] inline void Transpose(Lanes* a) {
  Quad top_left[4], top_right[4], bottom_left[4], bottom_right[4];
  for (int r = 0; r < 4; ++r) {
    top_left[r] = a[r].lo;
    top_right[r] = a[r].hi;
    bottom_left[r] = a[r + 4].lo;
    bottom_right[r] = a[r + 4].hi;
  }
  Transpose4(top_left);
  Transpose4(top_right);
  Transpose4(bottom_left);
  Transpose4(bottom_right);
  for (int r = 0; r < 4; ++r) {
    a[r] = {top_left[r], bottom_left[r]};
    a[r + 4] = {top_right[r], bottom_right[r]};
  }
}

// Four elements of a row of T at p, as doubles; and the inverse, each rounded to T.
template <typename T>
struct RowQuadOf;
template <>
struct RowQuadOf<double> {
  using type = Quad;
};
template <>
struct RowQuadOf<float> {
  using type = float __attribute__((vector_size(4 * sizeof(float))));
};
template <typename T>
using RowQuad = typename RowQuadOf<T>::type;
template <typename T>
[[gnu::always_inline]] inline Quad LoadQuad(const T* p) {
  return Quad{static_cast<double>(p[0]), static_cast<double>(p[1]), static_cast<double>(p[2]),
              static_cast<double>(p[3])};
}
template <typename T>
[[gnu::always_inline]] inline void StoreQuad(Quad q, T* p) {
  const RowQuad<T> v = __builtin_convertvector(q, RowQuad<T>);
  std::memcpy(p, &v, sizeof(v));
}

// The block of 8 rows of an f32 or f64 array at `rows` (row r at rows + r * width) into x[i] (element i
// of every row).
template <typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE void LoadBlock(const T* rows, int64_t width, Lanes* x) {
  int64_t i = 0;
  for (; i + kRowBlock <= width; i += kRowBlock) {
    Lanes* block = x + i;
    for (int64_t r = 0; r < kRowBlock; ++r) {
      const T* row = rows + r * width + i;
      block[r] = {LoadQuad(row), LoadQuad(row + 4)};
    }
    Transpose(block);
  }
  for (; i < width; ++i) {
    for (int64_t r = 0; r < kRowBlock; ++r) SetLane(x[i], r, rows[r * width + i]);
  }
}

// The inverse of LoadBlock, each element rounded to T; x is left transposed.
template <typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE void StoreBlock(Lanes* x, int64_t width, T* rows) {
  int64_t i = 0;
  for (; i + kRowBlock <= width; i += kRowBlock) {
    Lanes* block = x + i;
    Transpose(block);
    for (int64_t r = 0; r < kRowBlock; ++r) {
      T* row = rows + r * width + i;
      StoreQuad(block[r].lo, row);
      StoreQuad(block[r].hi, row + 4);
    }
  }
  for (; i < width; ++i) {
    for (int64_t r = 0; r < kRowBlock; ++r) rows[r * width + i] = static_cast<T>(Lane(x[i], r));
  }
}

// Row r's elements [start, start + n) of an array of `type` into lane r of x[0, n).
void LoadRow(const void* base, PrimitiveType type, int64_t start, int64_t n, Lanes* x, int64_t r) {
  for (int64_t i = 0; i < n; ++i) SetLane(x[i], r, LoadElement(base, type, start + i));
}

// The inverse of LoadRow: lane r of x[0, n) rounded to `type` at elements [start, start + n).
void StoreRow(const Lanes* x, int64_t r, int64_t n, PrimitiveType type, void* base, int64_t start) {
  const int64_t bytes = ByteWidth(type);
  for (int64_t i = 0; i < n; ++i) StoreElement(Lane(x[i], r), type, static_cast<char*>(base) + (start + i) * bytes);
}

// Replaces each row of x[0, w) by its normalization (centred: layer norm, else RMS norm), or, given g,
// by the gradient of sum(g * norm(x)).
LAZYRT_VECTOR_CLONES void NormalizeRows(bool centred, double epsilon, int64_t w, Lanes* x, const Lanes* g) {
  const double n = static_cast<double>(w);
  Lanes mean = {}, second_moment = {}, rstd;
  if (centred) {
    for (int64_t i = 0; i < w; ++i) mean += x[i];
    mean = mean / n;
  }
  // Of x - mean: the two-pass variance, exact where a running sum of squares cancels.
  for (int64_t i = 0; i < w; ++i) second_moment += (x[i] - mean) * (x[i] - mean);
  for (int64_t r = 0; r < kRowBlock; ++r) SetLane(rstd, r, 1.0 / std::sqrt(Lane(second_moment, r) / n + epsilon));
  for (int64_t i = 0; i < w; ++i) x[i] = (x[i] - mean) * rstd;  // x_hat
  if (g == nullptr) return;
  // d/dx of sum(g x_hat) = rstd (g - mean(g) - x_hat mean(g x_hat)); RMS has no mean(g) term.
  Lanes mean_g = {}, mean_g_xhat = {};
  for (int64_t i = 0; i < w; ++i) {
    mean_g += g[i];
    mean_g_xhat += g[i] * x[i];
  }
  mean_g = centred ? mean_g / n : Lanes{};
  mean_g_xhat = mean_g_xhat / n;
  for (int64_t i = 0; i < w; ++i) x[i] = rstd * (g[i] - mean_g - x[i] * mean_g_xhat);
}

class NormalizeKernel final : public Kernel {
 public:
  NormalizeKernel(Opcode op, PrimitiveType type, int64_t rows, int64_t width, double epsilon)
      : op_(op), type_(type), rows_(rows), width_(width), epsilon_(epsilon) {}

  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    if (rows_ == 0 || width_ == 0) return absl::OkStatus();
    const int64_t rows_per_task = RowsPerTask();
    const int64_t tasks = (rows_ + rows_per_task - 1) / rows_per_task;
    const bool backward = inputs.size() > 1;
    const bool centred = op_ == Opcode::kLayerNorm || op_ == Opcode::kLayerNormGrad;
    auto run_task = [&](int64_t t) {
      // new[] aligns the vectors (std::vector's allocator may not be given their alignment).
      const auto x_storage = std::make_unique<Lanes[]>(static_cast<size_t>(width_));
      const auto g_storage = std::make_unique<Lanes[]>(backward ? static_cast<size_t>(width_) : 0);
      Lanes* x = x_storage.get();
      Lanes* g = backward ? g_storage.get() : nullptr;
      const int64_t last = std::min(rows_, (t + 1) * rows_per_task);
      const int64_t row_bytes = width_ * ByteWidth(type_);
      const bool prefetches = (static_cast<int64_t>(inputs.size()) + 1) * kRowBlock * row_bytes <= kMostPrefetchedBytes;
      for (int64_t r0 = t * rows_per_task; r0 < last; r0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, last - r0);
        // The next block's rows, while this one is computed.
        const int64_t next = r0 + kRowBlock, next_rows = std::min(kRowBlock, last - next);
        if (next_rows > 0 && prefetches) {
          for (const void* in : inputs)
            PrefetchToRead(static_cast<const char*>(in) + next * row_bytes, next_rows * row_bytes);
          PrefetchToWrite(static_cast<char*>(outputs[0]) + next * row_bytes, next_rows * row_bytes);
        }
        if (rows == kRowBlock && type_ == PrimitiveType::kF32) {
          LoadBlock(static_cast<const float*>(inputs[0]) + r0 * width_, width_, x);
          if (backward) LoadBlock(static_cast<const float*>(inputs[1]) + r0 * width_, width_, g);
        } else if (rows == kRowBlock && type_ == PrimitiveType::kF64) {
          LoadBlock(static_cast<const double*>(inputs[0]) + r0 * width_, width_, x);
          if (backward) LoadBlock(static_cast<const double*>(inputs[1]) + r0 * width_, width_, g);
        } else {
          // 16-bit types, and the last rows: the rows past the end are zeros, computed and never stored.
          std::fill_n(x, width_, Lanes{});
          if (backward) std::fill_n(g, width_, Lanes{});
          for (int64_t r = 0; r < rows; ++r) {
            LoadRow(inputs[0], type_, (r0 + r) * width_, width_, x, r);
            if (backward) LoadRow(inputs[1], type_, (r0 + r) * width_, width_, g, r);
          }
        }
        NormalizeRows(centred, epsilon_, width_, x, g);
        if (rows == kRowBlock && type_ == PrimitiveType::kF32) {
          StoreBlock(x, width_, static_cast<float*>(outputs[0]) + r0 * width_);
        } else if (rows == kRowBlock && type_ == PrimitiveType::kF64) {
          StoreBlock(x, width_, static_cast<double*>(outputs[0]) + r0 * width_);
        } else {
          for (int64_t r = 0; r < rows; ++r) StoreRow(x, r, width_, type_, outputs[0], (r0 + r) * width_);
        }
      }
    };
    if (tasks == 1) {
      run_task(0);
    } else {
      ThreadPool::Get().ParallelFor(tasks, run_task);
    }
    return absl::OkStatus();
  }
  bool SplitsOverPool() const override { return rows_ > RowsPerTask() && width_ > 0; }

 private:
  // Rows each task of the pool takes: blocks of kRowBlock, at least kGrainElements elements.
  int64_t RowsPerTask() const {
    return (std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, width_)) + kRowBlock - 1) / kRowBlock *
           kRowBlock;
  }

  Opcode op_;
  PrimitiveType type_;
  int64_t rows_, width_;
  double epsilon_;
};

bool IsFloatType(PrimitiveType t) {
  return t == PrimitiveType::kF32 || t == PrimitiveType::kF64 || t == PrimitiveType::kBF16 || t == PrimitiveType::kF16;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> BuildNormalizeKernel(const proto::Kernel& k, std::span<const ArrayShape> inputs,
                                                             const ArrayShape& output) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("kernel '", k.label(), "' (NORMALIZE): ", what));
  };
  const std::optional<Opcode> op = OpcodeFromNumber(k.opcode());
  if (!op.has_value() || ClassOf(*op) != OpClass::kNormalize) return fail(absl::StrCat("bad opcode ", k.opcode()));
  const bool backward = *op == Opcode::kLayerNormGrad || *op == Opcode::kRmsNormGrad;
  if (inputs.size() != (backward ? 2U : 1U)) return fail("wrong number of inputs");
  for (const ArrayShape& in : inputs) {
    if (!(in == output)) return fail("inputs must have the output's shape");
  }
  if (!IsFloatType(output.type)) return fail("needs a floating type");
  const int64_t rank = static_cast<int64_t>(output.dims.size());
  if (k.axis() < 0 || k.axis() >= rank) return fail("axis out of range");
  if (!std::isfinite(k.epsilon()) || k.epsilon() < 0) return fail("epsilon must be finite and >= 0");
  int64_t rows = 1, width = 1;
  for (int64_t d = 0; d < rank; ++d) (d < k.axis() ? rows : width) *= output.dims[static_cast<size_t>(d)];
  return std::make_unique<NormalizeKernel>(*op, output.type, rows, width, k.epsilon());
}

}  // namespace lazyrt::pjrt
