#include "pjrt_sim/kernels/kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <type_traits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/hlo.h"
#include "pjrt_sim/kernels/adamw_update.h"
#include "pjrt_sim/kernels/attention.h"
#include "pjrt_sim/kernels/chunks.h"
#include "pjrt_sim/kernels/fused_program.h"
#include "pjrt_sim/kernels/gemm.h"
#include "pjrt_sim/kernels/normalize.h"
#include "pjrt_sim/kernels/prefetch.h"
#include "pjrt_sim/kernels/strided_view.h"
#include "pjrt_sim/kernels/thread_scratch.h"
#include "pjrt_sim/module_verifier.h"
#include "pjrt_sim/status_macros.h"
#include "pjrt_sim/thread_pool.h"
#include "pjrt_sim/vector_math.h"

namespace lazyrt::pjrt {

bool SplitsIntoChunks(int64_t n, int64_t grain) { return grain > 0 && grain < n; }

void ForEachChunk(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (!SplitsIntoChunks(n, grain)) {
    fn(0, n);
    return;
  }
  const int64_t tasks = (n + grain - 1) / grain;
  ThreadPool::Get().ParallelFor(tasks, [&](int64_t t) { fn(t * grain, std::min(n, (t + 1) * grain)); });
}

namespace {

constexpr int64_t kFusedBlock = FusedProgram::kBlock;

// Whether `count` operands of `size` elements, `stride` apart, fit in `available` elements; no
// product may overflow (a wrapped product could look small).
bool BatchFits(int64_t count, int64_t stride, int64_t size, int64_t available) {
  if (count == 0) return true;
  int64_t last = 0;
  return !__builtin_mul_overflow(count - 1, stride, &last) && !__builtin_add_overflow(last, size, &last) &&
         last <= available;
}

// The thread scratch arrays (ThreadScratch) of this file's kernels: a fused program's registers (and a
// widened product's operands), and a reduction's sums.
struct ProgramScratch;
struct ReductionSums;

// Per-thread scratch for fused programs: grown once, then reused by every kernel on that thread.
void* Scratch(size_t bytes) { return ThreadScratch<ProgramScratch>(bytes); }

// Whether a block's worth of what `program` reads in order and of its results stored over its space (of
// `stored` types) fits beside the block being computed (kMostPrefetchedBytes), to be prefetched.
bool PrefetchFits(const FusedProgram& program, std::span<const PrimitiveType> stored) {
  int64_t bytes = program.prefetched_bytes_per_point();
  for (PrimitiveType type : stored) bytes += ByteWidth(type);
  return bytes * kFusedBlock <= kMostPrefetchedBytes;
}

// The arrays of a fused kernel's stored results (results `first`... of its program, each an array over
// the iteration space), for one run. A result held exactly as it is stored (f32 as f32, not bf16 as f32)
// is computed straight into its array: a store from a register was a pass over every result. Not where
// the array is named twice or read as an input (which a valid executable never does): the program reads
// and writes a block at a time.
class ResultArrays {
 public:
  ResultArrays(const FusedProgram& program, std::span<const PrimitiveType> types, std::span<const void* const> inputs,
               std::span<void* const> arrays, size_t first)
      : program_(program), types_(types), arrays_(arrays.first(types.size())), first_(first), in_place_(types.size()) {
    for (size_t r = first_; r < types_.size(); ++r) {
      const auto same = [&](const void* other) { return other == arrays_[r]; };
      in_place_[r] = program_.result_type(r) == types_[r] && !Is16BitFloat(types_[r]) &&
                     std::ranges::none_of(inputs, same) && std::ranges::count_if(arrays_, same) == 1;
    }
  }

  // Prefetches the inputs the program loads for points [begin, begin + n) (none if n <= 0) and the results
  // stored there, while the block before is computed (kernels/prefetch.h).
  void Prefetch(std::span<const void* const> inputs, int64_t begin, int64_t n) const {
    if (n <= 0) return;
    program_.Prefetch(inputs, begin, n);
    for (size_t r = first_; r < types_.size(); ++r) {
      const int64_t bytes = ByteWidth(types_[r]);
      PrefetchToWrite(static_cast<char*>(arrays_[r]) + begin * bytes, n * bytes);
    }
  }

  // Evaluates points [begin, begin + n) with `scratch` and stores the results there; returns the block
  // of result 0 (in its compute type).
  const void* Evaluate(std::span<const void* const> inputs, int64_t begin, int64_t n, void* scratch) const {
    absl::InlinedVector<void*, 4> dsts(types_.size()), computed_into(types_.size());
    for (size_t r = first_; r < types_.size(); ++r) {
      dsts[r] = static_cast<char*>(arrays_[r]) + begin * ByteWidth(types_[r]);
      computed_into[r] = in_place_[r] ? dsts[r] : nullptr;
    }
    const void* values = program_.Evaluate(inputs, begin, n, scratch, computed_into);
    for (size_t r = first_; r < types_.size(); ++r) {
      const void* block = program_.ResultBlock(scratch, r);
      if (block != dsts[r]) StoreBlock(block, ComputeTypeOf(program_.result_type(r)), types_[r], dsts[r], n);
    }
    return values;
  }

 private:
  const FusedProgram& program_;
  std::span<const PrimitiveType> types_;
  std::span<void* const> arrays_;
  size_t first_;
  absl::InlinedVector<bool, 4> in_place_;
};

// Evaluates a fused program over its output's shape and stores each of its results (the output, then
// the extra outputs).
class LoopKernel final : public Kernel {
 public:
  LoopKernel(FusedProgram program, ArrayShape output, std::vector<PrimitiveType> result_types, int64_t grain)
      : program_(std::move(program)),
        output_(std::move(output)),
        result_types_(std::move(result_types)),
        grain_(grain),
        prefetches_(PrefetchFits(program_, result_types_)) {}

  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    const ResultArrays arrays(program_, result_types_, inputs, outputs, 0);
    ForEachChunk(output_.numel(), grain_, [&](int64_t begin, int64_t end) {
      void* scratch = Scratch(program_.scratch_bytes());
      program_.Prepare(inputs, scratch);
      for (int64_t b = begin; b < end; b += kFusedBlock) {
        const int64_t n = std::min(kFusedBlock, end - b);
        if (prefetches_) arrays.Prefetch(inputs, b + n, std::min(kFusedBlock, end - b - n));
        arrays.Evaluate(inputs, b, n, scratch);
      }
    });
    return absl::OkStatus();
  }
  bool SplitsOverPool() const override { return SplitsIntoChunks(output_.numel(), grain_); }

