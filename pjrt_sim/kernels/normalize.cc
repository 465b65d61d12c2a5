#include "pjrt_sim/kernels/normalize.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/kernels/fused_program.h"
#include "pjrt_sim/kernels/prefetch.h"
#include "pjrt_sim/opcode.h"
#include "pjrt_sim/thread_pool.h"
#include "pjrt_sim/vector_math.h"

namespace lazyrt::pjrt {
namespace {

// Rows are independent: each is computed by one task in a fixed order, so the bits do not depend on
// the thread count. A task takes at least this many elements.
constexpr int64_t kGrainElements = 1 << 14;
// Rows whose inputs are prefetched together, while the rows before them are computed.
constexpr int64_t kPrefetchRows = 8;

// Four doubles: one 256-bit register in the x86-64-v3 and v4 clones of a LAZYRT_VECTOR_CLONES function.
// Eight lanes are two of them, not one 8-double vector type: GCC 12 kept such a type in memory in the AVX2
// clone, moving its halves through the stack and general registers.
using Quad = double __attribute__((vector_size(4 * sizeof(double))));

// The helpers below take and return vectors by value, which -Wpsabi notes (at their definitions, and at the
// end of the file where templates using them are instantiated) is an ABI of its own with and without AVX.
// They are always inlined, into each clone: no call, so no ABI.
#pragma GCC diagnostic ignored "-Wpsabi"

[[gnu::always_inline]] inline Quad QuadAt(const double* p) {
  Quad q;
  std::memcpy(&q, p, sizeof(q));
  return q;
}

// Rows normalized together: their sums are independent chains. A row alone has two (the halves of its
// partial sums), and its passes and divisions one after another: each add waited on the one before.
constexpr int kRowsTogether = 4;
static_assert(kPrefetchRows % kRowsTogether == 0, "prefetching starts at a group of rows normalized together");

// The sums over i < w of term(a[i], b[i], r, k) for rows r < R of a and b (rows w apart) and terms k < K, each
// in one fixed order, the same in every clone and on every CPU: eight partial sums, each from +0, term i added
// to partial i % 8 in order of i, then the partials pairwise, ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)).
// `term` takes a Quad of four elements of each or one double of each (a generic lambda, always inlined into
// the clone that calls it: a call would pass vectors under another ABI); each lane's arithmetic is the scalar
// IEEE operation (pjrt_sim compiles without contraction). Summed in order from element 0, each row was one
// chain, eight rows' chains a block whose elements were transposed into lanes and back: layer norm on
// [4096, 128] f32 took 311 us from memory and 189 warm on an AMX Xeon, 242 and 142 now; its gradient 516
// and 376, now 431 and 300 (micro BM_NormalizeKernel, benchmarks/RESULTS.md). K terms of the same rows are
// summed in one pass over them.
template <int R, int K = 1, typename Term>
[[gnu::always_inline]] inline void FixedOrderSums(int64_t w, const double* a, const double* b, Term term,
                                                  std::array<double*, K> sums) {
  Quad lo[K][R] = {}, hi[K][R] = {};
  int64_t i = 0;
  for (; i + 8 <= w; i += 8) {
    for (int r = 0; r < R; ++r) {
      const int64_t at = r * w + i;
      for (int k = 0; k < K; ++k) {
        lo[k][r] += term(QuadAt(a + at), QuadAt(b + at), r, k);
        hi[k][r] += term(QuadAt(a + at + 4), QuadAt(b + at + 4), r, k);
      }
    }
  }
  for (int64_t j = 0; i + j < w; ++j) {
    for (int r = 0; r < R; ++r) {
      const int64_t at = r * w + i + j;
      for (int k = 0; k < K; ++k) {
        if (j < 4) {
          lo[k][r][j] += term(a[at], b[at], r, k);
        } else {
          hi[k][r][j - 4] += term(a[at], b[at], r, k);
        }
      }
    }
  }
  for (int k = 0; k < K; ++k) {
    for (int r = 0; r < R; ++r) {
      const Quad l = lo[k][r], h = hi[k][r];
      sums[k][r] = ((l[0] + l[1]) + (l[2] + l[3])) + ((h[0] + h[1]) + (h[2] + h[3]));
    }
  }
}

// The statistics of R rows of x (w elements each, one after another): x_hat = (x - mean) rstd, the mean 0 for
// RMS norm; and for the gradient of sum(g x_hat) with respect to x, rstd (g - mean(g) - x_hat mean(g x_hat)),
// the means of g (0 for RMS norm) and of g x_hat. x_hat and the gradient are computed where they are read, by
// the same operations each time: the affine forms store neither in f64 (NormalizeRows does, for StoreBlock to
// round).
template <int R>
struct RowStatistics {
  double mean[R] = {}, rstd[R] = {}, mean_g[R] = {}, mean_g_xhat[R] = {};
  // Of an element (a double, or a Quad of four) of row r.
  template <typename V>
  [[gnu::always_inline]] V XHat(V x, int r) const {
    return (x - mean[r]) * rstd[r];
  }
  template <typename V>
  [[gnu::always_inline]] V Gradient(V g, V x_hat, int r) const {
    return rstd[r] * (g - mean_g[r] - x_hat * mean_g_xhat[r]);
  }
};

// The statistics of R rows of x, and given R rows of g, its means too. In f64, the variance in two passes;
// both sums of g in one pass over g and x.
template <int R>
[[gnu::always_inline]] inline RowStatistics<R> RowStatisticsOf(bool centred, double epsilon, int64_t w, const double* x,
                                                               const double* g) {
  RowStatistics<R> s;
  const double n = static_cast<double>(w);
  if (centred) {
    FixedOrderSums<R>(w, x, x, [](auto u, auto, int, int) __attribute__((always_inline)) { return u; }, {s.mean});
    for (int r = 0; r < R; ++r) s.mean[r] /= n;
  }
  // Of x - mean: the two-pass variance, exact where a running sum of squares cancels.
  const auto squared_deviation = [&](auto u, auto, int r, int) __attribute__((always_inline)) {
    const auto d = u - s.mean[r];
    return d * d;
  };
  double second_moment[R];
  FixedOrderSums<R>(w, x, x, squared_deviation, {second_moment});
  for (int r = 0; r < R; ++r) s.rstd[r] = 1.0 / std::sqrt(second_moment[r] / n + epsilon);
  if (g == nullptr) return s;
  FixedOrderSums<R, 2>(
      w, g,
      x, [&](auto u, auto v, int r, int k) __attribute__((always_inline)) { return k == 0 ? u : u * s.XHat(v, r); },
      {s.mean_g, s.mean_g_xhat});
  for (int r = 0; r < R; ++r) {
    s.mean_g[r] = centred ? s.mean_g[r] / n : 0.0;
    s.mean_g_xhat[r] /= n;
  }
  return s;
}

// Replaces each of R rows of x by x_hat; given R rows g, replaces them by the gradient of sum(g x_hat) instead.
template <int R>
LAZYRT_VECTOR_CLONES_TEMPLATE void NormalizeRows(bool centred, double epsilon, int64_t w, double* x, double* g) {
  const RowStatistics<R> s = RowStatisticsOf<R>(centred, epsilon, w, x, g);
  for (int r = 0; r < R; ++r) {
    double* const x_row = x + r * w;
    if (g == nullptr) {
      for (int64_t i = 0; i < w; ++i) x_row[i] = s.XHat(x_row[i], r);
    } else {
      double* const g_row = g + r * w;
      for (int64_t i = 0; i < w; ++i) g_row[i] = s.Gradient(g_row[i], s.XHat(x_row[i], r), r);
    }
  }
}

// Elements [start, start + n) of an array of `type` as doubles in x.
LAZYRT_VECTOR_CLONES void LoadRow(const void* base, PrimitiveType type, int64_t start, int64_t n, double* x) {
  if (type == PrimitiveType::kF32) {
    const float* row = static_cast<const float*>(base) + start;
    for (int64_t i = 0; i < n; ++i) x[i] = row[i];
  } else if (type == PrimitiveType::kF64) {
    std::memcpy(x, static_cast<const double*>(base) + start, static_cast<size_t>(n) * sizeof(double));
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = LoadElement(base, type, start + i);
  }
}

// out = x_hat weight + bias over R rows of x, each operation rounded to T in turn (x_hat first), as the traced
// ops x_hat * weight + bias round.
template <typename T, int R>
LAZYRT_VECTOR_CLONES_TEMPLATE void AffineRows(double epsilon, int64_t w, const double* x, const T* weight,
                                              const T* bias, T* out) {
  const RowStatistics<R> s = RowStatisticsOf<R>(/*centred=*/true, epsilon, w, x, nullptr);  // affine: layer norm
  for (int r = 0; r < R; ++r) {
    for (int64_t i = 0; i < w; ++i) {
      const T product = static_cast<T>(s.XHat(x[r * w + i], r)) * weight[i];
      out[r * w + i] = product + bias[i];
    }
  }
}

// The gradient of x_hat from dy over `rows` rows of w: g = dy * weight, rounded to T as the traced product is.
template <typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE void AffineGradientRows(const T* dy, int64_t rows, int64_t w, const T* weight,
                                                      double* g) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < w; ++i) g[r * w + i] = static_cast<T>(dy[r * w + i] * weight[i]);
  }
}

