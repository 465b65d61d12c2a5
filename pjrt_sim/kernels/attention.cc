#include "pjrt_sim/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/kernels/fused_program.h"
#include "pjrt_sim/kernels/gemm.h"
#include "pjrt_sim/kernels/prefetch.h"
#include "pjrt_sim/kernels/thread_scratch.h"
#include "pjrt_sim/status_macros.h"
#include "pjrt_sim/thread_pool.h"
#include "pjrt_sim/vector_math.h"

namespace lazyrt::pjrt {
namespace {

constexpr int64_t kBlock = kAttentionBlock;
// How many rows ahead ContiguousRows asks for the rows of a view it copies. The rows are far apart (1.5 KiB
// in the projections' [B, T, 3, H, D]) and each is a line or two: the copy loop waited on each row's miss in
// turn. Asked for 8 rows ahead, the GPT's attention gradients took 15.0-15.6 ms a step instead of 16.8-18.0
// (Zen 4, LAZYRT_KERNEL_PROFILE, alternating runs).
constexpr int64_t kRowsAhead = 8;

// bf16 elements are their bits; the kernels compute them in f32 (scores, softmax, sums), as
// FlashAttention-2 does: bf16 products with f32 sums, probabilities and score gradients rounded to bf16 for
// the products that read them.
using Bf16 = uint16_t;
template <typename S>
using ComputeOf = std::conditional_t<std::is_same_v<S, Bf16>, float, S>;

// Queries per step of the forward, for q, k and v of type S: with fewer, less of a causal block's square is
// computed (the GPT's 128 tokens: 1.25 times the causal scores in blocks of 32, 1.5 in blocks of 64), and the
// GPT's forward attention took 5.8-6.4 ms a step instead of 6.2-6.3 (Zen 4, alternating runs). bf16 products
// (oneDNN's) are slower on 32 rows: the micro's 512 tokens in bf16 took 43.5-44.9 ms against 39.6-39.9.
template <typename S>
constexpr int64_t kForwardBlock = std::is_same_v<S, Bf16> ? 64 : 32;

inline float ToCompute(Bf16 x) { return Bf16ToFloat(x); }
inline float ToCompute(float x) { return x; }
inline double ToCompute(double x) { return x; }

// The thread scratch arrays a kernel uses at once (Scratch's second argument).
enum ScratchSlot { kWorkSlot, kOperandSlot, kWidenedSlot, kStoredSlot };

// Per-thread scratch of `n` elements, reused by every block the thread computes.
template <typename T, ScratchSlot kSlot>
struct AttentionScratch {};
template <typename T, ScratchSlot kSlot = kWorkSlot>
T* Scratch(size_t n) {
  return static_cast<T*>(ThreadScratch<AttentionScratch<T, kSlot>>(n * sizeof(T)));
}

// f32 values rounded to bf16, as a kernel stores them.
void ToBf16(const float* x, int64_t n, Bf16* out) { StoreBlock(x, ComputeType::kF32, PrimitiveType::kBF16, out, n); }
LAZYRT_VECTOR_CLONES void FromBf16(const Bf16* x, int64_t n, float* out) {
  for (int64_t c = 0; c < n; ++c) out[c] = Bf16ToFloat(x[c]);
}

// rows x cols of x (rows ld apart) as a product's operand of type S: x itself, or for bf16 operands its
// values rounded to bf16 in `narrowed` (rows ld apart too).
template <typename S>
const S* AsOperand(const ComputeOf<S>* x, int64_t rows, int64_t cols, int64_t ld, S* narrowed) {
  if constexpr (std::is_same_v<S, Bf16>) {
    if (cols == ld) {
      ToBf16(x, rows * cols, narrowed);  // one call: a call per row of 64 cost a sixth of the rounding
    } else {
      for (int64_t r = 0; r < rows; ++r) ToBf16(x + r * ld, cols, narrowed + r * ld);
    }
    return narrowed;
  } else {
    return x;
  }
}

// x[0, n) in the compute type: x itself, or bf16 widened into `widened`.
template <typename S>
const ComputeOf<S>* AsCompute(const S* x, int64_t n, ComputeOf<S>* widened) {
  if constexpr (std::is_same_v<S, Bf16>) {
    FromBf16(x, n, widened);
    return widened;
  } else {
    return x;
  }
}

// to[0, n) = from[0, n), a short row (a head's 32 values) inline: std::copy_n called memmove, whose call and
// size dispatch cost as much as the copy (the copies of q, k, v and the gradients' rows were 7% of the GPT's
// attention).
template <typename T>
[[gnu::always_inline]] inline void CopyRow(const T* from, int64_t n, T* to) {
  constexpr int64_t kChunk = 64 / sizeof(T);
  int64_t c = 0;
  for (; c + kChunk <= n; c += kChunk) std::memcpy(to + c, from + c, 64);  // one vector move, or two
  for (; c < n; ++c) to[c] = from[c];
}

std::string ShapesText(std::span<const ArrayShape> operands) {
  return absl::StrJoin(operands, ", ", [](std::string* out, const ArrayShape& s) {
    absl::StrAppend(out, PrimitiveTypeName(s.type), "[", absl::StrJoin(s.dims, ","), "]");
  });
}

// The element offset of batch element b (linear over `batch_dims`) with `strides` per batch dim.
int64_t BatchOffset(int64_t b, std::span<const int64_t> batch_dims, std::span<const int64_t> strides) {
  int64_t offset = 0;
  for (size_t d = batch_dims.size(); d-- > 0;) {
    offset += (b % batch_dims[d]) * strides[d];
    b /= batch_dims[d];
  }
  return offset;
}

bool BatchDimsAre(const ArrayShape& s, std::span<const int64_t> batch) {
  return s.dims.size() == batch.size() + 2 && std::equal(batch.begin(), batch.end(), s.dims.begin());
}

// C[m,n] = A[m,k] B[k,n] on `library` (nothing for an empty C; Gemm writes k = 0's zeros). bf16
// operands: oneDNN's native bf16 product with f32 sums where the executable names oneDNN and the CPU has
// one (OneDnnHasBf16), as a DOT's; else the operands widened to f32 (exact) and multiplied on `library`.
template <typename S>
void Product(GemmLibrary library, int64_t m, int64_t n, int64_t k, MatrixView<const S> a, MatrixView<const S> b,
             MatrixView<ComputeOf<S>> c) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<S, Bf16>) {
    if (IsOneDnn(library) && OneDnnGemmBf16(m, n, k, a, b, c)) return;
    // rows x cols of a view, widened into a row-major array.
    const auto widened = [](MatrixView<const Bf16> v, int64_t rows, int64_t cols, float* out) {
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = Bf16ToFloat(v.data[i * v.row_stride + j * v.col_stride]);
      }
      return MatrixView<const float>{out, cols, 1};
    };
    float* wa = Scratch<float, kWidenedSlot>(static_cast<size_t>(m * k + k * n));
    Gemm(library, m, n, k, widened(a, m, k, wa), widened(b, k, n, wa + m * k), c);
  } else {
    Gemm(library, m, n, k, a, b, c);
  }
}