 private:
  FusedProgram program_;
  ArrayShape output_;
  std::vector<PrimitiveType> result_types_;
  int64_t grain_;
  bool prefetches_;  // the next block, while one is computed: where that fits beside it (kMostPrefetchedBytes)
};

// Sums and products of f32 values (f32, bf16, f16 arrays) accumulate in f64, so that a sum of a million
// elements is off by about 1e-16 relative before its one final rounding, not by the 1e-5 of adding in
// f32 (PyTorch's pairwise sum reaches ~5e-8). Max, min, all and any are exact in any type and stay in
// it. The accumulation order is fixed by the shape alone, so results do not depend on the thread
// count, and a fused reduction (its producer computed in the same loop) gives the bits of the unfused one.
bool RoundsEachStep(Combiner combiner) {
  switch (combiner) {
    case Combiner::kSum:
    case Combiner::kProd: return true;
    case Combiner::kMax:
    case Combiner::kMin:
    case Combiner::kAll:
    case Combiner::kAny: return false;
  }
  return true;  // unreachable: the switch covers every combiner
}

// A run's values are combined in kLanes interleaved partial results, then the lanes pairwise: independent
// chains that vectorize (a single chain waits on each add), in an order fixed by the run's length.
constexpr int64_t kLanes = 8;

// A column reduction's runs are cut into chunks of at least this many points, at most kMaxColumnChunks,
// where its columns are few enough for a set of accumulators per chunk.
constexpr int64_t kColumnChunkPoints = 1 << 16, kMaxColumnChunks = 8, kMaxChunkedColumns = 1 << 16;

template <typename A>
constexpr ComputeType kComputeTypeOf = std::is_same_v<A, double>    ? ComputeType::kF64
                                       : std::is_same_v<A, int32_t> ? ComputeType::kS32
                                       : std::is_same_v<A, int64_t> ? ComputeType::kS64
                                       : std::is_same_v<A, uint8_t> ? ComputeType::kPred
                                                                    : ComputeType::kF32;

// acc[j] = combine(acc[j], x[j]): the combiner chosen outside the loop, so that each loop vectorizes.
template <typename A, typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE void Accumulate(Combiner combiner, A* acc, const T* x, int64_t n) {
  switch (combiner) {
#define LAZYRT_X(name, ...)                                                                               \
  case Combiner::k##name:                                                                                 \
    for (int64_t j = 0; j < n; ++j) acc[j] = Combine<A>(Combiner::k##name, acc[j], static_cast<A>(x[j])); \
    return;
    LAZYRT_REDUCE_COMBINERS(LAZYRT_X)
#undef LAZYRT_X
  }
}

// kLanes 4-byte values as one vector.
template <typename A>
struct LaneVectorOf;
template <>
struct LaneVectorOf<float> {
  using type = float __attribute__((vector_size(kLanes * sizeof(float))));
};
template <>
struct LaneVectorOf<int32_t> {
  using type = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));
};
template <Combiner kCombiner, typename A, typename T>
[[gnu::always_inline]] inline A CombineLanes(A a, const T* x, int64_t n) {
  A lanes[kLanes];
  std::fill_n(lanes, kLanes, ReduceIdentity<A>(kCombiner));
  int64_t i = 0;
  // Max and min of 4-byte values a vector of the lanes at a time, each lane as Maximum and Minimum compute it
  // (NaN-propagating for floats): the scalar lanes compiled to a compare and a conditional move per element
  // (micro BM_Reduce max_each_row/1024: 10 GB/s against sum_each_row's 34, 19 GB/s now).
  if constexpr ((kCombiner == Combiner::kMax || kCombiner == Combiner::kMin) && std::is_same_v<A, T> &&
                (std::is_same_v<A, float> || std::is_same_v<A, int32_t>)) {
    using V = typename LaneVectorOf<A>::type;
    static_assert(sizeof(V) == sizeof(lanes));
    V v;
    std::memcpy(&v, lanes, sizeof(v));
    for (; i + kLanes <= n; i += kLanes) {
      V next;
      std::memcpy(&next, x + i, sizeof(next));
      const auto keep = kCombiner == Combiner::kMax ? v > next : v < next;  // lanes where v stays
      if constexpr (std::is_floating_point_v<A>) {
        v = ((v != v) | keep) ? v : next;  // NOLINT(misc-redundant-expression): the NaN test
      } else {
        v = keep ? v : next;
      }
    }
    std::memcpy(lanes, &v, sizeof(v));
  }
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] = Combine<A>(kCombiner, lanes[l], static_cast<A>(x[i + l]));
  }
  for (int64_t l = 0; i < n; ++i, ++l) lanes[l] = Combine<A>(kCombiner, lanes[l], static_cast<A>(x[i]));
  for (int64_t width = kLanes / 2; width > 0; width /= 2) {
    for (int64_t l = 0; l < width; ++l) lanes[l] = Combine<A>(kCombiner, lanes[l], lanes[l + width]);
  }
  return Combine<A>(kCombiner, a, lanes[0]);
}

// a combined with x[0..n): the combiner chosen outside the loop.
template <typename A, typename T>
LAZYRT_VECTOR_CLONES_TEMPLATE A CombineRun(Combiner combiner, A a, const T* x, int64_t n) {
  switch (combiner) {
#define LAZYRT_X(name, ...) \
  case Combiner::k##name: return CombineLanes<Combiner::k##name, A, T>(a, x, n);
    LAZYRT_REDUCE_COMBINERS(LAZYRT_X)
#undef LAZYRT_X
  }
  return a;
}