// The packed gradient's R rows of dx (from R rows of x and of g = dy weight), rounded to T into out; then each
// column's sums of dy x_hat (its terms rounded to T, as the traced product's) and of dy gain the R rows' terms,
// in order of the rows (a column's sums in registers across them). Two passes after the statistics, x_hat and
// dx computed where they are read and stored; with x_hat stored in f64 by a pass of its own, and dx too before
// its rounding, the affine gradient over [32, 128, 128] (micro BM_NormalizeKernel/1/*/1, Zen 5) took 415-489 us
// from memory and 317-353 warm, now 425-438 and 281-322, and the GPT's layer norms 185-239 ms in 30 steps, now
// 156-178 (LAZYRT_KERNEL_PROFILE, alternating runs). One pass for both was slower (582-623 us warm): the
// column sums' loop, over the rows inside each column, does not vectorize the dx stores well.
template <typename T, int R>
LAZYRT_VECTOR_CLONES_TEMPLATE void StoreGradientAndAddAffineSums(double epsilon, int64_t w, const double* x,
                                                                 const double* g, const T* dy, T* out,
                                                                 double* sum_dy_x_hat, double* sum_dy) {
  const RowStatistics<R> s = RowStatisticsOf<R>(/*centred=*/true, epsilon, w, x, g);  // affine: layer norm
  for (int r = 0; r < R; ++r) {
    for (int64_t i = 0; i < w; ++i) {
      const int64_t at = r * w + i;
      out[at] = static_cast<T>(s.Gradient(g[at], s.XHat(x[at], r), r));
    }
  }
  for (int64_t i = 0; i < w; ++i) {
    double with_x_hat = sum_dy_x_hat[i], alone = sum_dy[i];
    for (int r = 0; r < R; ++r) {
      const T dyi = dy[r * w + i];
      with_x_hat += static_cast<T>(dyi * static_cast<T>(s.XHat(x[r * w + i], r)));
      alone += dyi;
    }
    sum_dy_x_hat[i] = with_x_hat;
    sum_dy[i] = alone;
  }
}