// The elementwise work of a block, compiled for the CPU's widest vectors (LAZYRT_VECTOR_CLONES: the
// kernel's own loops ran the baseline's 4 lanes), a call for all of a block's rows: calls per row of 64-128
// keys (scale, maximum, exponentials, sum, rescale) cost as much as their work.

// Sixteen f32 lanes as two halves of 8: one 256-bit register each in the x86-64-v3 and v4 clones of a
// LAZYRT_VECTOR_CLONES function. Not one 16-float vector type: GCC 12 kept such a type in memory in the
// AVX2 clone and computed its lanes one by one through the stack.
using Octet = float __attribute__((vector_size(8 * sizeof(float))));
constexpr int64_t kFloatLanes = 16;

// Which keys of a block of `cols` each of its rows of queries sees: the first Of(r) (causal: those up to
// the query, first + r of them; else all).
struct SeenKeys {
  int64_t first, step, cols;
  int64_t Of(int64_t r) const { return std::clamp<int64_t>(first + r * step, 0, cols); }
};

// The helpers below are inlined into each clone of the block functions that call them.
#define LAZYRT_INLINE [[gnu::always_inline]] inline

LAZYRT_INLINE float ExpOf(float x) { return VectorExp(x); }
LAZYRT_INLINE double ExpOf(double x) { return Exp(x); }

// Whole vectors of kFloatLanes from c = 0 while they fit in n; f(c) for each.
template <typename F>
LAZYRT_INLINE int64_t ForEachVector(int64_t n, F&& f) {
  int64_t c = 0;
  for (; c + kFloatLanes <= n; c += kFloatLanes) f(c);
  return c;
}
LAZYRT_INLINE void LoadOctets(const float* x, Octet& lo, Octet& hi) {
  std::memcpy(&lo, x, sizeof(lo));
  std::memcpy(&hi, x + 8, sizeof(hi));
}

// The sum of x[0, n) (of x[c] * y[c] with kProducts): 16 interleaved partial sums combined pairwise (a
// chain of 16 additions was most of a short row's time), then the tail in order. The order, and so the
// bits, fixed by n.
template <bool kProducts, typename T>
LAZYRT_INLINE T LaneSum(const T* x, const T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    Octet lo = {}, hi = {};
    const int64_t c = ForEachVector(n, [&](int64_t c) {
      Octet a, b;
      LoadOctets(x + c, a, b);
      if constexpr (kProducts) {
        Octet u, v;
        LoadOctets(y + c, u, v);
        a *= u;
        b *= v;
      }
      lo += a;
      hi += b;
    });
    const Octet s = lo + hi;
    float sum = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
    for (int64_t t = c; t < n; ++t) sum += kProducts ? x[t] * y[t] : x[t];
    return sum;
  } else {
    T sum = 0;
    for (int64_t c = 0; c < n; ++c) sum += kProducts ? x[c] * y[c] : x[c];
    return sum;
  }
}

// The maximum of init and x[0, n), NaNs ignored (as std::max(max, x) in a loop).
template <typename T>
LAZYRT_INLINE T MaxOf(const T* x, int64_t n, T init) {
  int64_t c = 0;
  if constexpr (std::is_same_v<T, float>) {
    Octet lo = Octet{} + init, hi = lo;
    c = ForEachVector(n, [&](int64_t c) {
      Octet a, b;
      LoadOctets(x + c, a, b);
      lo = a > lo ? a : lo;
      hi = b > hi ? b : hi;
    });
    lo = hi > lo ? hi : lo;
    for (int l = 0; l < 8; ++l) init = std::max(init, lo[l]);
  }
  for (; c < n; ++c) init = std::max(init, x[c]);
  return init;
}

// Of a row whose first `seen` of `cols` keys take part, how many its exponentials compute: with
// `whole_vectors` the seen keys rounded up to whole vectors of kFloatLanes (the scores of up to 15
// unseen keys with them, finite, zeroed after): a causal row's last 1-15 seen keys took scalar code, and
// whole vectors took the attention benchmark from 5.17 to 4.89 ms. Not with a mask, whose -inf there
// would give subnormal exponentials (a microcode assist each on Intel CPUs: 5.0 -> 5.6 ms).
LAZYRT_INLINE int64_t Computed(int64_t seen, int64_t cols, bool whole_vectors) {
  return whole_vectors ? std::min(cols, (seen + kFloatLanes - 1) / kFloatLanes * kFloatLanes) : seen;
}

// A row of probabilities: x[c] = exp(x[c] * factor - shift) for the `seen` keys, 0 for the others up to
// `cols`.
template <typename T>
LAZYRT_INLINE void ExpRow(T* x, int64_t seen, int64_t cols, bool whole_vectors, T factor, T shift) {
  const int64_t computed = Computed(seen, cols, whole_vectors);
  for (int64_t c = 0; c < computed; ++c) x[c] = ExpOf(x[c] * factor - shift);
  std::fill(x + seen, x + cols, T{0});
}