// Reduces the values of a fused program over some dims of its iteration space. Every output element
// accumulates its values in the order of the points (so every path gives the same bits):
//  - rows: the reduced dims form a suffix; each output element reduces one contiguous run, and rows
//    are independent, so they are spread over the pool;
//  - columns: the last dims are kept; each run of them adds elementwise into a run of outputs;
//  - otherwise each value goes to its output element one at a time.
class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(FusedProgram program, ArrayShape space, std::vector<int64_t> reduce_dims, Combiner combiner,
               ArrayShape output, std::vector<PrimitiveType> result_types, int64_t grain)
      : program_(std::move(program)),
        space_(std::move(space)),
        combiner_(combiner),
        output_(std::move(output)),
        result_types_(std::move(result_types)),
        grain_(grain),
        prefetches_(PrefetchFits(program_, std::span(result_types_).subspan(1))) {
    const size_t rank = space_.dims.size();
    std::vector<bool> reduced(rank, false);
    for (int64_t d : reduce_dims) reduced[static_cast<size_t>(d)] = true;
    size_t first_reduced = rank;
    while (first_reduced > 0 && reduced[first_reduced - 1]) --first_reduced;
    row_reduce_ =
        std::all_of(reduced.begin(), reduced.begin() + static_cast<long>(first_reduced), [](bool r) { return !r; });
    row_length_ = 1;
    for (size_t d = first_reduced; d < rank; ++d) row_length_ *= space_.dims[d];
    kept_suffix_ = rank;
    while (kept_suffix_ > 0 && !reduced[kept_suffix_ - 1]) --kept_suffix_;
    run_length_ = 1;
    for (size_t d = kept_suffix_; d < rank; ++d) run_length_ *= space_.dims[d];
    out_strides_.assign(rank, 0);
    int64_t stride = 1;
    for (size_t d = rank; d-- > 0;) {
      if (!reduced[d]) {
        out_strides_[d] = stride;
        stride *= space_.dims[d];
      }
    }
  }

  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    DispatchComputeType(output_.type, [&]<typename T>() {
      if constexpr (std::is_same_v<T, float>) {
        if (RoundsEachStep(combiner_)) return RunTyped<T, double>(inputs, outputs);
      }
      RunTyped<T, T>(inputs, outputs);
    });
    return absl::OkStatus();
  }
  bool SplitsOverPool() const override {
    const int64_t outputs = output_.numel();
    if (row_reduce_) return SplitsIntoChunks(outputs, RowsPerTask());
    return run_length_ > 1 && outputs == run_length_ && ColumnChunks() > 1;
  }

 private:
  // The values of points [begin, begin + n), with the extra results (sibling fusion) stored there. Every
  // way through the space takes its blocks in order: the next block's points are asked for meanwhile, as a
  // loop's are. The GPT's GELU gradients (a [4096, 512] column reduction storing the gradient too) computed
  // their erf and exponential, then waited on memory for the next block, with nothing overlapping the two.
  template <typename T>
  const T* Evaluate(std::span<const void* const> inputs, const ResultArrays& results, int64_t begin, int64_t n,
                    void* scratch) const {
    if (prefetches_) results.Prefetch(inputs, begin + n, std::min(n, space_.numel() - begin - n));
    return static_cast<const T*>(results.Evaluate(inputs, begin, n, scratch));
  }

  // Values computed in T, accumulated in A.
  template <typename T, typename A>
  void RunTyped(std::span<const void* const> inputs, std::span<void* const> arrays) const {
    void* output = arrays[0];
    const ResultArrays results(program_, result_types_, inputs, arrays, 1);
    const int64_t outputs = output_.numel();
    const A identity = ReduceIdentity<A>(combiner_);
    if (row_reduce_) {
      const int64_t rows_per_task = RowsPerTask();
      ForEachChunk(outputs, rows_per_task >= outputs ? 0 : rows_per_task, [&](int64_t r0, int64_t r1) {
        void* scratch = Scratch(program_.scratch_bytes());
        program_.Prepare(inputs, scratch);
        A* const acc = Sums<A>(r1 - r0, identity);
        // Rows shorter than a block are evaluated a block of whole rows at a time (the program's cost per
        // evaluation, ~15 ns a step, was paid per row: 4096 rows of 114 logits), each row still reduced
        // by one CombineRun over its values, as a row of one block always was: the same bits.
        const int64_t rows_per_block = row_length_ > 0 && row_length_ < kFusedBlock ? kFusedBlock / row_length_ : 1;
        if (rows_per_block > 1) {
          for (int64_t r = r0; r < r1; r += rows_per_block) {
            const int64_t rows = std::min(rows_per_block, r1 - r);
            const T* x = Evaluate<T>(inputs, results, r * row_length_, rows * row_length_, scratch);
            for (int64_t i = 0; i < rows; ++i) {
              acc[r - r0 + i] = CombineRun<A>(combiner_, identity, x + i * row_length_, row_length_);
            }
          }
        } else {
          for (int64_t r = r0; r < r1; ++r) {
            A a = identity;
            for (int64_t b = r * row_length_; b < (r + 1) * row_length_; b += kFusedBlock) {
              const int64_t n = std::min(kFusedBlock, (r + 1) * row_length_ - b);
              a = CombineRun<A>(combiner_, a, Evaluate<T>(inputs, results, b, n, scratch), n);
            }
            acc[r - r0] = a;
          }
        }
        StoreBlockTyped(acc, static_cast<char*>(output) + r0 * ByteWidth(output_.type), r1 - r0);
      });
      return;
    }
    const int64_t total = space_.numel();
    if (run_length_ > 1 && outputs == run_length_) {
      // Columns of a [rows, columns] space ([tokens, width] -> [width]: a bias's gradient): every run adds
      // into all the outputs. The runs are cut into chunks by the shape alone, each added up in its own
      // accumulators on a thread of the pool, and the chunks' sums combined in order: the same bits
      // whatever the thread count (a 4096 x 512 gradient took 225 us on one core).
      const int64_t runs = total / run_length_;
      const int64_t chunks = ColumnChunks();
      const int64_t runs_per_chunk = (runs + chunks - 1) / chunks;
      // Each chunk's sums start at the identity on the thread that adds into them, right before it does. With all
      // of them filled first on the calling thread (1 MiB of sums for the GPT's [32, 128, 128] -> [128, 128]
      // position-embedding gradient), that kernel took 2.6-5.4 ms a step, filled by chunk 1.2-3.1 (alternating
      // runs: benchmarks/RESULTS.md, session 40); in thread scratch on huge pages instead of new memory on
      // 4 KiB pages each run, 0.41 (0.33-0.43 run again at once; session 41).
      A* const sums = Sums<A>(chunks * run_length_);
      const int64_t no_offset = 0;
      ThreadPool::Get().ParallelFor(chunks, [&](int64_t c) {
        std::fill_n(sums + c * run_length_, run_length_, identity);
        void* scratch = Scratch(program_.scratch_bytes());
        program_.Prepare(inputs, scratch);
        AddRuns<T, A>(inputs, results, scratch, c * runs_per_chunk, std::min(runs, (c + 1) * runs_per_chunk),
                      sums + c * run_length_, no_offset, [] {});
      });
      for (int64_t c = 1; c < chunks; ++c) {
        for (int64_t j = 0; j < run_length_; ++j) {
          sums[j] = Combine<A>(combiner_, sums[j], sums[c * run_length_ + j]);
        }
      }
      StoreBlockTyped(sums, output, outputs);
      return;
    }
    A* const acc = Sums<A>(outputs, identity);
    void* scratch = Scratch(program_.scratch_bytes());
    program_.Prepare(inputs, scratch);
    const size_t rank = space_.dims.size();
    std::vector<int64_t> coords(rank, 0);
    int64_t out_index = 0;
    if (run_length_ > 1) {
      // Columns: runs of the kept suffix, each added into the outputs at out_index; an odometer over
      // the dims before the suffix finds the next run's outputs.
      AddRuns<T, A>(inputs, results, scratch, 0, total / run_length_, acc, out_index,
                    [&] { NextPoint(kept_suffix_, coords, out_index); });
      StoreBlockTyped(acc, output, outputs);
      return;
    }
    for (int64_t b = 0; b < total; b += kFusedBlock) {
      const int64_t n = std::min(kFusedBlock, total - b);
      const T* x = Evaluate<T>(inputs, results, b, n, scratch);
      for (int64_t i = 0; i < n; ++i) {
        A& a = acc[out_index];
        a = Combine<A>(combiner_, a, static_cast<A>(x[i]));
        NextPoint(rank, coords, out_index);
      }
    }
    StoreBlockTyped(acc, output, outputs);
  }

  // The calling thread's scratch for n sums: each `start` if given, else unspecified.
  template <typename A>
  static A* Sums(int64_t n, std::optional<A> start = std::nullopt) {
    A* const sums = static_cast<A*>(ThreadScratch<ReductionSums>(static_cast<size_t>(n) * sizeof(A)));
    if (start) std::fill_n(sums, n, *start);
    return sums;
  }
  // Rows of a row reduction each task of the pool takes (all of them: one task, on the calling thread).
  int64_t RowsPerTask() const {
    return grain_ <= 0 ? output_.numel() : std::max<int64_t>(1, grain_ / std::max<int64_t>(1, row_length_));
  }
  // The chunks a reduction over columns (outputs == run_length_ > 1) is cut into, by the shape alone.
  int64_t ColumnChunks() const {
    const int64_t total = space_.numel();
    return run_length_ > kMaxChunkedColumns
               ? 1
               : std::max<int64_t>(1, std::min({total / kColumnChunkPoints, kMaxColumnChunks, total / run_length_}));
  }

  // Advances an odometer over the space's first `dims` dims, and out_index with it.
  void NextPoint(size_t dims, std::vector<int64_t>& coords, int64_t& out_index) const {
    for (size_t d = dims; d-- > 0;) {
      out_index += out_strides_[d];
      if (++coords[d] < space_.dims[d]) break;
      out_index -= out_strides_[d] * coords[d];
      coords[d] = 0;
    }
  }

  // Adds runs [r0, r1) of the space (run_length_ points each, consecutive) into acc + out_index, calling
  // next_run after each (which may move out_index). Runs shorter than a block are evaluated a block of
  // whole runs at a time, added in the same order.
  template <typename T, typename A, typename NextRun>
  void AddRuns(std::span<const void* const> inputs, const ResultArrays& results, void* scratch, int64_t r0, int64_t r1,
               A* acc, const int64_t& out_index, NextRun next_run) const {
    const int64_t runs_per_block = run_length_ < kFusedBlock ? kFusedBlock / run_length_ : 1;
    if (runs_per_block > 1) {
      for (int64_t r = r0; r < r1; r += runs_per_block) {
        const int64_t runs = std::min(runs_per_block, r1 - r);
        const T* x = Evaluate<T>(inputs, results, r * run_length_, runs * run_length_, scratch);
        for (int64_t j = 0; j < runs; ++j) {
          Accumulate<A, T>(combiner_, acc + out_index, x + j * run_length_, run_length_);
          next_run();
        }
      }
      return;
    }
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t b = 0; b < run_length_; b += kFusedBlock) {
        const int64_t n = std::min(kFusedBlock, run_length_ - b);
        Accumulate<A, T>(combiner_, acc + out_index + b, Evaluate<T>(inputs, results, r * run_length_ + b, n, scratch),
                         n);
      }
      next_run();
    }
  }

  // The accumulators, rounded once to the output's type.
  template <typename A>
  void StoreBlockTyped(const A* acc, void* dst, int64_t n) const {
    for (int64_t b = 0; b < n; b += kFusedBlock) {
      StoreBlock(acc + b, kComputeTypeOf<A>, output_.type, static_cast<char*>(dst) + b * ByteWidth(output_.type),
                 std::min(kFusedBlock, n - b));
    }
  }

  FusedProgram program_;
  ArrayShape space_;
  Combiner combiner_;
  ArrayShape output_;
  std::vector<PrimitiveType> result_types_;  // the output's, then the extra results' (stored over the space)
  int64_t grain_;
  bool prefetches_;  // the next block, while one is computed (Evaluate)
  bool row_reduce_ = false;
  int64_t row_length_ = 1;
  size_t kept_suffix_ = 0;  // the first dim of the kept suffix
  int64_t run_length_ = 1;  // points in one run of the kept suffix
  std::vector<int64_t> out_strides_;
};

// A native bf16 product is cut into kDotFixedTiles tiles across the longer of M and N (a multiple of 16
// wide; one tile below 2 kMinTile), whatever the variant and the thread count. Every oneDNN call packs the
// operand it reads whole again and costs a start of its own: in the bf16 GPT step on a 2-core Xeon
// (AMX), the DOTs took 33.5-36.2 ms a step in 8 tiles of rows and 29.6-30.8 in 2 tiles across the longer
// side. Across the longer side, each tile reads the smaller operand whole and half of the larger: a
// weight gradient (M 128, N 512, K 4096) in row tiles read all of its 4 MB dY per tile, 11.9-12.1 ms a
// step for the weight gradients against 10.3-10.5 in column tiles (autotuning's warm caches did not
// show the difference). Two tiles: one per core of the 2-core machines this runs on.
constexpr int64_t kMinTile = 64;