class NormalizeKernel final : public Kernel {
 public:
  // `affine`: layer norm with its weight and bias (forward) or weight (gradient, packed in groups of
  // `group` rows: CheckNormalize).
  NormalizeKernel(Opcode op, PrimitiveType type, int64_t rows, int64_t width, double epsilon, bool affine,
                  int64_t group, int64_t output_bytes)
      : op_(op),
        type_(type),
        rows_(rows),
        width_(width),
        epsilon_(epsilon),
        affine_(affine),
        group_(group),
        output_bytes_(output_bytes) {}

  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    if (rows_ == 0 || width_ == 0) {
      // Groups of no rows (x [B, 0, C]) still have their sums, of nothing: +0.
      std::memset(outputs[0], 0, static_cast<size_t>(output_bytes_));
      return absl::OkStatus();
    }
    const int64_t rows_per_task = RowsPerTask();
    const int64_t tasks = (rows_ + rows_per_task - 1) / rows_per_task;
    const bool backward = op_ == Opcode::kLayerNormGrad || op_ == Opcode::kRmsNormGrad;
    const bool centred = op_ == Opcode::kLayerNorm || op_ == Opcode::kLayerNormGrad;
    const bool packed = affine_ && backward;
    const int64_t row_inputs = backward ? 2 : 1;  // x, and dy or g: the weight and bias are a row each
    const void* weight = affine_ ? inputs[static_cast<size_t>(row_inputs)] : nullptr;
    const void* bias = affine_ && !backward ? inputs[2] : nullptr;
    char* const out = static_cast<char*>(outputs[0]);
    auto run_task = [&](int64_t t) {
      const size_t together = static_cast<size_t>(kRowsTogether * width_);
      const auto x = std::make_unique_for_overwrite<double[]>(together);
      const auto g = std::make_unique_for_overwrite<double[]>(backward ? together : 0);
      // The packed gradient's group's sums of dy x_hat and of dy.
      const auto sums = std::make_unique<double[]>(packed ? static_cast<size_t>(2 * width_) : 0);
      const int64_t first = t * rows_per_task, last = std::min(rows_, first + rows_per_task);
      const int64_t row_bytes = width_ * ByteWidth(type_);
      const bool prefetches = (row_inputs + 1) * kPrefetchRows * row_bytes <= kMostPrefetchedBytes;
      for (int64_t r0 = first, rows; r0 < last; r0 += rows) {
        const int64_t group_end = packed ? (r0 / group_ + 1) * group_ : last;
        rows = std::min({int64_t{kRowsTogether}, last - r0, group_end - r0});
        // The next rows, while these are computed.
        const int64_t next = r0 + kPrefetchRows, next_rows = std::min(kPrefetchRows, last - next);
        if ((r0 - first) % kPrefetchRows < rows && next_rows > 0 && prefetches) {
          for (int64_t i = 0; i < row_inputs; ++i)
            PrefetchToRead(static_cast<const char*>(inputs[static_cast<size_t>(i)]) + next * row_bytes,
                           next_rows * row_bytes);
          PrefetchToWrite(out + OutRow(next) * row_bytes, next_rows * row_bytes);
        }
        LoadRow(inputs[0], type_, r0 * width_, rows * width_, x.get());
        if (packed) {
          WithType([&]<typename T>() {
            AffineGradientRows<T>(static_cast<const T*>(inputs[1]) + r0 * width_, rows, width_,
                                  static_cast<const T*>(weight), g.get());
          });
        } else if (backward) {
          LoadRow(inputs[1], type_, r0 * width_, rows * width_, g.get());
        }
        char* const to = out + OutRow(r0) * row_bytes;
        InRowBlocks(rows, [&]<int R>(int64_t at) {
          if (packed) {  // dx stored, x_hat computed again from x, with the affine's sums
            WithType([&]<typename T>() {
              StoreGradientAndAddAffineSums<T, R>(epsilon_, width_, x.get() + at, g.get() + at,
                                                  static_cast<const T*>(inputs[1]) + r0 * width_ + at,
                                                  reinterpret_cast<T*>(to) + at, sums.get(), sums.get() + width_);
            });
          } else if (affine_) {
            WithType([&]<typename T>() {
              AffineRows<T, R>(epsilon_, width_, x.get() + at, static_cast<const T*>(weight),
                               static_cast<const T*>(bias), reinterpret_cast<T*>(to) + at);
            });
          } else {
            NormalizeRows<R>(centred, epsilon_, width_, x.get() + at, backward ? g.get() + at : nullptr);
          }
        });
        if (packed) {
          if (r0 + rows == group_end) {  // the group's sums, after its rows of dx; then the next group's from 0
            StoreBlock(sums.get(), ComputeType::kF64, type_, out + OutRow(group_end - 1) * row_bytes + row_bytes,
                       2 * width_);
            std::fill_n(sums.get(), 2 * width_, 0.0);
          }
        } else if (!affine_) {
          StoreBlock(backward ? g.get() : x.get(), ComputeType::kF64, type_, to, rows * width_);
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
  // Rows each task of the pool takes: at least kGrainElements elements, a multiple of kRowsTogether (of the
  // group for the packed gradient: a group's sums are one task's).
  int64_t RowsPerTask() const {
    const int64_t rows = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, width_));
    const int64_t unit = group_ > 0 ? group_ : kRowsTogether;
    return (rows + unit - 1) / unit * unit;
  }
  // f.template operator()<R>(offset) over `rows` rows: once for kRowsTogether of them (R = kRowsTogether,
  // offset 0), else (a task's or a group's last rows) for each row alone (R = 1, offset its first element).
  template <typename F>
  void InRowBlocks(int64_t rows, F f) const {
    if (rows == kRowsTogether) {
      f.template operator()<kRowsTogether>(0);
      return;
    }
    for (int64_t r = 0; r < rows; ++r) f.template operator()<1>(r * width_);
  }
  // The result's row of row r of x: the packed gradient's groups are 2 rows longer.
  int64_t OutRow(int64_t r) const { return group_ > 0 ? r + 2 * (r / group_) : r; }
  // f(T) for the affine's T (f32 or f64, checked at build).
  template <typename F>
  void WithType(F f) const {
    if (type_ == PrimitiveType::kF32) {
      f.template operator()<float>();
    } else {
      f.template operator()<double>();
    }
  }

  Opcode op_;
  PrimitiveType type_;
  int64_t rows_, width_;
  double epsilon_;
  bool affine_;
  int64_t group_;  // rows of a packed gradient's group, else 0
  int64_t output_bytes_;
};

bool IsFloatType(PrimitiveType t) {
  return t == PrimitiveType::kF32 || t == PrimitiveType::kF64 || t == PrimitiveType::kBF16 || t == PrimitiveType::kF16;
}

}  // namespace