// One step of the online softmax over a block of scores (rows x seen.cols, ld apart) for each row r: its
// scores multiplied by `factor`, m = the maximum of the seen ones and row_max[r], rescale[r] = exp(row_max[r]
// - m) (0 while the row had seen no key), p = exp(score - m) for the seen keys and 0 for the others,
// row_sum[r] = row_sum[r] * rescale[r] + the sum of p, row_max[r] = m. A row whose keys are all masked so
// far keeps its sums (rescale 1) and gets p = 0. `block_max`: rows elements of work. The rescales are
// computed for all rows at once, on vectors: one at a time, each exponential's chain of dependent
// operations took longer than a row's vectors.
template <typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE void SoftmaxStep(T* scores, int64_t ld, int64_t rows, SeenKeys seen, T factor,
                                               bool whole_vectors, T* row_max, T* row_sum, T* rescale, T* block_max) {
  for (int64_t r = 0; r < rows; ++r) {
    T* x = scores + r * ld;
    const int64_t n = seen.Of(r);
    const int64_t computed = Computed(n, seen.cols, whole_vectors);
    if (factor != T{1}) {  // 1 with a mask, whose scores are scaled already
      for (int64_t c = 0; c < computed; ++c) x[c] *= factor;
    }
    block_max[r] = MaxOf(x, n, row_max[r]);
  }
  for (int64_t r = 0; r < rows; ++r) rescale[r] = ExpOf(row_max[r] - block_max[r]);
  for (int64_t r = 0; r < rows; ++r) {
    T* x = scores + r * ld;
    if (block_max[r] == -std::numeric_limits<T>::infinity()) {
      std::fill_n(x, seen.cols, T{0});
      rescale[r] = T{1};
      continue;
    }
    const int64_t n = seen.Of(r);
    ExpRow(x, n, seen.cols, whole_vectors, T{1}, block_max[r]);
    // Summed over whole vectors where they fit: the zeros past the seen keys add nothing.
    row_sum[r] =
        row_sum[r] * rescale[r] + LaneSum<false>(x, static_cast<const T*>(nullptr), Computed(n, seen.cols, true));
    row_max[r] = block_max[r];
  }
}

// acc[r * n + c] = acc[r * n + c] * rescale[r] + x[r * n + c]: a step's sums into the accumulator.
template <typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE void RescaleAndAdd(T* acc, const T* x, int64_t rows, int64_t n, const T* rescale) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) acc[r * n + c] = acc[r * n + c] * rescale[r] + x[r * n + c];
  }
}

// P over a block of scores (rows x seen.cols, ld apart): p = exp(score * factor - lse[r]) for the keys row r
// sees, 0 for the others.
template <typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE void ProbabilityBlock(T* p, int64_t ld, int64_t rows, SeenKeys seen, T factor,
                                                    bool whole_vectors, const T* lse) {
  for (int64_t r = 0; r < rows; ++r) ExpRow(p + r * ld, seen.Of(r), seen.cols, whole_vectors, factor, lse[r]);
}

// dS over a block (rows x cols, ld apart) from dP in ds, P in p and P with the dropout applied in kept
// (nullptr without dropout): ds = P * (dP - D) * scale, or (kept * dP - P * D) * scale, D = delta[r].
template <typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE void ScoreGradients(const T* p, const T* kept, T* ds, int64_t ld, int64_t rows,
                                                  int64_t cols, const T* delta, T scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const T d = delta[r];
    const T* pr = p + r * ld;
    T* dr = ds + r * ld;
    if (kept != nullptr) {
      const T* kr = kept + r * ld;
      for (int64_t c = 0; c < cols; ++c) dr[c] = (kr[c] * dr[c] - pr[c] * d) * scale;
    } else {
      for (int64_t c = 0; c < cols; ++c) dr[c] = pr[c] * (dr[c] - d) * scale;
    }
  }
}

// D = rowsum(dO * O) for each of `rows` queries: dout rows n apart, o rows n + 1 apart.
template <typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE void RowDots(const T* dout, const T* o, int64_t rows, int64_t n, T* delta) {
  for (int64_t r = 0; r < rows; ++r) delta[r] = LaneSum<true>(dout + r * n, o + r * (n + 1), n);
}

// The forward's result rows: o = acc / row_sum (0 with no keys at all), and the logsumexp row_max + log
// row_sum after each (rows n + 1 apart).
template <typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE void FinishRows(const T* acc, const T* row_max, const T* row_sum, const T* log_sum,
                                              int64_t rows, int64_t n, bool no_keys, T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    // A row with no key (every one masked) is 0/0 = NaN, as softmax over -inf scores in PyTorch; with
    // no keys at all (S = 0) the output is 0, as torch's empty matrix product.
    const T factor = no_keys ? T{0} : T{1} / row_sum[r];
    T* o = out + r * (n + 1);
    for (int64_t c = 0; c < n; ++c) o[c] = acc[r * n + c] * factor;
    o[n] = row_max[r] + log_sum[r];
  }
}
#undef LAZYRT_INLINE

// out[r] = log(x[r]) for r < n: for f32 vector_math's, the same on every CPU (glibc's logf has per-CPU
// variants), over the array at once (a call per row ran the baseline's scalar code).
void Logs(const float* x, int64_t n, float* out) { VectorLog(x, n, out); }
void Logs(const double* x, int64_t n, double* out) {
  for (int64_t r = 0; r < n; ++r) out[r] = Log(x[r]);
}

// What forward and backward share: the sizes, and the scores of a block (masked and scaled, or the scale
// left to the next pass).
class AttentionBase : public Kernel {
 public:
  AttentionBase(AttentionLayout layout, const AttentionParams& params)
      : lay_(std::move(layout)),
        scale_(params.scale),
        causal_(params.causal),
        dropout_(params.dropout),
        stream_(params.stream),
        library_(params.library),
        // What a kept probability is multiplied by: 1 / (1 - p), and 0 when every one is dropped (p = 1).
        keep_scale_(params.dropout < 1 ? 1 / (1 - params.dropout) : 0) {}

 protected:
  // The seed of the dropout (the last input), or 0 without dropout.
  uint64_t Seed(std::span<const void* const> inputs) const {
    return dropout_ > 0 ? static_cast<uint64_t>(*static_cast<const int64_t*>(inputs.back())) : 0;
  }

  // Multiplies the block's probabilities p[r * ld + c] by the dropout's factor: 0 where (b, i0 + r,
  // j0 + c) is dropped, 1 / (1 - dropout) elsewhere. The draw is RNG_UNIFORM's of [B, L, S].
  template <typename T>
  void Dropout(uint64_t seed, int64_t b, int64_t i0, int64_t rows, int64_t j0, int64_t cols, T* p, int64_t ld) const {
    const T keep = static_cast<T>(keep_scale_);
    for (int64_t r = 0; r < rows; ++r) {
      const uint64_t first = static_cast<uint64_t>((b * lay_.l + i0 + r) * lay_.s + j0);
      T* row = p + r * ld;
      for (int64_t c = 0; c < cols; ++c) {
        const bool dropped =
            RandomUniform(seed, static_cast<uint64_t>(stream_), first + static_cast<uint64_t>(c)) < dropout_;
        row[c] = dropped ? T{0} : row[c] * keep;
      }
    }
  }