// Batched GEMM through the kernel's GEMM library. Variant 0 runs each product on the calling thread; variant 1 splits
// its columns (kDotColumnPanels), variant 2 its rows (kDotRowPanels), into one panel per pool thread (native
// bf16: into tiles of the product's shape alone, kDotFixedTiles).
// 16-bit floats (bf16, f16) are widened to f32, multiplied by the f32 GEMM and rounded to their type once:
// a product of two 16-bit values is exact in f32 and the sums accumulate in f32, as PyTorch's CPU
// matmul of bf16 does. On oneDNN where the CPU multiplies bf16 natively (AVX512-BF16, AMX), bf16
// operands go to its bf16 GEMM as they are (f32 accumulation too), without the widening pass.
// 16-bit operands may also give their f32 product unrounded (an f32 output): how autotuning compares
// the products of a 16-bit DOT's variants, which the one rounding would mostly hide.
// An f32 or f64 product may have addends (the inputs after its operands, each read through a view of the
// product's elements with contiguous rows: a bias broadcast along its rows, an array of its shape): each
// panel of the product gets them added in turn right after the library has written it (its last pieces
// still cached), each sum rounded once, as loops adding them would.
class DotKernel final : public Kernel {
 public:
  DotKernel(const proto::Kernel& k, PrimitiveType type, PrimitiveType output_type, GemmLibrary library,
            int64_t lhs_numel, int64_t rhs_numel, std::vector<OperandView> addends)
      : k_(k),
        type_(type),
        output_type_(output_type),
        library_(library),
        lhs_numel_(lhs_numel),
        rhs_numel_(rhs_numel),
        addends_(std::move(addends)),
        fused_bias_(library == GemmLibrary::kOneDnnMatmul && type == PrimitiveType::kF32 && !addends_.empty() &&
                    IsBias(addends_[0], k.n())) {}

  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    void* output = outputs[0];
    const std::span<const void* const> addends = inputs.subspan(2, addends_.size());
    if (type_ == PrimitiveType::kF32) {
      RunTyped<float>(inputs[0], inputs[1], addends, output);
    } else if (type_ == PrimitiveType::kF64) {
      RunTyped<double>(inputs[0], inputs[1], addends, output);
    } else if (!(DotHasFixedTiles(type_, library_) && RunNativeBf16(inputs[0], inputs[1], output))) {
      RunWidened(inputs[0], inputs[1], output);
    }
    return absl::OkStatus();
  }
  bool SplitsOverPool() const override { return k_.variant() != kDotSerial; }

 private:
  // Calls gemm(rows, cols, A, B, C) for every product and panel, with row-major views of A[m,k],
  // B[k,n] (transposed in memory or not: only the strides differ) and C[m,n]. With `fixed_tiles` the
  // panels are the kDotFixedTiles tiles of the product's shape: the serial variant runs them in order on the
  // calling thread, the split ones spread them over the pool, and every variant and thread count calls
  // the library on the same tiles.
  template <typename In, typename Out, typename PanelGemm>
  void ForEachPanel(const In* lhs, const In* rhs, Out* output, bool fixed_tiles, PanelGemm gemm) const {
    const int64_t m = k_.m(), n = k_.n(), kk = k_.k();
    if (m == 0 || n == 0) return;
    const int64_t a_rs = k_.transpose_lhs() ? 1 : kk, a_cs = k_.transpose_lhs() ? m : 1;
    const int64_t b_rs = k_.transpose_rhs() ? 1 : n, b_cs = k_.transpose_rhs() ? kk : 1;
    const bool by_rows = fixed_tiles ? m >= n : k_.variant() == kDotRowPanels;
    const int64_t split = by_rows ? m : n;
    int64_t panels = k_.variant() == kDotSerial ? 1 : ThreadPool::Get().size();
    int64_t panel = (split + panels - 1) / panels;
    if (fixed_tiles) {
      // A tile narrower than kMinTile would pack the other operand whole again for a sliver.
      panel =
          split < kDotFixedTiles * kMinTile ? split : ((split + kDotFixedTiles - 1) / kDotFixedTiles + 15) / 16 * 16;
      panels = (split + panel - 1) / panel;
    }
    for (int64_t b = 0; b < k_.batch(); ++b) {
      const In* a = lhs + b * k_.lhs_batch_stride();
      const In* bb = rhs + b * k_.rhs_batch_stride();
      Out* c = output + b * m * n;
      auto run_panel = [&](int64_t p) {
        const int64_t lo = p * panel, hi = std::min(split, lo + panel);
        if (hi <= lo) return;
        if (by_rows) {  // rows [lo, hi) of A and C; B whole
          gemm(hi - lo, n, MatrixView<const In>{a + lo * a_rs, a_rs, a_cs}, MatrixView<const In>{bb, b_rs, b_cs},
               MatrixView<Out>{c + lo * n, n, 1});
        } else {  // columns [lo, hi) of B and C; A whole
          gemm(m, hi - lo, MatrixView<const In>{a, a_rs, a_cs}, MatrixView<const In>{bb + lo * b_cs, b_rs, b_cs},
               MatrixView<Out>{c + lo, n, 1});
        }
      };
      if (k_.variant() == kDotSerial) {
        for (int64_t p = 0; p < panels; ++p) run_panel(p);
      } else {
        ThreadPool::Get().ParallelFor(panels, run_panel);
      }
    }
  }

  template <typename T>
  void RunTyped(const void* lhs, const void* rhs, std::span<const void* const> addends, void* output) const {
    T* const out = static_cast<T*>(output);
    ForEachPanel(static_cast<const T*>(lhs), static_cast<const T*>(rhs), out, false,
                 [&](int64_t rows, int64_t cols, MatrixView<const T> a, MatrixView<const T> b, MatrixView<T> c) {
                   size_t added = 0;  // addends the library added
                   if constexpr (std::is_same_v<T, float>) {
                     // A first addend that is a bias, added by oneDNN's matmul as it stores the product: the
                     // same bits, without reading the stored product again.
                     if (fused_bias_ && OneDnnMatmulGemm(rows, cols, k_.k(), a, b, c,
                                                         static_cast<const float*>(addends[0]) + addends_[0].offset +
                                                             (c.data - out) % k_.n())) {
                       added = 1;
                     }
                   }
                   if (added == 0) Gemm(library_, rows, cols, k_.k(), a, b, c);
                   for (size_t i = added; i < addends_.size(); ++i) {
                     AddAddend(addends_[i], static_cast<const T*>(addends[i]), c.data - out, rows, cols, c.data);
                   }
                 });
  }

  // Whether an addend's view adds the same row of n values to every row of the product: a bias.
  static bool IsBias(const OperandView& v, int64_t n) {
    if (v.dims.empty() || v.dims.back() != n || v.strides.back() != 1) return false;
    return std::all_of(v.strides.begin(), v.strides.end() - 1, [](int64_t s) { return s == 0; });
  }

  // Adds the elements [first + i n, first + i n + cols) of `addend` read through `v` to row i of the
  // `rows` x `cols` piece of the product at c (rows n apart, the product's element `first` at c).
  template <typename T>
  void AddAddend(const OperandView& v, const T* addend, int64_t first, int64_t rows, int64_t cols, T* c) const {
    const int64_t n = k_.n();
    const auto add_runs = [&](int64_t begin, int64_t count, T* to) {
      // Rows of the view are contiguous (checked at build).
      ForEachRun(v.dims, v.strides, v.offset, begin, count,
                 [&](int64_t index, int64_t run, int64_t at) { AddTo(to + at, addend + index, run); });
    };
    if (cols == n) {
      add_runs(first, rows * n, c);  // whole rows: one stretch of the product
      return;
    }
    for (int64_t i = 0; i < rows; ++i) add_runs(first + i * n, cols, c + i * n);
  }

  // The f32 product, rounded once to a bf16 output (by oneDNN as it stores each tile) or not (an f32
  // output), straight into the output: rounding the f32 tiles from scratch afterwards wrote and read
  // twice the output's bytes again (a 2048x512 tile's 4 MiB outgrew the core's L2). False if oneDNN
  // refused a tile; the output may then hold other tiles' results, which the caller's widening path
  // overwrites.
  bool RunNativeBf16(const void* lhs, const void* rhs, void* output) const {
    if (k_.k() == 0) return false;  // zeros: the widening path writes them
    std::atomic<bool> refused{false};
    // Fixed tiles: oneDNN's bf16 GEMM sums a long K in an order that depends on the call's M and N (a
    // 512x4096x128 product in two panels of rows gave other bits than whole), which made every split
    // variant differ from the serial one and autotuning keep the products that most need both cores
    // (the weight gradients, K = batch x tokens) on one.
    auto run = [&]<typename Out>(Out* c) {
      ForEachPanel(static_cast<const uint16_t*>(lhs), static_cast<const uint16_t*>(rhs), c, true,
                   [&](int64_t rows, int64_t cols, MatrixView<const uint16_t> a, MatrixView<const uint16_t> b,
                       MatrixView<Out> out) {
                     if (!OneDnnGemmBf16(rows, cols, k_.k(), a, b, out)) refused = true;
                   });
    };
    if (output_type_ == PrimitiveType::kF32) {
      run(static_cast<float*>(output));
    } else {  // bf16, the operands' type
      run(static_cast<uint16_t*>(output));
    }
    return !refused;
  }

  // The operands widened to f32 and the f32 product in the calling thread's scratch.
  void RunWidened(const void* lhs, const void* rhs, void* output) const {
    const int64_t products = k_.batch() * k_.m() * k_.n();
    float* a = static_cast<float*>(Scratch(static_cast<size_t>(lhs_numel_ + rhs_numel_ + products) * sizeof(float)));
    float* b = a + lhs_numel_;
    float* c = b + rhs_numel_;
    Widen(lhs, lhs_numel_, a);
    Widen(rhs, rhs_numel_, b);
    RunTyped<float>(a, b, {}, c);
    StoreBlock(c, ComputeType::kF32, output_type_, output, products);
  }

  void Widen(const void* src, int64_t n, float* dst) const {
    const uint16_t* h = static_cast<const uint16_t*>(src);
    if (type_ == PrimitiveType::kBF16) {
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(h[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(h[i]);
    }
  }

  proto::Kernel k_;
  PrimitiveType type_, output_type_;  // the operands', and the product's (the same, or f32 of 16-bit operands)
  GemmLibrary library_;
  int64_t lhs_numel_, rhs_numel_;
  std::vector<OperandView> addends_;  // one per input after the operands
  bool fused_bias_;                   // addends_[0] is a bias that OneDnnMatmulGemm adds (kOneDnnMatmul, f32)
};

int64_t IndexAt(const void* base, PrimitiveType type, int64_t i) {
  return type == PrimitiveType::kS32 ? static_cast<const int32_t*>(base)[i] : static_cast<const int64_t*>(base)[i];
}

// Outer x axis x inner decomposition of a shape around `axis`.
class ArgmaxKernel final : public Kernel {
 public:
  bool SplitsOverPool() const override { return false; }
  ArgmaxKernel(ArrayShape input, int64_t axis) : input_(std::move(input)), split_(input_.dims, axis) {}
  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    void* output = outputs[0];
    int64_t* out = static_cast<int64_t*>(output);
    for (int64_t o = 0; o < split_.outer; ++o) {
      for (int64_t i = 0; i < split_.inner; ++i) {
        int64_t best = 0;
        double best_value = 0;
        int64_t best_s64 = 0;
        for (int64_t a = 0; a < split_.size; ++a) {
          const int64_t idx = (o * split_.size + a) * split_.inner + i;
          if (input_.type == PrimitiveType::kS64) {  // exactly: as doubles, 2^53 + 1 would tie with 2^53
            const int64_t w = static_cast<const int64_t*>(inputs[0])[idx];
            if (a == 0 || w > best_s64) {
              best = a;
              best_s64 = w;
            }
            continue;
          }
          const double v = LoadElement(inputs[0], input_.type, idx);
          // The first maximum wins; NaN counts as the maximum, as in PyTorch.
          if (a == 0 || v > best_value || (std::isnan(v) && !std::isnan(best_value))) {
            best = a;
            best_value = v;
          }
        }
        out[o * split_.inner + i] = best;
      }
    }
    return absl::OkStatus();
  }

 private:
  ArrayShape input_;
  AxisSplit split_;
};