absl::Status CheckNormalize(Opcode op, std::span<const ArrayShape> operands, const ArrayShape& result, int64_t axis,
                            double epsilon) {
  const bool backward = op == Opcode::kLayerNormGrad || op == Opcode::kRmsNormGrad;
  const bool layer_norm = op == Opcode::kLayerNorm || op == Opcode::kLayerNormGrad;
  const bool affine = layer_norm && operands.size() == 3;
  if (!affine && operands.size() != (backward ? 2U : 1U)) {
    return absl::InvalidArgumentError(absl::StrCat("expects ", backward ? 2 : 1, " operand(s)",
                                                   layer_norm ? " (3 with its affine)" : "", ", has ",
                                                   operands.size()));
  }
  if (!IsFloatType(result.type)) {
    return absl::InvalidArgumentError(absl::StrCat("result ", result.ToString(), " needs a floating type"));
  }
  if (affine && result.type != PrimitiveType::kF32 && result.type != PrimitiveType::kF64) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer norm's affine form takes f32 or f64, not the result ", result.ToString()));
  }
  const int64_t rank = static_cast<int64_t>(result.dims.size());
  if (axis < 0 || axis >= rank || (affine && backward && axis == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("axis ", axis, " out of range for the result ", result.ToString(),
                     affine && backward ? " (the affine's gradient needs axis >= 1)" : ""));
  }
  if (!std::isfinite(epsilon) || epsilon < 0) return absl::InvalidArgumentError("epsilon must be finite and >= 0");
  const std::vector<int64_t>& x = operands[0].dims;
  if (axis > static_cast<int64_t>(x.size())) {
    return absl::InvalidArgumentError(absl::StrCat("operand 0 ", operands[0].ToString(), " has no dim ", axis));
  }
  const std::vector<int64_t> weight(x.begin() + axis, x.end());
  for (size_t i = 0; i < operands.size(); ++i) {
    const bool is_weight = affine && (backward ? i == 2 : i >= 1);
    if (!(operands[i].type == result.type && operands[i].dims == (is_weight ? weight : x))) {
      return absl::InvalidArgumentError(
          absl::StrCat("operand ", i, " ", operands[i].ToString(), " must be ",
                       is_weight ? "the normalized dims of operand 0 " : "of the shape of operand 0 ",
                       operands[0].ToString(), ", of the result's type"));
    }
  }
  std::vector<int64_t> want = x;
  if (affine && backward) want[static_cast<size_t>(axis - 1)] += 2;  // axis >= 1, checked above
  if (result.dims != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("result ", result.ToString(), " must be [", absl::StrJoin(want, ","), "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> BuildNormalizeKernel(const proto::Kernel& k, std::span<const ArrayShape> inputs,
                                                             const ArrayShape& output) {
  auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("kernel '", k.label(), "' (NORMALIZE): ", what));
  };
  const std::optional<Opcode> op = OpcodeFromNumber(k.opcode());
  if (!op.has_value() || ClassOf(*op) != OpClass::kNormalize) return fail(absl::StrCat("bad opcode ", k.opcode()));
  if (absl::Status s = CheckNormalize(*op, inputs, output, k.axis(), k.epsilon()); !s.ok()) return fail(s.message());
  const bool backward = *op == Opcode::kLayerNormGrad || *op == Opcode::kRmsNormGrad;
  const bool affine = inputs.size() == 3;
  int64_t rows = 1, width = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(output.dims.size()); ++d) {
    (d < k.axis() ? rows : width) *= inputs[0].dims[static_cast<size_t>(d)];
  }
  const int64_t group = affine && backward ? inputs[0].dims[static_cast<size_t>(k.axis() - 1)] : 0;
  return std::make_unique<NormalizeKernel>(*op, output.type, rows, width, k.epsilon(), affine, group,
                                           output.byte_size());
}

}  // namespace lazyrt::pjrt