  // Calls f.template operator()<S>() with S the type of q, k and v (bf16 as its bits).
  template <typename F>
  void DispatchOperandType(F&& f) const {
    switch (lay_.type) {
      case PrimitiveType::kF64: f.template operator()<double>(); break;
      case PrimitiveType::kBF16: f.template operator()<Bf16>(); break;
      default: f.template operator()<float>(); break;
    }
  }

  // The mask's element offset for batch element b (its batch dims broadcast).
  int64_t MaskOffset(int64_t b) const { return BatchOffset(b, lay_.batch_dims, lay_.mask_batch_strides); }

  // Rows [first, first + n) of operand i (`cols` wide) of batch element b, contiguous: where they are if
  // the operand's are, else copied to `spare` (n x cols), which then moves past the copy. A view's rows are far apart
  // (the projections' heads: 384 floats), and a block's products read such rows from a few cache sets only (the
  // attention ran 10% slower on them than on copies).
  template <typename T>
  const T* ContiguousRows(std::span<const void* const> inputs, size_t i, int64_t b, int64_t first, int64_t n,
                          int64_t cols, T*& spare) const {
    const OperandAccess& access = lay_.access[i];
    const T* rows = static_cast<const T*>(inputs[i]) + access.Start(b, lay_.batch_dims) + first * access.row_stride;
    if (!Gathered(i, cols)) return rows;
    T* copy = spare;
    const int64_t row_bytes = cols * static_cast<int64_t>(sizeof(T));
    for (int64_t r = 0; r < n; ++r) {
      if (r + kRowsAhead < n) PrefetchToRead(rows + (r + kRowsAhead) * access.row_stride, row_bytes);
      CopyRow(rows + r * access.row_stride, cols, copy + r * cols);
    }
    spare += n * cols;
    return copy;
  }
  // Whether ContiguousRows copies operand i.
  bool Gathered(size_t i, int64_t cols) const { return lay_.access[i].row_stride != cols; }

  // scores[r * ld + c] = q_rows[r] . k[j0 + c] (q_rows: the queries from i0); returns the factor the scores
  // are still to be multiplied by, the scale, which the next pass over them applies. With a mask they are
  // scaled here and masked: -inf where the bool mask is false, plus the float mask (of q's type); the factor
  // is then 1. Keys after the query (causal) are left as they are: the next pass takes at most the whole
  // vectors holding the seen keys (Computed) and zeroes what it took past them.
  template <typename S, typename T = ComputeOf<S>>
  T Scores(const S* q_rows, const S* k, const void* mask, int64_t mask_offset, int64_t i0, int64_t rows, int64_t j0,
           int64_t cols, T* scores, int64_t ld) const {
    const int64_t e = lay_.e;
    Product<S>(library_, rows, cols, e, {q_rows, e, 1}, {k + j0 * e, 1, e}, {scores, ld, 1});
    const T scale = static_cast<T>(scale_);
    if (!lay_.has_mask) return scale;
    constexpr T kMinusInf = -std::numeric_limits<T>::infinity();
    for (int64_t r = 0; r < rows; ++r) {
      T* row = scores + r * ld;
      for (int64_t c = 0; c < cols; ++c) row[c] *= scale;
      const int64_t at = mask_offset + (i0 + r) * lay_.mask_row_stride + j0 * lay_.mask_col_stride;
      if (lay_.mask_type == PrimitiveType::kPred) {
        const uint8_t* m = static_cast<const uint8_t*>(mask) + at;
        for (int64_t c = 0; c < cols; ++c) row[c] = m[c * lay_.mask_col_stride] != 0 ? row[c] : kMinusInf;
      } else {
        const S* m = static_cast<const S*>(mask) + at;  // of q's type
        for (int64_t c = 0; c < cols; ++c) row[c] += ToCompute(m[c * lay_.mask_col_stride]);
      }
    }
    return T{1};
  }

  // Keys [0, KeyEnd) can take part for the queries of [i0, i0 + rows).
  int64_t KeyEnd(int64_t i0, int64_t rows) const { return causal_ ? std::min(lay_.s, i0 + rows) : lay_.s; }
  // Of a block's `cols` keys from j0, those the queries from i0 see.
  SeenKeys Seen(int64_t i0, int64_t j0, int64_t cols) const {
    return causal_ ? SeenKeys{i0 + 1 - j0, 1, cols} : SeenKeys{cols, 0, cols};
  }

  AttentionLayout lay_;
  double scale_;
  bool causal_;
  double dropout_;
  int64_t stream_;
  GemmLibrary library_;
  double keep_scale_;
};