// Rows along an axis that are worth splitting across the pool: about 64k elements per task at least.
int64_t RowGrain(const AxisSplit& split) {
  constexpr int64_t kElementsPerTask = int64_t{1} << 16;
  const int64_t rows = split.outer * split.inner;
  if (rows <= 1 || rows * split.size < 2 * kElementsPerTask) return 0;
  return std::max<int64_t>(1, kElementsPerTask / std::max<int64_t>(1, split.size));
}

// Running sums along the axis. Floating types accumulate in f64 (an f32 running sum of a long row
// drifts), integers in their own type with two's-complement wrap-around.
class CumsumKernel final : public Kernel {
 public:
  CumsumKernel(ArrayShape shape, int64_t axis) : shape_(std::move(shape)), split_(shape_.dims, axis) {}
  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    // Each task takes whole outer slices and walks them row by row along the axis, `inner` sums at once.
    ForEachChunk(split_.outer, RowGrain(split_) / std::max<int64_t>(1, split_.inner), [&](int64_t begin, int64_t end) {
      switch (shape_.type) {
        case PrimitiveType::kS32: Sums<int32_t>(inputs[0], outputs[0], begin, end); return;
        case PrimitiveType::kS64: Sums<int64_t>(inputs[0], outputs[0], begin, end); return;
        case PrimitiveType::kF32: Sums<float>(inputs[0], outputs[0], begin, end); return;
        case PrimitiveType::kF64: Sums<double>(inputs[0], outputs[0], begin, end); return;
        case PrimitiveType::kBF16:
        case PrimitiveType::kF16: Sums<uint16_t>(inputs[0], outputs[0], begin, end); return;
        case PrimitiveType::kPred: OpcodeUnreachable("cumsum: a pred operand", static_cast<int32_t>(Opcode::kCumsum));
      }
    });
    return absl::OkStatus();
  }

 private:
  // T is the stored element (uint16_t: bf16 or f16, converted through float).
  template <typename T>
  void Sums(const void* input, void* output, int64_t outer_begin, int64_t outer_end) const {
    using Acc = std::conditional_t<std::is_integral_v<T> && !std::is_same_v<T, uint16_t>, T, double>;
    const T* in = static_cast<const T*>(input);
    T* out = static_cast<T*>(output);
    std::vector<Acc> acc(static_cast<size_t>(split_.inner));
    for (int64_t o = outer_begin; o < outer_end; ++o) {
      std::fill(acc.begin(), acc.end(), Acc{0});
      for (int64_t a = 0; a < split_.size; ++a) {
        const int64_t row = (o * split_.size + a) * split_.inner;
        for (int64_t i = 0; i < split_.inner; ++i) {
          Acc& sum = acc[static_cast<size_t>(i)];
          if constexpr (std::is_same_v<T, uint16_t>) {
            sum += LoadElement(in, shape_.type, row + i);
            StoreElement(sum, shape_.type, out + row + i);
          } else {
            sum = Add(sum, static_cast<Acc>(in[row + i]));
            out[row + i] = static_cast<T>(sum);
          }
        }
      }
    }
  }

  ArrayShape shape_;
  AxisSplit split_;
};

// The positions of each row's elements in stable sorted order: ties keep their positions' order and
// NaN sorts as the largest value (after every number ascending, before them descending), as PyTorch's.
class ArgsortKernel final : public Kernel {
 public:
  ArgsortKernel(ArrayShape input, int64_t axis, bool descending)
      : input_(std::move(input)), split_(input_.dims, axis), descending_(descending) {}
  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    ForEachChunk(split_.outer * split_.inner, RowGrain(split_), [&](int64_t begin, int64_t end) {
      // s64 keys compare exactly: as doubles, 2^53 + 1 would tie with 2^53.
      if (input_.type == PrimitiveType::kS64) {
        SortRows<int64_t>(inputs[0], static_cast<int64_t*>(outputs[0]), begin, end);
      } else {
        SortRows<double>(inputs[0], static_cast<int64_t*>(outputs[0]), begin, end);
      }
    });
    return absl::OkStatus();
  }

 private:
  template <typename K>
  void SortRows(const void* in, int64_t* out, int64_t row_begin, int64_t row_end) const {
    const auto size = static_cast<size_t>(split_.size);
    std::vector<K> keys(size);
    std::vector<int64_t> order(size);
    const auto before = [&](int64_t a, int64_t b) {
      const K x = keys[static_cast<size_t>(a)], y = keys[static_cast<size_t>(b)];
      if constexpr (std::is_floating_point_v<K>) {
        if (descending_) return !std::isnan(y) && (std::isnan(x) || x > y);
        return !std::isnan(x) && (std::isnan(y) || x < y);
      } else {
        return descending_ ? x > y : x < y;
      }
    };
    for (int64_t r = row_begin; r < row_end; ++r) {
      const int64_t o = r / split_.inner, i = r % split_.inner;
      const auto at = [&](size_t a) { return (o * split_.size + static_cast<int64_t>(a)) * split_.inner + i; };
      for (size_t a = 0; a < size; ++a) {
        if constexpr (std::is_floating_point_v<K>) {
          keys[a] = LoadElement(in, input_.type, at(a));
        } else {
          std::memcpy(&keys[a], static_cast<const char*>(in) + at(a) * 8, 8);
        }
      }
      std::iota(order.begin(), order.end(), int64_t{0});
      std::stable_sort(order.begin(), order.end(), before);
      for (size_t a = 0; a < size; ++a) out[at(a)] = order[a];
    }
  }

  ArrayShape input_;
  AxisSplit split_;
  bool descending_;
};

// The one message of an index out of range, whatever the op. The executable puts the name of the op
// first (the caller's op and line when it knows them, else the kernel's opcode).
absl::Status IndexError(int64_t index, int64_t position, int64_t size) {
  return absl::OutOfRangeError(absl::StrCat("index ", index, " is out of range for a dimension of size ", size,
                                            " (valid: [0, ", size, ")), at position ", position, " of the index"));
}

class IndexSelectKernel final : public Kernel {
 public:
  bool SplitsOverPool() const override { return false; }
  IndexSelectKernel(ArrayShape input, ArrayShape index, int64_t axis)
      : input_(std::move(input)), index_(std::move(index)), split_(input_.dims, axis) {}
  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    void* output = outputs[0];
    const int64_t width = ByteWidth(input_.type), count = index_.numel();
    const size_t row = static_cast<size_t>(split_.inner * width);
    for (int64_t o = 0; o < split_.outer; ++o) {
      for (int64_t j = 0; j < count; ++j) {
        const int64_t a = IndexAt(inputs[1], index_.type, j);
        if (a < 0 || a >= split_.size) return IndexError(a, j, split_.size);
        std::memcpy(static_cast<char*>(output) + ((o * count + j) * split_.inner) * width,
                    static_cast<const char*>(inputs[0]) + ((o * split_.size + a) * split_.inner) * width, row);
      }
    }
    return absl::OkStatus();
  }

 private:
  ArrayShape input_, index_;
  AxisSplit split_;
};