// Forward: tasks are (batch element, run of queries), each run taken kForwardBlock queries at a
// time. Each block keeps, per query row, the running maximum m of its scores, the sum l of exp(score - m) and
// the accumulator exp(score - m) v, rescaled whenever the maximum grows; O = acc / l and the logsumexp
// m + log l at the end.
class AttentionKernel final : public AttentionBase {
 public:
  using AttentionBase::AttentionBase;

  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    DispatchOperandType([&]<typename S>() { RunTyped<S>(inputs, outputs[0]); });
    return absl::OkStatus();
  }

 private:
  // Queries a task takes: the keys and values they see are copied once for all of them, where each block of
  // queries copied its own (the blocks of one sequence copied the first keys again and again). At most
  // kAttentionQueryChunk, and fewer while that leaves fewer than 4 tasks a thread.
  int64_t QueriesPerTask(int64_t block) const {
    const int64_t threads = ThreadPool::Get().size();
    int64_t rows = std::clamp<int64_t>(lay_.l, 1, kAttentionQueryChunk);
    while (rows > block && lay_.batch * ((lay_.l + rows - 1) / rows) < 4 * threads) {
      rows = (rows / 2 + block - 1) / block * block;
    }
    return rows;
  }

  // S: the type of q, k and v; the result is of the compute type.
  template <typename S>
  void RunTyped(std::span<const void* const> inputs, void* output) const {
    using T = ComputeOf<S>;
    const int64_t l = lay_.l, s = lay_.s, e = lay_.e, ev = lay_.ev;
    if (l == 0 || lay_.batch == 0) return;
    constexpr int64_t kQueries = kForwardBlock<S>;
    const int64_t per_task = QueriesPerTask(kQueries);
    const int64_t tasks_per_batch = (l + per_task - 1) / per_task;
    const void* mask = lay_.has_mask ? inputs[3] : nullptr;
    T* out_all = static_cast<T*>(output);
    const uint64_t seed = Seed(inputs);
    ThreadPool::Get().ParallelFor(lay_.batch * tasks_per_batch, [&](int64_t task) {
      const int64_t b = task / tasks_per_batch;
      const int64_t first = (task % tasks_per_batch) * per_task, last = std::min(l, first + per_task);
      T* out = out_all + b * l * (ev + 1);
      const size_t block = static_cast<size_t>(kQueries);
      const size_t values = block * static_cast<size_t>(ev);
      const int64_t task_keys = KeyEnd(first, last - first);
      const int64_t chunk =
          std::clamp<int64_t>(task_keys, 1, kAttentionKeyChunk);  // keys per step; the scores' row stride
      // Copies of the task's queries and the keys and values they see, where they are views; for bf16, the
      // probabilities rounded for their product with v.
      const size_t copies =
          static_cast<size_t>((Gathered(0, e) ? (last - first) * e : 0) + (Gathered(1, e) ? task_keys * e : 0) +
                              (Gathered(2, ev) ? task_keys * ev : 0));
      const size_t scored = block * static_cast<size_t>(chunk);
      const size_t narrowed = std::is_same_v<S, T> ? 0 : scored;
      T* scores = Scratch<T>(scored + 2 * values + 5 * block);
      S* probs_narrowed = Scratch<S, kOperandSlot>(narrowed + copies);
      S* copied = probs_narrowed + narrowed;
      const S* task_q = ContiguousRows<S>(inputs, 0, b, first, last - first, e, copied);
      const S* k = ContiguousRows<S>(inputs, 1, b, 0, task_keys, e, copied);
      const S* v = ContiguousRows<S>(inputs, 2, b, 0, task_keys, ev, copied);
      T* pv = scores + scored;
      T* acc = pv + values;
      T* row_max = acc + values;
      T* row_sum = row_max + block;
      T* rescale = row_sum + block;
      T* log_sum = rescale + block;
      T* block_max = log_sum + block;
      const int64_t mask_offset = lay_.has_mask ? MaskOffset(b) : 0;
      for (int64_t i0 = first; i0 < last; i0 += kQueries) {
        const int64_t rows = std::min(kQueries, last - i0), key_end = KeyEnd(i0, rows);
        const S* q = task_q + (i0 - first) * e;
        if (key_end == 0) std::fill_n(acc, rows * ev, T{0});
        std::fill_n(row_max, rows, -std::numeric_limits<T>::infinity());
        std::fill_n(row_sum, rows, T{0});
        for (int64_t j0 = 0; j0 < key_end; j0 += chunk) {
          const int64_t cols = std::min(chunk, key_end - j0);
          const T factor = Scores<S>(q, k, mask, mask_offset, i0, rows, j0, cols, scores, chunk);
          SoftmaxStep(scores, chunk, rows, Seen(i0, j0, cols), factor, !lay_.has_mask, row_max, row_sum, rescale,
                      block_max);
          if (dropout_ > 0)
            Dropout<T>(seed, b, i0, rows, j0, cols, scores, chunk);  // after the sums: softmax, then drop
          const S* probs = AsOperand<S>(scores, rows, cols, chunk, probs_narrowed);
          // The first step's products are the accumulator; a later step's are added to it, rescaled.
          Product<S>(library_, rows, ev, cols, {probs, chunk, 1}, {v + j0 * ev, ev, 1}, {j0 == 0 ? acc : pv, ev, 1});
          if (j0 > 0) RescaleAndAdd(acc, pv, rows, ev, rescale);
        }
        Logs(row_sum, rows, log_sum);
        FinishRows(acc, row_max, row_sum, log_sum, rows, ev, s == 0, out + i0 * (ev + 1));
      }
    });
  }
};

// Backward (FlashAttention-2): per batch element, D = rowsum(dO * O); for each block of keys, over the
// blocks of queries that see it, P = exp(scores - logsumexp), dV += P^T dO, dP = dO V^T,
// dS = P * (dP - D) * scale, dK += dS^T Q, dQ += dS K. A task owns its batch element's dq, dk and dv.
class AttentionGradKernel final : public AttentionBase {
 public:
  using AttentionBase::AttentionBase;

  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    DispatchOperandType([&]<typename S>() { RunTyped<S>(inputs, outputs[0]); });
    return absl::OkStatus();
  }

 private:
  // S: the type of q, k, v, d(output) and the gradients; the forward result is of the compute type T.
  template <typename S>
  void RunTyped(std::span<const void* const> inputs, void* output) const {
    using T = ComputeOf<S>;
    constexpr bool kRounded = !std::is_same_v<S, T>;
    const int64_t per_batch = PerBatch();
    if (lay_.batch == 0 || per_batch == 0) return;
    S* grads_all = static_cast<S*>(output);
    // Written through result views, the gradients of a group of consecutive batch elements (the heads of
    // one sequence, whose rows interleave in the projections' [B, T, 3, H, D]) are summed in a task's
    // scratch, then put in place a row of every head at a time: the task's stores sweep its part of the
    // result in order. Put in place a head at a time, rows 1.5 KiB apart, the stores missed the cache
    // (the kernel 0.75 ms slower a layer, as slow as the concatenation they replace). bf16 gradients are
    // summed in f32 there too, and rounded once as they are stored.
    const bool viewed = !lay_.result_access.empty();
    const bool aside = viewed || kRounded;
    const int64_t group = viewed ? GroupOfBatchElements(static_cast<int64_t>(sizeof(T)) * per_batch) : 1;
    ThreadPool::Get().ParallelFor((lay_.batch + group - 1) / group, [&](int64_t task) {
      const int64_t first = task * group, count = std::min(group, lay_.batch - first);
      const size_t summed = aside ? static_cast<size_t>(count * per_batch) : 0;
      // The work of a batch element's sums, the group's sums, a copy of the forward result if it is a view;
      // the copies of the other view operands and, for bf16, a step's probabilities or score gradients
      // rounded for their products.
      T* work = Scratch<T>(WorkElements() + summed + CopiesOf({3}));
      T* sums = work + WorkElements();
      S* narrowed = Scratch<S, kOperandSlot>((kRounded ? Scored() : 0) + CopiesOf({0, 1, 2, 4}));
      for (int64_t b = first; b < first + count; ++b) {
        T* dq = sums + (b - first) * per_batch;
        if constexpr (!kRounded) {
          if (!aside) dq = grads_all + b * per_batch;
        }
        SumGradients<S>(inputs, b, work, sums + summed, narrowed, dq);
      }
      if (viewed) {
        PutInPlace<S>(sums, first, count, grads_all);
      } else if constexpr (kRounded) {
        ToBf16(sums, count * per_batch, grads_all + first * per_batch);
      }
    });
  }

  // Elements of dq, dk and dv for a batch element.
  int64_t PerBatch() const { return lay_.l * lay_.e + lay_.s * lay_.e + lay_.s * lay_.ev; }
  // Queries per step over a block of keys.
  int64_t Queries() const { return std::clamp<int64_t>(lay_.l, 1, kAttentionQueryChunk); }
  // Rows and row widths of q, k, v, the forward result and d(output).
  static constexpr size_t kOperands = 5;
  std::array<int64_t, kOperands> Widths() const { return {lay_.e, lay_.e, lay_.ev, lay_.ev + 1, lay_.ev}; }
  std::array<int64_t, kOperands> Lengths() const { return {lay_.l, lay_.s, lay_.s, lay_.l, lay_.l}; }
  // Elements of the copies of those of `operands` that are views.
  size_t CopiesOf(std::initializer_list<size_t> operands) const {
    size_t copies = 0;
    for (size_t i : operands) {
      if (Gathered(i, Widths()[i])) copies += static_cast<size_t>(Lengths()[i] * Widths()[i]);
    }
    return copies;
  }
  // Elements of a step's scores (kBlock a row), and of a block product's result.
  size_t Scored() const { return static_cast<size_t>(Queries() * kBlock); }
  size_t Wide() const { return static_cast<size_t>(std::max(Queries(), kBlock) * std::max(lay_.e, lay_.ev)); }
  // Elements of the work of one batch element's sums: three steps of scores (P, dS, P with dropout), a
  // product, and the logsumexp and D of every query.
  size_t WorkElements() const { return 3 * Scored() + Wide() + 2 * static_cast<size_t>(lay_.l); }

  // Sums the gradients of batch element b into dq (dk and dv after it, packed; each element written by the
  // first product that reaches it, zeroed where none does: S = 0, key blocks no query sees). `p`: the
  // work (WorkElements); `forward_copy`: where the rows of the forward result go if it is a view
  // (CopiesOf({3})); `narrowed`: for bf16 the rounded operands of a step's products (Scored), then where the
  // rows of the other view operands go.
  template <typename S, typename T = ComputeOf<S>>
  void SumGradients(std::span<const void* const> inputs, int64_t b, T* p, T* forward_copy, S* narrowed, T* dq) const {
    const int64_t l = lay_.l, s = lay_.s, e = lay_.e, ev = lay_.ev;
    const int64_t queries = Queries();
    const size_t scored = Scored(), wide = Wide();
    const void* mask = lay_.has_mask ? inputs[5] : nullptr;
    const uint64_t seed = Seed(inputs);
    T* dk = dq + l * e;
    T* dv = dk + s * e;
    if (s == 0) std::fill_n(dq, l * e, T{0});  // no key block writes it
    S* copied = narrowed + (std::is_same_v<S, T> ? 0 : scored);
    const auto rows_of = [&](size_t i) {
      return ContiguousRows<S>(inputs, i, b, 0, Lengths()[i], Widths()[i], copied);
    };
    const S *q = rows_of(0), *k = rows_of(1), *v = rows_of(2), *dout = rows_of(4);
    const T* fwd = ContiguousRows<T>(inputs, 3, b, 0, l, ev + 1, forward_copy);
    T* ds = p + scored;
    T* dropped = ds + scored;  // P with the dropout applied (P itself without dropout)
    T* product = dropped + scored;
    T* lse = product + wide;
    T* delta = lse + l;
    for (int64_t i0 = 0; i0 < l; i0 += queries) {  // bf16: d(output) widened a step of queries at a time
      const int64_t rows = std::min(queries, l - i0);
      RowDots(AsCompute<S>(dout + i0 * ev, rows * ev, product), fwd + i0 * (ev + 1), rows, ev, delta + i0);
    }
    for (int64_t i = 0; i < l; ++i) lse[i] = fwd[i * (ev + 1) + ev];
    const T scale = static_cast<T>(scale_);
    const int64_t mask_offset = lay_.has_mask ? MaskOffset(b) : 0;
    // dst (m x n) = a b where `first`, else += a b: the first step that reaches a gradient's rows writes them.
    const auto sum_product = [&](bool first, int64_t m, int64_t n, int64_t kk, MatrixView<const S> a,
                                 MatrixView<const S> bv, T* dst) {
      Product<S>(library_, m, n, kk, a, bv, {first ? dst : product, n, 1});
      if (!first) AddTo(dst, product, m * n);
    };
    for (int64_t j0 = 0; j0 < s; j0 += kBlock) {
      const int64_t cols = std::min(kBlock, s - j0);
      // Causal: the queries before j0 see none of these keys, and with none after them either their
      // gradients are 0.
      const int64_t first_query = causal_ ? j0 : 0;
      if (first_query >= l) {
        std::fill_n(dk + j0 * e, cols * e, T{0});
        std::fill_n(dv + j0 * ev, cols * ev, T{0});
      }
      for (int64_t i0 = first_query; i0 < l; i0 += queries) {
        const int64_t rows = std::min(queries, l - i0);
        const T factor = Scores<S>(q + i0 * e, k, mask, mask_offset, i0, rows, j0, cols, p, kBlock);
        ProbabilityBlock(p, kBlock, rows, Seen(i0, j0, cols), factor, !lay_.has_mask, lse + i0);
        // With dropout Z (0 or 1 / (1 - dropout)): O = (P Z) V, so dV = (P Z)^T dO, dP = (dO V^T) Z, and
        // D = rowsum(dO * O) is still rowsum(P * dP).
        const T* kept = p;
        if (dropout_ > 0) {
          for (int64_t r = 0; r < rows; ++r) std::copy_n(p + r * kBlock, cols, dropped + r * kBlock);
          Dropout<T>(seed, b, i0, rows, j0, cols, dropped, kBlock);
          kept = dropped;
        }
        // dV[j0:] += (P Z)^T dO[i0:]
        const S* kept_operand = AsOperand<S>(kept, rows, cols, kBlock, narrowed);
        sum_product(i0 == first_query, cols, ev, rows, {kept_operand, 1, kBlock}, {dout + i0 * ev, ev, 1},
                    dv + j0 * ev);
        // dS = P * (dO V^T Z - D) * scale; P Z / P is Z where P > 0 (and dS is 0 where P is)
        Product<S>(library_, rows, cols, ev, {dout + i0 * ev, ev, 1}, {v + j0 * ev, 1, ev}, {ds, kBlock, 1});
        ScoreGradients(p, dropout_ > 0 ? kept : nullptr, ds, kBlock, rows, cols, delta + i0, scale);
        // dK[j0:] += dS^T Q[i0:], dQ[i0:] += dS K[j0:]
        const S* ds_operand = AsOperand<S>(ds, rows, cols, kBlock, narrowed);
        sum_product(i0 == first_query, cols, e, rows, {ds_operand, 1, kBlock}, {q + i0 * e, e, 1}, dk + j0 * e);
        sum_product(j0 == 0, rows, e, cols, {ds_operand, kBlock, 1}, {k + j0 * e, e, 1}, dq + i0 * e);
      }
    }
  }

  // How many consecutive batch elements a task of a gradient written through result views takes: the
  // heads of one sequence (the last batch dim), or the most of them that divides it, keeps their sums
  // (`bytes` each) within half a core's L2 and leaves a task for every thread.
  int64_t GroupOfBatchElements(int64_t bytes) const {
    constexpr int64_t kSummedBytes = int64_t{1} << 20;
    const int64_t heads = lay_.batch_dims.empty() ? 1 : std::max<int64_t>(lay_.batch_dims.back(), 1);
    const int64_t threads = ThreadPool::Get().size();
    int64_t group = std::min({heads, kSummedBytes / std::max<int64_t>(bytes, 1), (lay_.batch + threads - 1) / threads});
    while (group > 1 && heads % group != 0) --group;
    return std::max<int64_t>(group, 1);
  }

  // Writes the summed dq, dk and dv of batch elements [first, first + count) (each packed in `sums`)
  // through the result views: row r of each part of every element (in the projections' layout, one
  // stretch of memory), then row r + 1.
  template <typename S, typename T = ComputeOf<S>>
  void PutInPlace(const T* sums, int64_t first, int64_t count, S* result) const {
    const int64_t per_batch = PerBatch();
    // bf16: rounded in one pass first (a call per row of 32 was most of the attention's rounding).
    S* rounded = nullptr;
    if constexpr (!std::is_same_v<S, T>) rounded = Scratch<S, kStoredSlot>(static_cast<size_t>(count * per_batch));
    const S* stored = AsOperand<S>(sums, 1, count * per_batch, count * per_batch, rounded);
    const std::array<GradientPart, 3> parts = GradientParts(lay_.l, lay_.s, lay_.e, lay_.ev);
    std::vector<S*> places;  // of row 0, by part and element
    for (size_t i = 0; i < 3; ++i) {
      for (int64_t b = first; b < first + count; ++b)
        places.push_back(result + lay_.result_access[i].Start(b, lay_.batch_dims));
    }
    for (int64_t r = 0; r < std::max(lay_.l, lay_.s); ++r) {
      for (size_t i = 0; i < 3; ++i) {
        if (r >= parts[i].rows) continue;
        const int64_t row = r * lay_.result_access[i].row_stride;
        for (int64_t b = 0; b < count; ++b) {
          CopyRow(stored + b * per_batch + parts[i].start + r * parts[i].cols, parts[i].cols,
                  places[i * static_cast<size_t>(count) + static_cast<size_t>(b)] + row);
        }
      }
    }
  }
};