class GatherKernel final : public Kernel {
 public:
  bool SplitsOverPool() const override { return false; }
  GatherKernel(ArrayShape input, ArrayShape index, int64_t axis)
      : input_(std::move(input)), index_(std::move(index)), axis_(axis) {}
  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    void* output = outputs[0];
    const size_t rank = index_.dims.size();
    const int64_t width = ByteWidth(input_.type), total = index_.numel();
    std::vector<int64_t> in_strides(rank, 1), coords(rank, 0);
    for (size_t d = rank; d-- > 1;) in_strides[d - 1] = in_strides[d] * input_.dims[d];
    for (int64_t i = 0; i < total; ++i) {
      const int64_t a = IndexAt(inputs[1], index_.type, i);
      const int64_t size = input_.dims[static_cast<size_t>(axis_)];
      if (a < 0 || a >= size) return IndexError(a, i, size);
      int64_t src = 0;
      for (size_t d = 0; d < rank; ++d) src += (d == static_cast<size_t>(axis_) ? a : coords[d]) * in_strides[d];
      std::memcpy(static_cast<char*>(output) + i * width, static_cast<const char*>(inputs[0]) + src * width,
                  static_cast<size_t>(width));
      for (size_t d = rank; d-- > 0;) {
        if (++coords[d] < index_.dims[d]) break;
        coords[d] = 0;
      }
    }
    return absl::OkStatus();
  }

 private:
  ArrayShape input_, index_;
  int64_t axis_;
};

// dst[i] += src[i] in the type of the arrays (half types through f32, rounded at each step).
void AddElement(PrimitiveType type, void* dst, int64_t d, const void* src, int64_t s) {
  switch (type) {
    case PrimitiveType::kF32: static_cast<float*>(dst)[d] += static_cast<const float*>(src)[s]; return;
    case PrimitiveType::kF64: static_cast<double*>(dst)[d] += static_cast<const double*>(src)[s]; return;
    case PrimitiveType::kS32:  // wraps as torch's int32 adds do, without signed overflow
      static_cast<int32_t*>(dst)[d] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<int32_t*>(dst)[d]) +
                                                           static_cast<uint32_t>(static_cast<const int32_t*>(src)[s]));
      return;
    case PrimitiveType::kS64:
      static_cast<int64_t*>(dst)[d] = static_cast<int64_t>(static_cast<uint64_t>(static_cast<int64_t*>(dst)[d]) +
                                                           static_cast<uint64_t>(static_cast<const int64_t*>(src)[s]));
      return;
    case PrimitiveType::kBF16:
    case PrimitiveType::kF16: {
      const float sum = static_cast<float>(LoadElement(dst, type, d)) + static_cast<float>(LoadElement(src, type, s));
      StoreElement(sum, type, static_cast<char*>(dst) + d * ByteWidth(type));
      return;
    }
    case PrimitiveType::kPred: return;  // refused at build time
  }
}

// SCATTER_ADD: out = x, then out[index[c] along axis, c elsewhere] += src[c] for every c of the index, in
// row-major order: one fixed order of accumulation, so results are the same bits on every run.
class ScatterAddKernel final : public Kernel {
 public:
  bool SplitsOverPool() const override { return false; }
  ScatterAddKernel(ArrayShape input, ArrayShape index, int64_t axis)
      : input_(std::move(input)), index_(std::move(index)), axis_(axis) {}
  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    const size_t rank = index_.dims.size();
    const int64_t total = index_.numel(), size = input_.dims[static_cast<size_t>(axis_)];
    for (int64_t i = 0; i < total; ++i) {  // every index checked before anything is written
      const int64_t a = IndexAt(inputs[1], index_.type, i);
      if (a < 0 || a >= size) return IndexError(a, i, size);
    }
    if (outputs[0] != inputs[0] && input_.byte_size() > 0) {  // zero-size arrays may have no memory at all
      std::memcpy(outputs[0], inputs[0], static_cast<size_t>(input_.byte_size()));
    }
    std::vector<int64_t> strides(rank, 1), coords(rank, 0);
    for (size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * input_.dims[d];
    for (int64_t i = 0; i < total; ++i) {
      const int64_t a = IndexAt(inputs[1], index_.type, i);
      int64_t dst = 0;
      for (size_t d = 0; d < rank; ++d) dst += (d == static_cast<size_t>(axis_) ? a : coords[d]) * strides[d];
      AddElement(input_.type, outputs[0], dst, inputs[2], i);
      for (size_t d = rank; d-- > 0;) {
        if (++coords[d] < index_.dims[d]) break;
        coords[d] = 0;
      }
    }
    return absl::OkStatus();
  }

 private:
  ArrayShape input_, index_;
  int64_t axis_;
};

// INDEX_ADD: out = x, then out[.., index[j], ..] += src[.., j, ..] along axis, j in order (the same
// order every run). The indices are read once; the outer rows (disjoint parts of the output, each
// accumulating in j order) are split over the pool, so the bits do not depend on the split.
class IndexAddKernel final : public Kernel {
 public:
  IndexAddKernel(ArrayShape input, ArrayShape index, int64_t axis)
      : input_(std::move(input)), index_(std::move(index)), split_(input_.dims, axis) {}
  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    const int64_t count = index_.numel();
    std::vector<int64_t> positions(static_cast<size_t>(count));
    for (int64_t j = 0; j < count; ++j) {
      const int64_t a = IndexAt(inputs[1], index_.type, j);
      if (a < 0 || a >= split_.size) return IndexError(a, j, split_.size);
      positions[static_cast<size_t>(j)] = a;
    }
    if (input_.byte_size() == 0) return absl::OkStatus();  // zero-size arrays may have no memory at all
    // Tasks of whole outer rows (at least kMinTaskElements of x and src each), each copying its rows of x
    // and adding to them.
    constexpr int64_t kMinTaskElements = int64_t{1} << 15;
    const int64_t row_elements = std::max<int64_t>(1, (split_.size + count) * split_.inner);
    const int64_t tasks = std::clamp<int64_t>(split_.outer * row_elements / kMinTaskElements, 1,
                                              std::min<int64_t>(split_.outer, ThreadPool::Get().size()));
    const int64_t rows_per_task = (split_.outer + tasks - 1) / tasks;
    const int64_t row_bytes = split_.size * split_.inner * ByteWidth(input_.type);
    ThreadPool::Get().ParallelFor(tasks, [&](int64_t t) {
      const int64_t begin = std::min(split_.outer, t * rows_per_task);
      const int64_t end = std::min(split_.outer, (t + 1) * rows_per_task);
      if (outputs[0] != inputs[0] && end > begin) {
        std::memcpy(static_cast<char*>(outputs[0]) + begin * row_bytes,
                    static_cast<const char*>(inputs[0]) + begin * row_bytes,
                    static_cast<size_t>((end - begin) * row_bytes));
      }
      for (int64_t o = begin; o < end; ++o) AddRow(o, positions, inputs[2], outputs[0]);
    });
    return absl::OkStatus();
  }

 private:
  // Outer row o: out[o, positions[j], :] += src[o, j, :] for j in order.
  void AddRow(int64_t o, const std::vector<int64_t>& positions, const void* src, void* out) const {
    const int64_t count = static_cast<int64_t>(positions.size()), inner = split_.inner;
    const int64_t dst_row = o * split_.size * inner, src_row = o * count * inner;
    if (input_.type == PrimitiveType::kF32) {  // the common case, as loops that vectorize
      float* dst = static_cast<float*>(out) + dst_row;
      const float* from = static_cast<const float*>(src) + src_row;
      if (inner == 1) {
        for (int64_t j = 0; j < count; ++j) dst[positions[static_cast<size_t>(j)]] += from[j];
        return;
      }
      for (int64_t j = 0; j < count; ++j) {
        float* d = dst + positions[static_cast<size_t>(j)] * inner;
        const float* f = from + j * inner;
        for (int64_t i = 0; i < inner; ++i) d[i] += f[i];
      }
      return;
    }
    for (int64_t j = 0; j < count; ++j) {
      const int64_t d = dst_row + positions[static_cast<size_t>(j)] * inner, f = src_row + j * inner;
      for (int64_t i = 0; i < inner; ++i) AddElement(input_.type, out, d + i, src, f + i);
    }
  }

  ArrayShape input_, index_;
  AxisSplit split_;
};