// The layout of the operands but the seed. A result written through views (result_viewed) has q's type
// and any dims: the views say where its elements are.
absl::StatusOr<AttentionLayout> CheckLayout(std::span<const ArrayShape> operands, const ArrayShape& result, bool grad,
                                            bool result_viewed) {
  const size_t base = grad ? 5 : 3;
  auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " (operands ", ShapesText(operands), ", result ", ShapesText(std::span(&result, 1)),
                     "; expects q [B..., L, E], k [B..., S, E], v [B..., S, Ev]",
                     grad ? ", the forward result [B..., L, Ev + 1], d(output) [B..., L, Ev]" : "",
                     ", optionally a mask of rank B+2 broadcastable to [B..., L, S])"));
  };
  if (operands.size() != base && operands.size() != base + 1) {
    return fail(absl::StrCat("expects ", base, " or ", base + 1, " operands"));
  }
  const ArrayShape& q = operands[0];
  AttentionLayout lay;
  lay.type = q.type;
  if (q.type != PrimitiveType::kF32 && q.type != PrimitiveType::kF64 && q.type != PrimitiveType::kBF16) {
    return fail("computes in f32, f64 or bf16 only");
  }
  // The forward result (the output and each row's logsumexp) is of the type the kernels compute in.
  const PrimitiveType computed = q.type == PrimitiveType::kBF16 ? PrimitiveType::kF32 : q.type;
  if (q.dims.size() < 2) return fail("q needs rank >= 2");
  const size_t rank = q.dims.size();
  lay.batch_dims.assign(q.dims.begin(), q.dims.end() - 2);
  for (int64_t d : lay.batch_dims) lay.batch *= d;
  for (size_t i = 0; i < base; ++i) {
    if (operands[i].type != (i == 3 ? computed : q.type) || !BatchDimsAre(operands[i], lay.batch_dims)) {
      return fail(absl::StrCat(grad ? absl::StrCat("q, k, v and d(output) need one type, the forward result ",
                                                   PrimitiveTypeName(computed), ",")
                                    : "q, k and v need one type",
                               " and the same batch dims"));
    }
  }
  lay.l = q.dims[rank - 2];
  lay.e = q.dims[rank - 1];
  lay.s = operands[1].dims[rank - 2];
  lay.ev = operands[2].dims[rank - 1];
  if (operands[1].dims[rank - 1] != lay.e || operands[2].dims[rank - 2] != lay.s) {
    return fail("k must be [B..., S, E] and v [B..., S, Ev]");
  }
  if (grad && (operands[3].dims[rank - 2] != lay.l || operands[3].dims[rank - 1] != lay.ev + 1 ||
               operands[4].dims[rank - 2] != lay.l || operands[4].dims[rank - 1] != lay.ev)) {
    return fail("the forward result must be [B..., L, Ev + 1] and d(output) [B..., L, Ev]");
  }
  if (operands.size() == base + 1) {
    const ArrayShape& mask = operands[base];
    lay.has_mask = true;
    lay.mask_type = mask.type;
    if (mask.type != PrimitiveType::kPred && mask.type != q.type) return fail("the mask must be pred or q's type");
    if (mask.dims.size() != rank) return fail("the mask must have q's rank");
    std::vector<int64_t> scores = lay.batch_dims;
    scores.push_back(lay.l);
    scores.push_back(lay.s);
    std::vector<int64_t> strides(rank, 0);
    int64_t stride = 1;
    for (size_t d = rank; d-- > 0;) {
      if (mask.dims[d] != 1 && mask.dims[d] != scores[d]) return fail("the mask does not broadcast to the scores");
      strides[d] = mask.dims[d] == 1 ? 0 : stride;
      stride *= mask.dims[d];
    }
    lay.mask_batch_strides.assign(strides.begin(), strides.end() - 2);
    lay.mask_row_stride = strides[rank - 2];
    lay.mask_col_stride = strides[rank - 1];
  }
  for (size_t i = 0; i < base; ++i) {  // row-major until a view says otherwise
    const std::vector<int64_t>& dims = operands[i].dims;
    OperandAccess& access = lay.access.emplace_back();
    access.row_stride = dims[rank - 1];
    int64_t stride = dims[rank - 2] * dims[rank - 1];
    access.batch_strides.resize(rank - 2);
    for (size_t d = rank - 2; d-- > 0;) {
      access.batch_strides[d] = stride;
      stride *= dims[d];
    }
  }
  std::vector<int64_t> want = lay.batch_dims;
  if (grad) {
    want.push_back(lay.l * lay.e + lay.s * lay.e + lay.s * lay.ev);  // each term bounded by an operand's size
  } else {
    want.push_back(lay.l);
    want.push_back(lay.ev + 1);
  }
  const PrimitiveType result_type = grad ? q.type : computed;
  if (result.type != result_type || (!result_viewed && result.dims != want)) {
    return fail(
        absl::StrCat("the result must be ", PrimitiveTypeName(result_type), "[", absl::StrJoin(want, ","), "]"));
  }
  return lay;
}

// The parameters, then the layout of the operands but the seed.
absl::StatusOr<AttentionLayout> CheckParamsAndLayout(std::span<const ArrayShape> operands, const ArrayShape& result,
                                                     bool grad, const AttentionParams& params, bool result_viewed) {
  if (!std::isfinite(params.scale))
    return absl::InvalidArgumentError(absl::StrCat("the scale ", params.scale, " is not finite"));
  if (!(params.dropout >= 0 && params.dropout <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("the dropout probability ", params.dropout, " is not in [0, 1]"));
  }
  if (params.dropout == 0) return CheckLayout(operands, result, grad, result_viewed);
  if (operands.empty() || operands.back().type != PrimitiveType::kS64 || !operands.back().dims.empty()) {
    return absl::InvalidArgumentError("with dropout, the last operand must be the s64[] seed");
  }
  return CheckLayout(operands.first(operands.size() - 1), result, grad, result_viewed);
}

}  // namespace

std::array<GradientPart, 3> GradientParts(int64_t l, int64_t s, int64_t e, int64_t ev) {
  return {GradientPart{l, e, 0}, GradientPart{s, e, l * e}, GradientPart{s, ev, l * e + s * e}};
}

int64_t OperandAccess::Start(int64_t b, std::span<const int64_t> batch_dims) const {
  return offset + BatchOffset(b, batch_dims, batch_strides);
}

absl::StatusOr<AttentionLayout> CheckAttention(std::span<const ArrayShape> operands, const ArrayShape& result,
                                               bool grad, const AttentionParams& params,
                                               std::span<const OperandView> views,
                                               std::span<const OperandView> result_views) {
  ASSIGN_OR_RETURN(const std::vector<ArrayShape> read, ShapesRead(views, operands));
  const size_t viewable = grad ? 5 : 3;
  for (size_t i = viewable; i < views.size(); ++i) {
    if (!views[i].dims.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input ", i, " is read through a view, but only q, k, v and the gradient operands may be"));
    }
  }
  if (!result_views.empty() && (!grad || result_views.size() != 3)) {
    return absl::InvalidArgumentError(
        "only an attention's gradient writes through result views, and then one each for dq, dk and dv");
  }
  ASSIGN_OR_RETURN(AttentionLayout layout, CheckParamsAndLayout(read, result, grad, params, !result_views.empty()));
  const auto access_of = [](const OperandView& view) {
    return OperandAccess{view.offset, {view.strides.begin(), view.strides.end() - 2}, view.strides.end()[-2]};
  };
  for (size_t i = 0; i < views.size(); ++i) {
    if (!views[i].dims.empty()) layout.access[i] = access_of(views[i]);
  }
  const std::array<GradientPart, 3> parts = GradientParts(layout.l, layout.s, layout.e, layout.ev);
  for (size_t i = 0; i < result_views.size(); ++i) {
    const OperandView& view = result_views[i];
    std::vector<int64_t> want = layout.batch_dims;
    want.insert(want.end(), {parts[i].rows, parts[i].cols});
    absl::Status checked = CheckOperandView(view, result);
    if (checked.ok() && view.dims != want) {
      checked = absl::InvalidArgumentError(absl::StrCat("has dims other than [", absl::StrJoin(want, ","), "]"));
    }
    if (!checked.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("result view ", i, " (of ",
                                                     i == 0   ? "dq"
                                                     : i == 1 ? "dk"
                                                              : "dv",
                                                     "): ", checked.message()));
    }
    layout.result_access.push_back(access_of(view));
  }
  if (!result_views.empty() && !ViewsTile(result_views, result.numel())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the result views of dq, dk and dv do not write every element of the result ", result.ToString(),
                     " exactly once"));
  }
  return layout;
}

std::unique_ptr<Kernel> MakeAttentionKernel(AttentionLayout layout, const AttentionParams& params) {
  return std::make_unique<AttentionKernel>(std::move(layout), params);
}

std::unique_ptr<Kernel> MakeAttentionGradKernel(AttentionLayout layout, const AttentionParams& params) {
  return std::make_unique<AttentionGradKernel>(std::move(layout), params);
}

}  // namespace lazyrt::pjrt