// Copies each input's rows into its place along the axis. An input may be a view of its slot (a
// transpose of a head, say): its rows are then gathered a run of the last dim at a time, and the copy the
// transpose would have made before is never made.
class ConcatKernel final : public Kernel {
 public:
  ConcatKernel(std::vector<ArrayShape> inputs, std::vector<OperandView> views, ArrayShape output, int64_t axis)
      : inputs_(std::move(inputs)), views_(std::move(views)), output_(std::move(output)), axis_(axis) {
    views_.resize(inputs_.size());
  }
  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    char* output = static_cast<char*>(outputs[0]);
    const AxisSplit out(output_.dims, axis_);
    const int64_t width = ByteWidth(output_.type);
    // Tasks of whole outer rows, at least kMinTaskBytes each.
    constexpr int64_t kMinTaskBytes = int64_t{1} << 17;
    const int64_t tasks =
        std::clamp<int64_t>(output_.byte_size() / kMinTaskBytes, 1,
                            std::min<int64_t>(std::max<int64_t>(1, out.outer), ThreadPool::Get().size()));
    const int64_t rows_per_task = (out.outer + tasks - 1) / tasks;
    ThreadPool::Get().ParallelFor(tasks, [&](int64_t t) {
      const int64_t begin = std::min(out.outer, t * rows_per_task), end = std::min(out.outer, (t + 1) * rows_per_task);
      int64_t at = 0;
      for (size_t i = 0; i < inputs_.size(); ++i) {
        const AxisSplit in(inputs_[i].dims, axis_);
        const int64_t run = in.size * in.inner;  // elements of an outer row
        const char* src = static_cast<const char*>(inputs[i]);
        const OperandView& view = views_[i];
        // Where element `p` of the input's outer rows from `begin` goes.
        const auto dst = [&](int64_t p) {
          return output + ((begin + p / run) * out.size * out.inner + at * out.inner + p % run) * width;
        };
        if (run == 0 || begin == end) {  // a zero-size input may have no memory
        } else if (view.dims.empty()) {
          for (int64_t o = begin; o < end; ++o) {
            std::memcpy(dst((o - begin) * run), src + o * run * width, static_cast<size_t>(run * width));
          }
        } else {
          // The view's elements of these rows in order, a run of its last dim at a time (contiguous in the
          // input; never across one of the input's outer rows, whose length `run` is a multiple of the last dim).
          ForEachRun(view.dims, view.strides, view.offset, begin * run, (end - begin) * run,
                     [&](int64_t index, int64_t n, int64_t p) {
                       std::memcpy(dst(p), src + index * width, static_cast<size_t>(n * width));
                     });
        }
        at += in.size;
      }
    });
    return absl::OkStatus();
  }

 private:
  std::vector<ArrayShape> inputs_;  // as read: a view's dims where it has one
  std::vector<OperandView> views_;  // one per input
  ArrayShape output_;
  int64_t axis_;
};

absl::Status Expect(bool ok, const proto::Kernel& k, const std::string& what) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("kernel '", k.label(), "' (", proto::Kernel::Kind_Name(k.kind()), "): ", what));
}

// The GEMM library a DOT or attention kernel names, if it is one.
absl::StatusOr<GemmLibrary> LibraryOf(const proto::Kernel& k) {
  const std::optional<GemmLibrary> library = GemmLibraryFromNumber(k.gemm_library());
  RETURN_IF_ERROR(Expect(library.has_value(), k, absl::StrCat("unknown GEMM library ", k.gemm_library())));
  return *library;
}

// A DOT's addends: the inputs after its two operands, each read through its operand view (the operands
// have none), of the product's elements and its type, an f32 or f64 product of operands of that type. A
// broadcast view may have more elements than its input (a bias added to every row).
absl::StatusOr<std::vector<OperandView>> AddendsOf(const proto::Kernel& k, std::span<const ArrayShape> inputs,
                                                   const ArrayShape& output) {
  std::vector<OperandView> views = OperandViewsOf(k);
  if (inputs.size() == 2) {
    RETURN_IF_ERROR(Expect(views.empty(), k, "operand views without an addend"));
    return std::vector<OperandView>();
  }
  RETURN_IF_ERROR(Expect(views.size() == inputs.size() && views[0].dims.empty() && views[1].dims.empty(), k,
                         "an addend needs a view, and the operands none"));
  RETURN_IF_ERROR(Expect(
      (output.type == PrimitiveType::kF32 || output.type == PrimitiveType::kF64) && inputs[0].type == output.type, k,
      "an addend needs an f32 or f64 product of its own type"));
  views.erase(views.begin(), views.begin() + 2);
  for (size_t a = 0; a < views.size(); ++a) {
    const OperandView& view = views[a];
    RETURN_IF_ERROR(Expect(!view.dims.empty(), k, "an addend needs a view, and the operands none"));
    if (absl::Status s = CheckOperandView(view, inputs[a + 2], /*broadcasts=*/true); !s.ok()) {
      return Expect(false, k, absl::StrCat("addend ", a, ": ", s.message()));
    }
    int64_t numel = 1;
    for (int64_t d : view.dims) numel *= d;  // bounded by CheckOperandView
    RETURN_IF_ERROR(Expect(numel == output.numel(), k, "the addend's view is not of the product's elements"));
    RETURN_IF_ERROR(
        Expect(inputs[a + 2].type == output.type, k, "an addend needs an f32 or f64 product of its own type"));
  }
  return views;
}

}  // namespace

bool DotHasFixedTiles(PrimitiveType operand, GemmLibrary library) {
  return operand == PrimitiveType::kBF16 && IsOneDnn(library) && OneDnnHasBf16();
}

ArrayShape InputShape(const proto::Kernel& kernel, int i, const ArrayShape& slot) {
  if (i >= kernel.operand_views_size() || kernel.operand_views(i).dims().empty()) return slot;
  const auto& dims = kernel.operand_views(i).dims();
  return {slot.type, {dims.begin(), dims.end()}};
}

absl::StatusOr<std::unique_ptr<Kernel>> BuildKernel(const proto::Kernel& k, std::span<const ArrayShape> inputs,
                                                    const ArrayShape& output,
                                                    std::span<const ArrayShape> extra_outputs) {
  if (k.extra_outputs_size() != static_cast<int>(extra_outputs.size()) ||
      k.extra_roots_size() != k.extra_outputs_size() ||
      (k.extra_outputs_size() > 0 && k.kind() != proto::Kernel::LOOP && k.kind() != proto::Kernel::REDUCE)) {
    return Expect(false, k, "extra outputs need a LOOP or REDUCE kernel and a result step each");
  }
  const std::span<const int64_t> extra_roots(k.extra_roots().data(), static_cast<size_t>(k.extra_roots_size()));
  // The types of the results: the output's, then the extra results' (each of the iteration space's dims).
  const auto result_types = [&](const FusedProgram& program,
                                const ArrayShape& space) -> absl::StatusOr<std::vector<PrimitiveType>> {
    std::vector<PrimitiveType> types = {output.type};
    for (size_t r = 0; r < extra_outputs.size(); ++r) {
      if (extra_outputs[r].dims != space.dims || program.result_type(r + 1) != extra_outputs[r].type) {
        return Expect(false, k,
                      absl::StrCat("extra output ", r, " is not a ", PrimitiveTypeName(program.result_type(r + 1)),
                                   " array of the iteration space's dims"));
      }
      types.push_back(extra_outputs[r].type);
    }
    return types;
  };
  switch (k.kind()) {
    case proto::Kernel::LOOP: {
      if (!(FromProto(k.iteration_shape()) == output)) return Expect(false, k, "iteration space must be the output");
      ASSIGN_OR_RETURN(FusedProgram program, FusedProgram::Build(k.program(), inputs, output, extra_roots,
                                                                 FusedProgram::Stored::kAllResults));
      ASSIGN_OR_RETURN(std::vector<PrimitiveType> types, result_types(program, output));
      // Stored results must be of their arrays' types: the store rounds a 16-bit one (Stored).
      if (program.result_type() != output.type) return Expect(false, k, "program type differs from the output");
      if (const std::optional<AdamWUpdateLoop> update = MatchAdamWUpdate(program))
        return MakeAdamWUpdateKernel(*update, std::move(program), output.numel(), k.grain());
      return std::make_unique<LoopKernel>(std::move(program), output, std::move(types), k.grain());
    }
    case proto::Kernel::REDUCE: {
      const ArrayShape space = FromProto(k.iteration_shape());
      std::vector<int64_t> dims(k.reduce_dims().begin(), k.reduce_dims().end());
      std::vector<int64_t> kept;
      for (size_t d = 0; d < space.dims.size(); ++d) {
        if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end()) kept.push_back(space.dims[d]);
      }
      bool sorted = std::is_sorted(dims.begin(), dims.end()) &&
                    std::adjacent_find(dims.begin(), dims.end()) == dims.end() &&
                    (dims.empty() || (dims.front() >= 0 && dims.back() < static_cast<int64_t>(space.dims.size())));
      // The iteration space is not a slot's (already checked) shape: check its dims here.
      const bool space_ok = space.dims.size() <= 16 && DimsInRange(space.dims);
      const std::optional<Combiner> combiner = CombinerFromNumber(k.combiner());
      RETURN_IF_ERROR(Expect(sorted && kept == output.dims && space.type == output.type && space_ok &&
                                 combiner.has_value() && Accepts(TypeClassOf(*combiner), output.type),
                             k, "bad reduction"));
      // Its values are reduced, not stored: a 16-bit one is rounded before (only the extra results are stored).
      ASSIGN_OR_RETURN(FusedProgram program, FusedProgram::Build(k.program(), inputs, space, extra_roots,
                                                                 FusedProgram::Stored::kExtraResults));
      if (program.result_type() != output.type) return Expect(false, k, "program type differs from the output");
      ASSIGN_OR_RETURN(std::vector<PrimitiveType> types, result_types(program, space));
      return std::make_unique<ReduceKernel>(std::move(program), space, std::move(dims), *combiner, output,
                                            std::move(types), k.grain());
    }
    case proto::Kernel::DOT: {
      int64_t products = 0;
      const bool shapes_ok =
          inputs.size() >= 2 && k.m() >= 0 && k.n() >= 0 && k.k() >= 0 && k.batch() >= 0 && k.m() < (1 << 30) &&
          k.n() < (1 << 30) && k.k() < (1 << 30) && inputs[1].type == inputs[0].type &&
          (output.type == inputs[0].type || (output.type == PrimitiveType::kF32 && Is16BitFloat(inputs[0].type))) &&
          !__builtin_mul_overflow(k.batch(), k.m() * k.n(), &products) && output.numel() == products &&
          k.lhs_batch_stride() >= 0 && k.rhs_batch_stride() >= 0 &&
          BatchFits(k.batch(), k.lhs_batch_stride(), k.m() * k.k(), inputs[0].numel()) &&
          BatchFits(k.batch(), k.rhs_batch_stride(), k.k() * k.n(), inputs[1].numel()) &&
          (k.variant() == kDotSerial || k.variant() == kDotColumnPanels || k.variant() == kDotRowPanels);
      RETURN_IF_ERROR(Expect(shapes_ok, k, "operands do not fit the product"));
      ASSIGN_OR_RETURN(const GemmLibrary library, LibraryOf(k));
      RETURN_IF_ERROR(Expect(Accepts(TypeClass::kFloat, output.type), k, "needs a floating type"));
      ASSIGN_OR_RETURN(std::vector<OperandView> addends, AddendsOf(k, inputs, output));
      return std::make_unique<DotKernel>(k, inputs[0].type, output.type, library, inputs[0].numel(), inputs[1].numel(),
                                         std::move(addends));
    }
    case proto::Kernel::ARGMAX: {
      const int64_t axis = k.axis();
      bool ok = inputs.size() == 1 && axis >= 0 && axis < static_cast<int64_t>(inputs[0].dims.size()) &&
                output.type == PrimitiveType::kS64 && inputs[0].dims[static_cast<size_t>(axis)] > 0;
      if (ok) {
        std::vector<int64_t> kept = inputs[0].dims;
        kept.erase(kept.begin() + axis);
        ok = kept == output.dims;
      }
      RETURN_IF_ERROR(Expect(ok, k, "bad argmax"));
      return std::make_unique<ArgmaxKernel>(inputs[0], axis);
    }
    case proto::Kernel::CUMSUM:
    case proto::Kernel::ARGSORT: {
      const int64_t axis = k.axis();
      const bool is_sort = k.kind() == proto::Kernel::ARGSORT;
      const std::optional<CompareDirection> direction = CompareDirectionFromNumber(k.direction());
      const bool ok = inputs.size() == 1 && axis >= 0 && axis < static_cast<int64_t>(inputs[0].dims.size()) &&
                      inputs[0].dims == output.dims &&
                      std::equal(output.dims.begin(), output.dims.end(), k.iteration_shape().dims().begin(),
                                 k.iteration_shape().dims().end()) &&
                      (is_sort ? output.type == PrimitiveType::kS64 &&
                                     (direction == CompareDirection::kLt || direction == CompareDirection::kGt)
                               : output.type == inputs[0].type && output.type != PrimitiveType::kPred);
      RETURN_IF_ERROR(Expect(ok, k, is_sort ? "bad argsort" : "bad cumsum"));
      if (is_sort) return std::make_unique<ArgsortKernel>(inputs[0], axis, direction == CompareDirection::kGt);
      return std::make_unique<CumsumKernel>(output, axis);
    }
    case proto::Kernel::INDEX_SELECT:
    case proto::Kernel::GATHER: {
      const int64_t axis = k.axis();
      bool ok = inputs.size() == 2 && axis >= 0 && axis < static_cast<int64_t>(inputs[0].dims.size()) &&
                (inputs[1].type == PrimitiveType::kS32 || inputs[1].type == PrimitiveType::kS64) &&
                output.type == inputs[0].type && output.dims.size() == inputs[0].dims.size() && k.site() >= 0;
      if (ok && k.kind() == proto::Kernel::INDEX_SELECT) {
        std::vector<int64_t> want = inputs[0].dims;
        ok = inputs[1].dims.size() == 1;
        if (ok) want[static_cast<size_t>(axis)] = inputs[1].dims[0];
        ok = ok && want == output.dims;
      } else if (ok) {
        ok = inputs[1].dims == output.dims;
        for (size_t d = 0; ok && d < output.dims.size(); ++d) {
          ok = d == static_cast<size_t>(axis) || output.dims[d] <= inputs[0].dims[d];
        }
      }
      RETURN_IF_ERROR(Expect(ok, k, "bad indexing shapes"));
      if (k.kind() == proto::Kernel::INDEX_SELECT)
        return std::make_unique<IndexSelectKernel>(inputs[0], inputs[1], axis);
      return std::make_unique<GatherKernel>(inputs[0], inputs[1], axis);
    }
    case proto::Kernel::CONCATENATE: {
      const int64_t axis = k.axis();
      const std::vector<OperandView> views = OperandViewsOf(k);
      absl::StatusOr<std::vector<ArrayShape>> read = ShapesRead(views, inputs);
      if (!read.ok()) return Expect(false, k, std::string(read.status().message()));
      const std::vector<ArrayShape>& parts = *read;
      bool ok = !parts.empty() && axis >= 0 && axis < static_cast<int64_t>(output.dims.size());
      int64_t total = 0;
      for (size_t i = 0; ok && i < parts.size(); ++i) {
        ok = parts[i].type == output.type && parts[i].dims.size() == output.dims.size();
        for (size_t d = 0; ok && d < output.dims.size(); ++d) {
          ok = d == static_cast<size_t>(axis) || parts[i].dims[d] == output.dims[d];
        }
        if (ok) total += parts[i].dims[static_cast<size_t>(axis)];
      }
      ok = ok && total == output.dims[static_cast<size_t>(axis)];
      RETURN_IF_ERROR(Expect(ok, k, "bad concatenation"));
      return std::make_unique<ConcatKernel>(parts, views, output, axis);
    }
    case proto::Kernel::ATTENTION:
    case proto::Kernel::ATTENTION_GRAD: {
      const bool grad = k.kind() == proto::Kernel::ATTENTION_GRAD;
      ASSIGN_OR_RETURN(const GemmLibrary library, LibraryOf(k));
      const AttentionParams params{k.scale(), k.causal(), k.dropout(), k.stream(), library};
      absl::StatusOr<AttentionLayout> layout =
          CheckAttention(inputs, output, grad, params, OperandViewsOf(k), ResultViewsOf(k));
      if (!layout.ok()) return Expect(false, k, std::string(layout.status().message()));
      return grad ? MakeAttentionGradKernel(*std::move(layout), params)
                  : MakeAttentionKernel(*std::move(layout), params);
    }
    case proto::Kernel::NORMALIZE: return BuildNormalizeKernel(k, inputs, output);
    case proto::Kernel::SCATTER: {
      const std::optional<Opcode> op = OpcodeFromNumber(k.opcode());
      const int64_t axis = k.axis();
      bool ok = op.has_value() && ClassOf(*op) == OpClass::kScatter && inputs.size() == 3 && k.site() >= 0 &&
                inputs[0] == output && inputs[2].type == output.type && output.type != PrimitiveType::kPred &&
                (inputs[1].type == PrimitiveType::kS32 || inputs[1].type == PrimitiveType::kS64) && axis >= 0 &&
                axis < static_cast<int64_t>(output.dims.size()) && inputs[2].dims.size() == output.dims.size();
      if (ok && *op == Opcode::kScatterAdd) {
        ok = inputs[1].dims == inputs[2].dims;
        for (size_t d = 0; ok && d < output.dims.size(); ++d) {
          ok = d == static_cast<size_t>(axis) || inputs[1].dims[d] <= output.dims[d];
        }
      } else if (ok) {
        std::vector<int64_t> want = output.dims;
        ok = inputs[1].dims.size() == 1;
        if (ok) want[static_cast<size_t>(axis)] = inputs[1].dims[0];
        ok = ok && want == inputs[2].dims;
      }
      RETURN_IF_ERROR(Expect(ok, k, "bad scatter shapes"));
      if (*op == Opcode::kScatterAdd) return std::make_unique<ScatterAddKernel>(inputs[0], inputs[1], axis);
      return std::make_unique<IndexAddKernel>(inputs[0], inputs[1], axis);
    }
    case proto::Kernel::COLLECTIVE: return Expect(false, k, "needs the partition count: BuildCollectiveKernel");
    case proto::Kernel_Kind_Kernel_Kind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case proto::Kernel_Kind_Kernel_Kind_INT_MAX_SENTINEL_DO_NOT_USE_: break;
  }
  return Expect(false, k, "unknown kernel kind");
}

}  // namespace lazyrt::pjrt
