#include "pjrt_sim/fusion.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <span>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pjrt_sim/kernels/attention.h"
#include "pjrt_sim/kernels/strided_view.h"
#include "pjrt_sim/passes.h"

namespace lazyrt::pjrt {
namespace {

std::atomic<int64_t> g_sibling_fallbacks{0};

// The dims of size other than 1, in order.
std::vector<int64_t> NonUnitDims(const std::vector<int64_t>& dims) {
  std::vector<int64_t> kept;
  std::copy_if(dims.begin(), dims.end(), std::back_inserter(kept), [](int64_t d) { return d != 1; });
  return kept;
}
// A reshape that only inserts or removes dims of size 1 ([B, T, 1, 1, H, D] <-> [B, T, H, D]) maps each
// coordinate to one coordinate: a view, where any other reshape regroups elements.
bool IsUnitDimReshape(const HloInst& reshape, const HloInst& operand) {
  return reshape.opcode == Opcode::kReshape && NonUnitDims(reshape.shape.dims) == NonUnitDims(operand.shape.dims);
}
bool IsRng(Opcode op) { return op == Opcode::kRngUniform || op == Opcode::kRngNormal; }
// Consumers that read their operands from memory (they cannot take a fused operand). A reshape is not
// one: a materialized reshape aliases its operand (Classify materializes that), a view reshape reads through.
bool ReadsMaterializedOperands(Opcode op) {
  return op == Opcode::kDot || op == Opcode::kArgmax || op == Opcode::kCumsum || op == Opcode::kArgsort ||
         op == Opcode::kIndexSelect || op == Opcode::kGather || op == Opcode::kConcatenate ||
         ClassOf(op) == OpClass::kAttention || ClassOf(op) == OpClass::kNormalize || ClassOf(op) == OpClass::kScatter ||
         ClassOf(op) == OpClass::kCollective;
}

// How a coordinate of some instruction is computed from the kernel's iteration coordinates:
// coord = offset + scale * point[src] (src < 0: constant offset).
struct AxisMap {
  int64_t src, scale, offset;
};
using View = std::vector<AxisMap>;

View IdentityView(size_t rank) {
  View v;
  for (size_t d = 0; d < rank; ++d) v.push_back({static_cast<int64_t>(d), 1, 0});
  return v;
}

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) s[d - 1] = s[d] * dims[d];
  return s;
}

// A view of a stored array as element offset and strides over the `space_rank` iteration dims.
struct Strided {
  int64_t offset = 0;
  std::vector<int64_t> strides;
};
Strided Flatten(const std::vector<int64_t>& stored_dims, const View& view, size_t space_rank) {
  const std::vector<int64_t> rs = RowMajorStrides(stored_dims);
  Strided s{0, std::vector<int64_t>(space_rank, 0)};
  for (size_t j = 0; j < view.size(); ++j) {
    s.offset += view[j].offset * rs[j];
    if (view[j].src >= 0) s.strides[static_cast<size_t>(view[j].src)] += view[j].scale * rs[j];
  }
  return s;
}

// The view of the operand of `inst` (a broadcast, transpose, slice or unit dim reshape of `in`) that
// `view` of `inst` reads.
View ViewOfOperand(const HloInst& inst, const HloInst& in, const View& view) {
  View v;
  switch (inst.opcode) {
    case Opcode::kBroadcast:
      for (size_t i = 0; i < inst.dims.size(); ++i) {
        const bool kept = in.shape.dims[i] == inst.shape.dims[static_cast<size_t>(inst.dims[i])];
        v.push_back(kept ? view[static_cast<size_t>(inst.dims[i])] : AxisMap{-1, 0, 0});
      }
      return v;
    case Opcode::kTranspose:
      v.resize(view.size());
      for (size_t i = 0; i < inst.dims.size(); ++i) v[static_cast<size_t>(inst.dims[i])] = view[i];
      return v;
    case Opcode::kSlice:
      for (size_t j = 0; j < view.size(); ++j) {
        // Along a result dim of size <= 1 the stride never matters (and may be huge: x[::2^62]).
        const int64_t stride = inst.shape.dims[j] <= 1 ? 1 : inst.stride[j];
        v.push_back({view[j].src, view[j].scale * stride, inst.start[j] + stride * view[j].offset});
      }
      return v;
    default: {  // a reshape of unit dims only (IsFusable): the other dims keep their maps
      size_t j = 0;
      for (int64_t d : in.shape.dims) {
        if (d == 1) {
          v.push_back({-1, 0, 0});
          continue;
        }
        while (inst.shape.dims[j] == 1) ++j;
        v.push_back(view[j++]);
      }
      return v;
    }
  }
}

class Emitter {
 public:
  Emitter(const HloModule& m, const FusionOptions& o, proto::Executable& exe) : m_(m), options_(o), exe_(exe) {}

  absl::StatusOr<int64_t> Run() {
    int64_t fused_away = Emit();
    if (options_.siblings && !ReadsFollowWrites()) {
      // A sibling fusion put a kernel before one whose result it reads: a bug (fusion_test's random
      // graphs look for it), which costs this module its sibling fusions, never its results.
      g_sibling_fallbacks.fetch_add(1, std::memory_order_relaxed);
      options_.siblings = false;
      exe_.clear_parameters();
      exe_.clear_slots();
      exe_.clear_kernels();
      exe_.clear_outputs();
      fused_away = Emit();
    }
    return fused_away;
  }

 private:
  int64_t Emit() {
    Classify();
    WriteGradientsWhereConcatenated();
    AssignSlots();
    // A reduction that moved (sibling fusion) runs at the place of the loop it took in.
    std::vector<int64_t> moved_here(m_.insts.size(), -1);
    for (size_t r = 0; r < m_.insts.size(); ++r) {
      if (moved_to_[r] >= 0) moved_here[static_cast<size_t>(moved_to_[r])] = static_cast<int64_t>(r);
    }
    // An attention's gradient that writes a concatenation runs at its own place: its operands are freed
    // where they were, and the concatenation's bytes are taken where the packed gradients' were.
    std::vector<int64_t> writes_into(m_.insts.size(), -1);
    for (size_t c = 0; c < m_.insts.size(); ++c) {
      if (written_by_[c] >= 0) writes_into[static_cast<size_t>(written_by_[c])] = static_cast<int64_t>(c);
    }
    int64_t fused_away = 0;
    for (size_t i = 0; i < m_.insts.size(); ++i) {
      if (moved_here[i] >= 0) EmitKernel(moved_here[i]);
      if (writes_into[i] >= 0) {
        EmitKernel(writes_into[i]);
        continue;
      }
      if (!materialized_[i] || absorbed_into_[i] >= 0 || written_by_[i] >= 0) {
        ++fused_away;
        continue;
      }
      if (moved_to_[i] >= 0) continue;
      const HloInst& inst = m_.insts[i];
      if (inst.opcode == Opcode::kParameter || inst.opcode == Opcode::kReshape) continue;
      EmitKernel(static_cast<int64_t>(i));
    }
    return fused_away;
  }

  // Whether every kernel reads only parameters and slots that earlier kernels wrote (through aliases).
  bool ReadsFollowWrites() const {
    std::vector<bool> written(static_cast<size_t>(exe_.slots_size()), false);
    const auto base = [&](int64_t slot) {
      while (exe_.slots(static_cast<int>(slot)).kind() == proto::Slot::ALIAS)
        slot = exe_.slots(static_cast<int>(slot)).index();
      return static_cast<size_t>(slot);
    };
    for (const proto::Kernel& k : exe_.kernels()) {
      for (int64_t in : k.inputs()) {
        if (exe_.slots(static_cast<int>(base(in))).kind() != proto::Slot::PARAMETER && !written[base(in)]) return false;
      }
      if (k.output() >= 0) written[base(k.output())] = true;
      for (int64_t extra : k.extra_outputs()) written[base(extra)] = true;
    }
    return true;
  }

  const HloInst& Inst(int64_t id) const { return m_.insts[static_cast<size_t>(id)]; }
  bool IsFusable(const HloInst& inst) const {
    return pjrt::IsFusable(inst.opcode) ||
           (inst.opcode == Opcode::kReshape && IsUnitDimReshape(inst, Inst(inst.operands[0])));
  }
  // Whether `inst` reads its operand where it is: a transpose, a slice, a unit dim reshape, or (with
  // `broadcasts`) a broadcast.
  bool IsView(const HloInst& inst, bool broadcasts) const {
    return inst.opcode == Opcode::kTranspose || inst.opcode == Opcode::kSlice ||
           (broadcasts && inst.opcode == Opcode::kBroadcast) ||
           (inst.opcode == Opcode::kReshape && IsUnitDimReshape(inst, Inst(inst.operands[0])));
  }
  // Whether `id`'s kernel, if it has one, is a loop: elementwise, and not a sum a DOT computes.
  bool IsLoop(int64_t id) const { return IsElementwise(Inst(id).opcode) && !added_to_product_.contains(id); }

  // A convert of a stored array from a type no wider, and arithmetic on one stored array (besides
  // constants and broadcasts of small stored arrays, at most an eighth of the result: a row of biases, a
  // column of means): each reader computes it from that array instead of loading it stored, which costs a
  // reader about the same load (or less, through a convert) and saves the store with its write-allocate
  // read. With bf16 products, f32(dot) + bias, read by GELU's forward and again by its backward, is not
  // written at all, nor f32(dot) read by a layer norm's gradient and by its reductions (an f32 dot + bias
  // is the DOT's own result: AddToProducts).
  // Deeper f32 work, up to kRecomputedDepth steps below the value and functions of one argument among
  // them, is recomputed too when the one array it comes from is narrower and no reader broadcasts the
  // value: a reader then loads fewer bytes than the stored value would take, and the loops wait on
  // memory, not on f32 arithmetic (f64 functions are scalar library calls; a broadcast reader would
  // compute the value once per element of its larger space). With bf16 products this kept GELU's
  // erf((f32(h) + bias) * c) from being stored for its backward, before GELU and its derivative became
  // opcodes of their own (benchmarks/RESULTS.md: 101.2 -> 97.2 ms a bf16 GPT step, the same bits). From
  // an f32 array, such work is recomputed only for readers far apart, more than kEvictedBytes of values
  // computed between them (a forward's and its backward's): the stored value would be written to memory
  // and read back from it, holding its bytes in the arena all the while; a reader loads the array
  // instead, as many bytes, or none more where it loads the array anyway (GELU's backward, which also
  // needs h + bias). Readers close together find a stored value in the cache, and it is computed once
  // (softmax's exp, read by the sum and by the division).
  bool CheapToRecompute(int64_t id) const {
    const HloInst& inst = Inst(id);
    if (RecomputedFrom(inst, 0)) return true;
    if (inst.shape.type != PrimitiveType::kF32) return false;
    const std::vector<int64_t>& readers = readers_[static_cast<size_t>(id)];
    if (std::ranges::any_of(readers, [&](int64_t r) { return Inst(r).opcode == Opcode::kBroadcast; })) return false;
    const std::optional<int64_t> from = RecomputedFrom(inst, kRecomputedDepth);
    if (!from || *from == kNoArray) return false;
    if (ByteWidth(Inst(*from).shape.type) < ByteWidth(inst.shape.type)) return true;
    if (readers.empty()) return false;
    const auto [first, last] = std::ranges::minmax(readers);
    return bytes_before_[static_cast<size_t>(last)] - bytes_before_[static_cast<size_t>(first) + 1] > kEvictedBytes;
  }
  // A costly function (a transcendental, a power) read only through broadcasts that repeat each of its values
  // many times: fused into its readers, it would be evaluated at every point of their larger space, so it is
  // computed once at its own shape and stored. A log-softmax's log(sum) over the GPT's 4096 x 114 logits took
  // 466,944 logarithms where 4096 give the same bits. A small saving is not worth the kernel it adds
  // (kMinRepeatedPoints); a scalar is computed once per run by its reader's program anyway.
  bool RepeatedByBroadcasts(int64_t id) const {
    const HloInst& inst = Inst(id);
    if (!IsCostlyFunction(inst.opcode) || inst.shape.numel() < 2) return false;
    const std::vector<int64_t>& readers = readers_[static_cast<size_t>(id)];
    int64_t repeated = 0;  // points the readers would evaluate it at beyond its own
    for (int64_t r : readers) {
      const HloInst& reader = Inst(r);
      if (reader.opcode != Opcode::kBroadcast || reader.shape.numel() < kMinRepeat * inst.shape.numel()) return false;
      repeated += reader.shape.numel() - inst.shape.numel();
    }
    return !readers.empty() && repeated >= kMinRepeatedPoints;
  }
  static constexpr int64_t kMinRepeat = 8;
  // ~10-30 us of evaluations at 0.3-1 ns each: more than a small kernel's start and its pass.
  static constexpr int64_t kMinRepeatedPoints = int64_t{1} << 15;
  static constexpr int kRecomputedDepth = 4;
  // Many times a core's L2 (1-2 MiB on the machines seen): a value written before that much other work is
  // read back from memory.
  static constexpr int64_t kEvictedBytes = int64_t{16} << 20;
  static constexpr int64_t kNoArray = -1;  // computed from constants alone
  // The one stored array `inst` is computed from, through at most `depth` nested elementwise steps or
  // functions of one argument below it (kNoArray: none); nullopt if it is not computed from one array so.
  // A nested value already stored counts as the array (at depth 0, as before nesting, it does not).
  std::optional<int64_t> RecomputedFrom(const HloInst& inst, int depth) const {
    if (const std::optional<int64_t> converted = WideningConvertOfStored(inst)) return converted;
    const bool arithmetic = inst.opcode == Opcode::kAdd || inst.opcode == Opcode::kSubtract ||
                            inst.opcode == Opcode::kMultiply || inst.opcode == Opcode::kNegate ||
                            inst.opcode == Opcode::kMaximum || inst.opcode == Opcode::kMinimum;
    if (!arithmetic && !(IsUnary(inst.opcode) && depth > 0)) return std::nullopt;
    int64_t from = kNoArray;
    for (int64_t operand : inst.operands) {
      const HloInst& in = Inst(operand);
      int64_t stored = operand;
      if (in.opcode == Opcode::kConstant) continue;
      if (in.opcode == Opcode::kBroadcast) {
        const HloInst& source = Inst(in.operands[0]);
        if (source.opcode == Opcode::kConstant) continue;
        if (IsFusable(source)) return std::nullopt;
        if (source.shape.numel() * 8 <= inst.shape.numel()) continue;
        stored = in.operands[0];
      } else if (IsFusable(in) && !(depth > 0 && materialized_[static_cast<size_t>(operand)])) {
        std::optional<int64_t> inner = WideningConvertOfStored(in);
        if (!inner && depth > 0) inner = RecomputedFrom(in, depth - 1);
        if (!inner) return std::nullopt;
        if (*inner == kNoArray) continue;
        stored = *inner;
      }
      if (from != kNoArray && from != stored) return std::nullopt;
      from = stored;
    }
    return from;
  }
  // The stored array `inst` converts, if it is a convert from a type no wider than its own.
  std::optional<int64_t> WideningConvertOfStored(const HloInst& inst) const {
    if (inst.opcode != Opcode::kConvert) return std::nullopt;
    const HloInst& source = Inst(inst.operands[0]);
    if (IsFusable(source) || ByteWidth(source.shape.type) > ByteWidth(inst.shape.type)) return std::nullopt;
    return inst.operands[0];
  }

  // A materialized reshape is an alias of its operand's memory, so that is materialized too (later
  // reshapes first: one may read another). A view reshape is read through by its readers.
  void MaterializeAliasedOperands() {
    for (size_t i = m_.insts.size(); i-- > 0;) {
      if (m_.insts[i].opcode == Opcode::kReshape && materialized_[i]) {
        materialized_[static_cast<size_t>(m_.insts[i].operands[0])] = true;
      }
    }
  }

  void Classify() {
    const size_t n = m_.insts.size();
    materialized_.assign(n, false);
    readers_.assign(n, {});
    bytes_before_.assign(n + 1, 0);
    for (size_t i = 0; i < n; ++i) {  // a value is at most 2^43 bytes (verified): the sum saturates, never wraps
      bytes_before_[i + 1] = std::min(bytes_before_[i] + m_.insts[i].shape.byte_size(), int64_t{1} << 62);
    }
    for (size_t i = 0; i < n; ++i) {
      for (int64_t op : m_.insts[i].operands) readers_[static_cast<size_t>(op)].push_back(static_cast<int64_t>(i));
    }
    for (int64_t out : m_.outputs) materialized_[static_cast<size_t>(out)] = true;
    for (size_t i = 0; i < n; ++i) {
      const HloInst& inst = m_.insts[i];
      const Opcode op = inst.opcode;
      if (!options_.enabled || !IsFusable(inst) || IsRng(op)) materialized_[i] = true;
      // Elementwise work with several readers is computed once, unless it is as cheap as loading it;
      // views and generators are cheap to recompute in each reader.
      if (IsElementwise(op) && readers_[i].size() > 1 && !CheapToRecompute(static_cast<int64_t>(i))) {
        materialized_[i] = true;
      }
      if (RepeatedByBroadcasts(static_cast<int64_t>(i))) materialized_[i] = true;
      if (ReadsMaterializedOperands(op)) {
        for (size_t j = 0; j < inst.operands.size(); ++j) {
          const int64_t operand = inst.operands[j];
          const std::optional<ViewedOperand> view = j < ViewableOperands(inst) ? ViewOf(operand) : std::nullopt;
          materialized_[static_cast<size_t>(view ? view->base : operand)] = true;
        }
      }
      // A reduction takes its operand fused only if it is the operand's sole reader (or the operand is
      // free to recompute).
      if (op == Opcode::kReduce && IsElementwise(Inst(inst.operands[0]).opcode) &&
          readers_[static_cast<size_t>(inst.operands[0])].size() > 1 && !CheapToRecompute(inst.operands[0])) {
        materialized_[static_cast<size_t>(inst.operands[0])] = true;
      }
    }
    MaterializeAliasedOperands();
    // Cut programs that would grow past the step limit (also bounds the emitter's recursion).
    std::vector<int64_t> steps(n, 0), program_steps(n, 1);
    for (size_t i = 0; i < n; ++i) {
      const HloInst& inst = m_.insts[i];
      if (!IsFusable(inst) && inst.opcode != Opcode::kReduce) continue;
      int64_t s = 1;
      for (int64_t op : inst.operands) {
        if (!materialized_[static_cast<size_t>(op)]) s += steps[static_cast<size_t>(op)];
      }
      if (s > options_.max_program_steps) {
        s = 1;
        for (int64_t op : inst.operands) {
          if (!materialized_[static_cast<size_t>(op)] && steps[static_cast<size_t>(op)] > 1) {
            materialized_[static_cast<size_t>(op)] = true;
          } else if (!materialized_[static_cast<size_t>(op)]) {
            s += steps[static_cast<size_t>(op)];
          }
        }
      }
      program_steps[i] = s;
      steps[i] = materialized_[i] ? 1 : s;
    }
    // A cut may have stored a unit dim reshape (an alias) of a value computed in the program it was cut
    // from. Storing that value as well only shortens the programs that read it.
    MaterializeAliasedOperands();
    AddToProducts();
    // Multi-output fusion: an elementwise value computed once for several readers is computed by the
    // first kernel that reads it, if that is a loop of the value's shape, and written from there.
    // Its own kernel would read the same inputs in a pass of its own: AdamW's new moments, read again
    // by the parameter update right after. A value read in that kernel only (and not a result) is never
    // stored at all.
    absorbed_into_.assign(n, -1);
    moved_to_.assign(n, -1);
    if (!options_.enabled) return;
    std::vector<bool> is_output(n, false);
    for (int64_t out : m_.outputs) is_output[static_cast<size_t>(out)] = true;
    // Per kernel: the points where values it stores are read (each point at or after the kernel, as
    // absorption never moves a kernel earlier). It may itself move into a later kernel only if that
    // still runs at or before every one of them; the points it computes itself move along.
    std::vector<std::vector<int64_t>> later_reads(n);
    // Per absorbed value: its readers' points outside the kernel it was absorbed into.
    std::vector<std::vector<int64_t>> reads_elsewhere(n);
    // Kernel `id`, read at `points`, is computed by kernel `into` from now on: its steps join into's
    // program, and the reads of what it stores become into's later reads, but for those inside the one
    // kernel (no longer reads of a stored value).
    const auto absorb = [&](int64_t id, int64_t into, std::span<const int64_t> points) {
      program_steps[static_cast<size_t>(into)] += program_steps[static_cast<size_t>(id)];
      absorbed_into_[static_cast<size_t>(id)] = into;
      std::ranges::copy_if(points, std::back_inserter(reads_elsewhere[static_cast<size_t>(id)]),
                           [&](int64_t p) { return p != into; });
      std::vector<int64_t>& reads = later_reads[static_cast<size_t>(into)];
      std::erase_if(reads, [&](int64_t p) { return p == id; });
      std::ranges::copy_if(later_reads[static_cast<size_t>(id)], std::back_inserter(reads),
                           [&](int64_t p) { return p != into; });
      reads.insert(reads.end(), reads_elsewhere[static_cast<size_t>(id)].begin(),
                   reads_elsewhere[static_cast<size_t>(id)].end());
      later_reads[static_cast<size_t>(id)].clear();
    };
    for (size_t i = 0; i < n; ++i) {
      const int64_t id = static_cast<int64_t>(i);
      const std::vector<int64_t> points = ReadingPoints(id);
      if (points.empty()) continue;
      const int64_t into = points.front();
      // Every point is still a kernel of its own (at or after i: later than any absorption so far).
      const auto moves_along_or_waits = [&](int64_t p) { return p == id || p >= into; };
      if (program_steps[static_cast<size_t>(into)] + program_steps[i] > options_.max_program_steps ||
          !std::ranges::all_of(later_reads[i], moves_along_or_waits))
        continue;
      absorb(id, into, points);
    }
    // Sibling fusion: a loop and a reduction over rows or columns of the same space that read one value
    // become one kernel (a reduction storing the loop's results): one pass over their inputs for both (a
    // bias's gradient, the column sums of dY, beside dY rounded to bf16 for the products), and a value
    // they share that one of them computed is stored by neither. The kernel runs where the later of the two was if
    // everything the earlier one stores is read there or later, else where the earlier was if everything the later one
    // loads is written before that.
    for (size_t i = 0; i < n && options_.siblings; ++i) {
      // Kernels that read value i at the same points: the one computing it with each reading it stored,
      // or two that read it stored (a product, the sum of heads' gradients reshaped, a parameter).
      std::vector<std::pair<int64_t, int64_t>> pairs;
      if (const int64_t computed_in = absorbed_into_[i]; computed_in >= 0) {
        for (int64_t reader : reads_elsewhere[i]) pairs.emplace_back(computed_in, reader);
      } else if (materialized_[i]) {
        const std::optional<std::vector<int64_t>> points = PointsReading(static_cast<int64_t>(i));
        std::vector<int64_t> loops, reductions;
        for (int64_t p : points.value_or(std::vector<int64_t>{})) {
          if (IsLoop(p)) loops.push_back(p);
          if (Inst(p).opcode == Opcode::kReduce) reductions.push_back(p);
        }
        for (int64_t loop : loops) {
          for (int64_t reduce : reductions) pairs.emplace_back(loop, reduce);
        }
      }
      for (const auto& [one, other] : pairs) {
        const bool one_is_loop = IsLoop(one);
        const int64_t loop = one_is_loop ? one : other, reduce = one_is_loop ? other : one;
        if (!IsLoop(loop) || Inst(reduce).opcode != Opcode::kReduce || !ReducesRowsOrColumns(Inst(reduce)) ||
            absorbed_into_[static_cast<size_t>(loop)] >= 0 || absorbed_into_[static_cast<size_t>(reduce)] >= 0 ||
            moved_to_[static_cast<size_t>(reduce)] >= 0 ||
            Inst(Inst(reduce).operands[0]).shape.dims != Inst(loop).shape.dims ||
            program_steps[static_cast<size_t>(reduce)] + program_steps[static_cast<size_t>(loop)] >
                options_.max_program_steps) {
          continue;
        }
        const std::optional<std::vector<int64_t>> loop_points = PointsReading(loop);
        if (!loop_points) continue;
        // Neither has moved or been taken in: each runs at its own place. Reads are compared by where
        // their kernels run now (an earlier pairing may have moved one).
        const int64_t first = std::min(loop, reduce), second = std::max(loop, reduce);
        const auto waits = [&](int64_t p) {
          return p == loop || p == reduce || ReadsAtOrAfter(p, second, loop, reduce);
        };
        const std::optional<std::vector<int64_t>> first_points = first == loop ? loop_points : PointsReading(reduce);
        const bool at_second = first_points && std::ranges::all_of(*first_points, waits) &&
                               std::ranges::all_of(later_reads[static_cast<size_t>(first)], waits);
        if (!at_second && !ContentsReadyBefore(second, loop, reduce, first)) continue;
        absorb(loop, reduce, *loop_points);
        if ((at_second ? second : first) != reduce) moved_to_[static_cast<size_t>(reduce)] = loop;
        break;
      }
    }
    // A value read nowhere but in the kernel that computes it (its other readers were absorbed there
    // too) is computed there and never stored, unless it is a result.
    for (size_t i = 0; i < n; ++i) {
      if (absorbed_into_[i] < 0 || is_output[i]) continue;
      const int64_t at = RunsAt(static_cast<int64_t>(i));
      if (std::ranges::all_of(reads_elsewhere[i], [&](int64_t p) { return RunsAt(p) == at; })) {
        materialized_[i] = false;
      }
    }
  }

  // A stored value read through a view (its offset and a stride per dim of the view).
  struct ViewedOperand {
    int64_t base;  // the stored value read
    Strided strided;
  };

  // A product plus addends of its type (stored arrays read through views with contiguous rows: a bias
  // broadcast along its rows, an array of its shape), the product read by nothing else: the DOT's kernel
  // adds them to each panel of the product right after the library writes it, and the sum is stored
  // instead of the product (PyTorch's addmm computes the same sum).
  // No loop reads the product back to add the bias, and the sum's readers load it instead of computing it
  // (the GPT's q, k, v, and h = x W1 + b1 read by GELU's forward and backward). The same bits: the sum is
  // rounded once, after the product's own rounding (but for which of two NaNs' payloads it carries: the
  // product's, whatever the add's order). The DOT runs where the sum was, with the addend written.
  void AddToProducts() {
    added_to_product_.clear();
    sum_of_product_.clear();
    if (!options_.enabled) return;
    for (size_t i = 0; i < m_.insts.size(); ++i) {
      const HloInst& add = m_.insts[i];
      if (add.opcode != Opcode::kAdd ||
          (add.shape.type != PrimitiveType::kF32 && add.shape.type != PrimitiveType::kF64))
        continue;
      for (size_t side = 0; side < 2; ++side) {
        std::vector<int64_t> chain;  // the product and the reshapes from it to the sum
        if (!ProductOnlyFor(add.operands[side], static_cast<int64_t>(i), chain)) continue;
        std::optional<ViewedOperand> addend = AddendView(add.operands[1 - side], add.shape);
        if (!addend) continue;
        for (int64_t id : chain) materialized_[static_cast<size_t>(id)] = false;
        AddedToProduct sum{chain.front(), {add.operands[1 - side]}, {*std::move(addend)}};
        // A sum read by nothing but another add of an addend the DOT can read (a residual connection's x +
        // (x W + b)) is the DOT's too, added after: the same bits as the loops adding them in turn.
        int64_t last = static_cast<int64_t>(i);
        for (;;) {
          const std::vector<int64_t>& readers = readers_[static_cast<size_t>(last)];
          if (readers.size() != 1 || std::ranges::find(m_.outputs, last) != m_.outputs.end()) break;
          const HloInst& next = Inst(readers[0]);
          if (next.opcode != Opcode::kAdd || next.operands[0] == next.operands[1]) break;
          const int64_t other = next.operands[0] == last ? next.operands[1] : next.operands[0];
          std::optional<ViewedOperand> more = AddendView(other, next.shape);
          if (!more || !NearProduct(sum.product, readers[0])) break;
          sum.addends.push_back(other);
          sum.views.push_back(*std::move(more));
          materialized_[static_cast<size_t>(last)] = false;
          last = readers[0];
        }
        materialized_[static_cast<size_t>(last)] = true;
        sum_of_product_[sum.product] = last;
        added_to_product_.emplace(last, std::move(sum));
        break;
      }
    }
  }
  // Whether `id` is a product of operands of `add`'s type, or a reshape of one, that `add` alone reads
  // (through nothing but reshapes, each read by the next alone) and that is no result; `chain` gets the
  // product and the reshapes. Not a product that shrinks its operands (a weight's gradient, which the
  // schedule runs right after them: its kernel would run at the sum instead, and its operands live until
  // then), nor one far from the sum (NearProduct).
  bool ProductOnlyFor(int64_t id, int64_t add, std::vector<int64_t>& chain) const {
    const PrimitiveType type = Inst(add).shape.type;
    int64_t reader = add;
    for (int64_t at = id;; reader = at, at = Inst(at).operands[0]) {
      const HloInst& inst = Inst(at);
      const std::vector<int64_t>& readers = readers_[static_cast<size_t>(at)];
      if (readers.size() != 1 || readers[0] != reader || std::ranges::find(m_.outputs, at) != m_.outputs.end())
        return false;
      chain.insert(chain.begin(), at);
      if (inst.opcode == Opcode::kReshape) continue;
      if (inst.opcode != Opcode::kDot || inst.shape.type != type) return false;
      const HloInst& a = Inst(inst.operands[0]);
      const HloInst& b = Inst(inst.operands[1]);
      return a.shape.type == type && b.shape.type == type &&
             inst.shape.numel() * kShrinkFactor > std::max(a.shape.numel(), b.shape.numel()) && NearProduct(at, add);
    }
  }
  // Whether sum `add` of `product` comes before kEvictedBytes of other stored values: the product's kernel
  // runs at the sum, its operands live until then, and it should find them cached.
  bool NearProduct(int64_t product, int64_t add) const {
    int64_t bytes = 0;
    for (int64_t i = product + 1; i < add && bytes <= kEvictedBytes; ++i) {
      if (materialized_[static_cast<size_t>(i)]) bytes += Inst(i).shape.byte_size();
    }
    return bytes <= kEvictedBytes;
  }
  // How the product's kernel reads `operand` of a sum of `sum_shape`: a stored array of the sum's type,
  // through broadcasts, transposes, slices and unit dim reshapes that are not stored, with contiguous rows.
  std::optional<ViewedOperand> AddendView(int64_t operand, const ArrayShape& sum_shape) const {
    const size_t rank = sum_shape.dims.size();
    if (rank == 0) return std::nullopt;
    View view = IdentityView(rank);
    int64_t at = operand;
    while (!materialized_[static_cast<size_t>(at)]) {
      const HloInst& inst = Inst(at);
      if (!IsView(inst, /*broadcasts=*/true)) return std::nullopt;
      view = ViewOfOperand(inst, Inst(inst.operands[0]), view);
      at = inst.operands[0];
    }
    if (Inst(at).shape.type != sum_shape.type) return std::nullopt;
    Strided strided = Flatten(Inst(at).shape.dims, view, rank);
    if (sum_shape.dims.back() == 1) strided.strides.back() = 1;  // any stride reads a row of one
    if (strided.strides.back() != 1) return std::nullopt;
    return ViewedOperand{at, std::move(strided)};
  }

  // Kernels that read operands through views where they are transposes, slices or unit dim reshapes of
  // a stored value with contiguous rows, instead of copies a loop kernel made first: an attention its q,
  // k, v (and the forward result and d(output); the projections' [B, T, H, D] read as [B, H, T, D]), not
  // its mask or dropout seed; a concatenation every operand (the heads' gradients, transposed back).
  static size_t ViewableOperands(const HloInst& inst) {
    switch (inst.opcode) {
      case Opcode::kAttention: return 3;
      case Opcode::kAttentionGrad: return 5;
      case Opcode::kConcatenate: return inst.operands.size();
      default: return 0;
    }
  }
  std::optional<ViewedOperand> ViewOf(int64_t operand) const {
    const size_t rank = Inst(operand).shape.dims.size();
    View view = IdentityView(rank);
    int64_t at = operand;
    for (;;) {
      const HloInst& inst = Inst(at);
      if (!IsView(inst, /*broadcasts=*/false)) break;
      view = ViewOfOperand(inst, Inst(inst.operands[0]), view);
      at = inst.operands[0];
    }
    if (at == operand || rank == 0) return std::nullopt;
    Strided strided = Flatten(Inst(at).shape.dims, view, rank);
    if (strided.strides.back() != 1) return std::nullopt;
    return ViewedOperand{at, std::move(strided)};
  }

  // The points where the readers of materialized elementwise value `id` reach it, earliest first: each
  // reader itself, or the first materialized values along the fused elementwise ops from it towards the
  // readers (PointsReading). Empty unless the first is a loop (elementwise, so of `id`'s
  // shape), which can compute `id` as an extra output, and every point is materialized (a reader in
  // another kernel loads the stored value; none recomputes it through a view). The base of an operand view
  // (ViewOf) is never moved so: the view's first op is a reader that is not stored, or one stored before
  // the attention or concatenation reading through it.
  std::vector<int64_t> ReadingPoints(int64_t id) const {
    if (!materialized_[static_cast<size_t>(id)] || !IsLoop(id)) return {};
    std::optional<std::vector<int64_t>> points = PointsReading(id);
    if (!points || points->empty()) return {};
    const HloInst& first = Inst(points->front());
    if (!IsLoop(points->front()) && !(first.opcode == Opcode::kReduce && ReducesRowsOrColumns(first))) return {};
    return *std::move(points);
  }
  // The points where the readers of `id` reach it (as ReadingPoints), earliest first; nothing if one
  // reaches it through a view or a chain that ends unstored. A fused elementwise value with several
  // readers is computed again in each reader's kernel (a bf16 product widened to f32 for both the sum of
  // its columns and a product with a weight): its readers' points are points reading `id`.
  std::optional<std::vector<int64_t>> PointsReading(int64_t id) const {
    std::vector<int64_t> points, pending = {id}, seen;
    while (!pending.empty()) {
      const int64_t value = pending.back();
      pending.pop_back();
      for (int64_t at : readers_[static_cast<size_t>(value)]) {
        if (!materialized_[static_cast<size_t>(at)] && IsElementwise(Inst(at).opcode)) {
          if (std::ranges::find(seen, at) == seen.end()) {
            seen.push_back(at);
            pending.push_back(at);
          }
          continue;
        }
        if (const auto sum = sum_of_product_.find(at); sum != sum_of_product_.end()) at = sum->second;  // its kernel
        if (!materialized_[static_cast<size_t>(at)]) return std::nullopt;
        points.push_back(at);
      }
    }
    std::ranges::sort(points);
    return points;
  }
  // Whether a reduction's kernel evaluates its space in parallel passes, over independent rows (the
  // reduced dims a suffix) or chunks of columns (a prefix): where it can also compute a loop's values.
  bool ReducesRowsOrColumns(const HloInst& reduce) const {
    const size_t rank = Inst(reduce.operands[0]).shape.dims.size();
    std::vector<bool> reduced(rank, false);
    for (int64_t d : reduce.dims) reduced[static_cast<size_t>(d)] = true;
    return std::ranges::is_sorted(reduced) || std::ranges::is_sorted(reduced, std::greater<>());
  }
  // Whether every stored value that the kernel of `loop` and `reduce` loads to compute `id` is written
  // before position `at`: a parameter, or computed by a kernel that runs earlier.
  bool ReadyBefore(int64_t id, int64_t loop, int64_t reduce, int64_t at) const {
    const HloInst& inst = Inst(id);
    const int64_t final_kernel = FinalKernel(id);
    const bool computed_here =
        !materialized_[static_cast<size_t>(id)] || id == loop || final_kernel == loop || final_kernel == reduce;
    if (computed_here && IsFusable(inst)) {
      return std::ranges::all_of(inst.operands, [&](int64_t op) { return ReadyBefore(op, loop, reduce, at); });
    }
    int64_t stored = id;  // a stored reshape is its operand's memory
    while (Inst(stored).opcode == Opcode::kReshape && materialized_[static_cast<size_t>(stored)])
      stored = Inst(stored).operands[0];
    return Inst(stored).opcode == Opcode::kParameter || PositionOf(stored) < at;
  }
  // Whether everything that `second` (the loop or the reduction, with the values it has taken in) loads
  // is written before position `at`, for the kernel of both to run there.
  bool ContentsReadyBefore(int64_t second, int64_t loop, int64_t reduce, int64_t at) const {
    if (!ReadyBefore(second == reduce ? Inst(reduce).operands[0] : loop, loop, reduce, at)) return false;
    for (size_t j = 0; j < m_.insts.size(); ++j) {
      if (materialized_[j] && FinalKernel(static_cast<int64_t>(j)) == second &&
          !ReadyBefore(static_cast<int64_t>(j), loop, reduce, at)) {
        return false;
      }
    }
    return true;
  }
  // Where the kernel computing `id` runs, after sibling fusion's moves.
  int64_t PositionOf(int64_t id) const {
    const int64_t kernel = RunsAt(id);
    const int64_t moved_to = moved_to_[static_cast<size_t>(kernel)];
    return moved_to >= 0 ? moved_to : kernel;
  }
  // Whether the reads at point p happen at or after position `at`, outside the kernel of `loop` and
  // `reduce` being formed there: a kernel's where it runs now, a stored reshape's (an alias, no kernel)
  // where its own readers run. That kernel reading a stored reshape of what it computes would read
  // memory it has not written yet.
  bool ReadsAtOrAfter(int64_t p, int64_t at, int64_t loop, int64_t reduce) const {
    if (Inst(p).opcode == Opcode::kReshape && materialized_[static_cast<size_t>(p)]) {
      const std::optional<std::vector<int64_t>> points = PointsReading(p);
      return points && std::ranges::all_of(*points, [&](int64_t q) {
               return q != loop && q != reduce && ReadsAtOrAfter(q, at, loop, reduce);
             });
    }
    return PositionOf(p) >= at;
  }

  // The position of the kernel that computes `id`: its own, or the one it is absorbed into.
  int64_t RunsAt(int64_t id) const {
    const int64_t into = FinalKernel(id);
    return into >= 0 ? into : id;
  }

  // The kernel that finally computes `id` (following absorptions), or -1 if `id` is not absorbed.
  int64_t FinalKernel(int64_t id) const {
    int64_t into = absorbed_into_[static_cast<size_t>(id)];
    while (into >= 0 && absorbed_into_[static_cast<size_t>(into)] >= 0)
      into = absorbed_into_[static_cast<size_t>(into)];
    return into;
  }

  void AssignSlots() {
    slot_.assign(m_.insts.size(), -1);
    for (int64_t p = 0; p < m_.num_parameters; ++p) exe_.add_parameters();
    std::vector<bool> output_taken(m_.outputs.size(), false);
    for (size_t i = 0; i < m_.insts.size(); ++i) {
      if (!materialized_[i]) continue;
      const HloInst& inst = m_.insts[i];
      proto::Slot* slot = exe_.add_slots();
      *slot->mutable_shape() = ToProto(inst.shape);
      slot_[i] = exe_.slots_size() - 1;
      if (inst.opcode == Opcode::kParameter) {
        slot->set_kind(proto::Slot::PARAMETER);
        slot->set_index(inst.parameter_number);
        *exe_.mutable_parameters(static_cast<int>(inst.parameter_number)) = ToProto(inst.shape);
      } else if (inst.opcode == Opcode::kReshape) {
        slot->set_kind(proto::Slot::ALIAS);
        slot->set_index(slot_[static_cast<size_t>(inst.operands[0])]);
      } else {
        slot->set_kind(proto::Slot::ARENA);
        // The first result that is this value is written in place; repeats are copied.
        for (size_t j = 0; j < m_.outputs.size(); ++j) {
          if (m_.outputs[j] == static_cast<int64_t>(i) && !output_taken[j]) {
            slot->set_kind(proto::Slot::OUTPUT);
            slot->set_index(static_cast<int64_t>(j));
            output_taken[j] = true;
            break;
          }
        }
      }
    }
    for (int64_t out : m_.outputs) exe_.add_outputs(slot_[static_cast<size_t>(out)]);
  }

  // An attention's gradients that one concatenation alone reads, as the whole of it (the heads' dq, dk and
  // dv transposed back into the projections' [B, T, 3, H, D]), are written there by the attention's
  // kernel, through result views: the concatenation's kernel and the packed gradients' store and load
  // are gone (2.5 ms of the GPT's step), with the same bits (the concatenation only copied them).
  void WriteGradientsWhereConcatenated() {
    written_by_.assign(m_.insts.size(), -1);
    result_views_.clear();
    if (!options_.enabled) return;
    for (size_t i = 0; i < m_.insts.size(); ++i) {
      if (m_.insts[i].opcode != Opcode::kConcatenate || !materialized_[i]) continue;
      std::optional<std::pair<int64_t, std::vector<OperandView>>> parts = GradientPartsIn(static_cast<int64_t>(i));
      if (!parts) continue;
      written_by_[i] = parts->first;
      result_views_[parts->first] = std::move(parts->second);
      Unstore(parts->first, static_cast<int64_t>(i));
    }
  }
  // Neither the packed gradients nor a reshape aliasing them is stored any more (the other views between
  // them and the concatenation never were).
  void Unstore(int64_t id, int64_t concat) {
    materialized_[static_cast<size_t>(id)] = false;
    for (int64_t reader : readers_[static_cast<size_t>(id)]) {
      if (reader != concat) Unstore(reader, concat);
    }
  }

  // The attention gradient that concatenation `concat` is made of, and a view of the concatenation for
  // each of its dq, dk and dv saying where that lands, if the concatenation is nothing but the three
  // (each operand a view of a different one: transposes, slices and unit dim reshapes of the packed
  // gradients or of a reshape of them) and nothing else reads the gradients.
  std::optional<std::pair<int64_t, std::vector<OperandView>>> GradientPartsIn(int64_t concat) const {
    const HloInst& c = Inst(concat);
    if (c.operands.size() != 3) return std::nullopt;
    int64_t grad = -1;
    std::vector<Strided> reads;
    for (int64_t operand : c.operands) {
      const std::optional<ViewedOperand> view =
          materialized_[static_cast<size_t>(operand)] ? std::nullopt : ViewOf(operand);
      if (!view) return std::nullopt;
      int64_t stored = view->base;  // a stored reshape aliases its operand's memory: the same flat indices
      while (Inst(stored).opcode == Opcode::kReshape) stored = Inst(stored).operands[0];
      if (Inst(stored).opcode != Opcode::kAttentionGrad || (grad >= 0 && stored != grad)) return std::nullopt;
      grad = stored;
      reads.push_back(view->strided);
    }
    if (!OnlyViewedFor(grad, concat)) return std::nullopt;
    // The packed gradients [batch..., P]: per batch element dq [L, E], dk [S, E], dv [S, Ev], row-major.
    const HloInst& g = Inst(grad);
    const std::vector<int64_t>& q = Inst(g.operands[0]).shape.dims;
    const std::vector<int64_t>& v = Inst(g.operands[2]).shape.dims;
    const size_t nb = q.size() - 2;
    if (g.shape.dims.size() != nb + 1) return std::nullopt;
    const int64_t l = q[nb], e = q[nb + 1], s = Inst(g.operands[1]).shape.dims[nb], ev = v[nb + 1];
    if (l < 1 || e < 1 || s < 1 || ev < 1) return std::nullopt;
    const std::array<GradientPart, 3> parts = GradientParts(l, s, e, ev);
    const std::vector<int64_t> concat_strides = RowMajorStrides(c.shape.dims);
    std::vector<OperandView> written(3);
    int64_t along_axis = 0;  // where the operand starts along the concatenation's axis
    for (size_t j = 0; j < 3; ++j) {
      const std::vector<int64_t>& dims = Inst(c.operands[j]).shape.dims;
      const size_t p =
          static_cast<size_t>(std::ranges::find(parts, reads[j].offset, &GradientPart::start) - parts.begin());
      if (p == parts.size() || !written[p].dims.empty()) return std::nullopt;
      const GradientPart& part = parts[p];
      OperandView& view = written[p];
      view.dims.assign(g.shape.dims.begin(), g.shape.dims.end() - 1);
      view.dims.insert(view.dims.end(), {part.rows, part.cols});
      std::vector<int64_t> packed(nb + 2, 1);  // the part's strides in the packed gradients
      packed[nb] = part.cols;
      for (size_t d = nb, stride = static_cast<size_t>(g.shape.dims.back()); d-- > 0;) {
        packed[d] = static_cast<int64_t>(stride);
        stride *= static_cast<size_t>(view.dims[d]);
      }
      // Each dim of the operand of size > 1 is one of the part's, by size and stride.
      view.strides.assign(view.dims.size(), 0);
      std::vector<bool> matched(view.dims.size(), false);
      for (size_t d = 0; d < dims.size(); ++d) {
        if (dims[d] == 1) continue;
        size_t x = 0;
        while (x < view.dims.size() && (matched[x] || view.dims[x] != dims[d] || packed[x] != reads[j].strides[d])) ++x;
        if (x == view.dims.size()) return std::nullopt;
        matched[x] = true;
        view.strides[x] = concat_strides[d];
      }
      for (size_t x = 0; x < view.dims.size(); ++x) {
        if (!matched[x] && view.dims[x] != 1) return std::nullopt;
      }
      if (part.cols == 1) view.strides.back() = 1;  // any stride reads a row of one
      if (view.strides.back() != 1) return std::nullopt;
      view.offset = along_axis * concat_strides[static_cast<size_t>(c.axis)];
      along_axis += dims[static_cast<size_t>(c.axis)];
    }
    if (!ViewsTile(written, c.shape.numel())) return std::nullopt;
    return std::make_pair(grad, std::move(written));
  }

  // Whether every reader of `id`, and of each of those, is a view (a transpose, slice or reshape) on the
  // way to `concat`, which reads the last of them, and none of them is a result or a stored copy.
  bool OnlyViewedFor(int64_t id, int64_t concat) const {
    if (std::ranges::find(m_.outputs, id) != m_.outputs.end()) return false;
    for (int64_t reader : readers_[static_cast<size_t>(id)]) {
      if (reader == concat) continue;
      const HloInst& r = Inst(reader);
      const bool view = r.opcode == Opcode::kTranspose || r.opcode == Opcode::kSlice || r.opcode == Opcode::kReshape;
      // A stored reshape is an alias (no copy); a stored transpose or slice is a loop's copy.
      if (!view || (r.opcode != Opcode::kReshape && materialized_[static_cast<size_t>(reader)])) return false;
      if (!OnlyViewedFor(reader, concat)) return false;
    }
    return true;
  }

  // --- program building -------------------------------------------------------------------------
  struct ProgramBuilder {
    proto::Kernel* kernel;
    int64_t root;                                                      // the instruction the kernel computes
    std::map<std::pair<int64_t, std::vector<int64_t>>, int64_t> memo;  // (inst, flattened view) -> step
    absl::flat_hash_map<int64_t, int64_t> input_of_slot;
  };

  int64_t AddStep(ProgramBuilder& b, proto::Step step) {
    *b.kernel->add_program() = std::move(step);
    return b.kernel->program_size() - 1;
  }

  int64_t InputIndex(ProgramBuilder& b, int64_t slot) {
    auto [it, inserted] = b.input_of_slot.emplace(slot, b.kernel->inputs_size());
    if (inserted) b.kernel->add_inputs(slot);
    return it->second;
  }

  int64_t Build(ProgramBuilder& b, int64_t id, const View& view, size_t space_rank, bool is_root) {
    std::vector<int64_t> flat;
    for (const AxisMap& a : view) flat.insert(flat.end(), {a.src, a.scale, a.offset});
    const auto key = std::make_pair(id, flat);
    if (auto it = b.memo.find(key); it != b.memo.end()) return it->second;
    const HloInst& inst = Inst(id);
    proto::Step step;
    step.set_type(ToProto(inst.shape.type));
    // Readers reach an absorbed value through elementwise ops only, so at the kernel's own point.
    const bool extra_result = !is_root && materialized_[static_cast<size_t>(id)] && FinalKernel(id) == b.root;
    if (materialized_[static_cast<size_t>(id)] && !is_root && !extra_result) {
      // Read the value from memory through the view.
      const Strided strided = Flatten(inst.shape.dims, view, space_rank);
      step.set_load(true);
      step.set_input(InputIndex(b, slot_[static_cast<size_t>(id)]));
      step.set_offset(strided.offset);
      for (int64_t s : strided.strides) step.add_strides(s);
    } else {
      switch (inst.opcode) {
        case Opcode::kConstant:
          step.set_opcode(static_cast<int32_t>(Opcode::kConstant));
          step.set_value(inst.value);
          break;
        case Opcode::kIota: {
          // A rank-0 iota has no axis to count along (the verifier allows axis 0): it is `start`.
          const AxisMap a =
              static_cast<size_t>(inst.axis) < view.size() ? view[static_cast<size_t>(inst.axis)] : AxisMap{-1, 0, 0};
          step.set_opcode(static_cast<int32_t>(Opcode::kIota));
          step.set_axis(a.src);
          // Wrapping arithmetic, as the kernel's: the module's start and step are unbounded.
          const auto wrap = [](uint64_t v) { return static_cast<int64_t>(v); };
          step.set_start(wrap(static_cast<uint64_t>(inst.start[0]) +
                              static_cast<uint64_t>(inst.stride[0]) * static_cast<uint64_t>(a.offset)));
          step.set_step(wrap(static_cast<uint64_t>(inst.stride[0]) * static_cast<uint64_t>(a.scale)));
          break;
        }
        case Opcode::kRngUniform:
        case Opcode::kRngNormal: {
          // Only ever a kernel root (never read through a view), so the point is the element index.
          const int64_t seed = Build(b, inst.operands[0], View{}, space_rank, false);
          step.set_opcode(static_cast<int32_t>(inst.opcode));
          step.set_stream(inst.stream);
          step.add_args(seed);
          break;
        }
        case Opcode::kBroadcast:
        case Opcode::kTranspose:
        case Opcode::kSlice:
        case Opcode::kReshape: {  // of unit dims only (IsFusable)
          const HloInst& in = Inst(inst.operands[0]);
          return Memo(b, key, Build(b, inst.operands[0], ViewOfOperand(inst, in, view), space_rank, false));
        }
        LAZYRT_ELEMENTWISE_OPCODE_CASES:
          for (int64_t op : inst.operands) step.add_args(Build(b, op, view, space_rank, false));
          step.set_opcode(static_cast<int32_t>(inst.opcode));
          step.set_direction(static_cast<int32_t>(inst.direction));
          break;
        case Opcode::kParameter:
        case Opcode::kConcatenate:
        case Opcode::kIndexSelect:
        case Opcode::kGather:
        case Opcode::kReduce:
        case Opcode::kArgmax:
        case Opcode::kCumsum:
        case Opcode::kArgsort:
        case Opcode::kDot:
        case Opcode::kAttention:
        case Opcode::kAttentionGrad:
        case Opcode::kLayerNorm:
        case Opcode::kRmsNorm:
        case Opcode::kLayerNormGrad:
        case Opcode::kRmsNormGrad:
        case Opcode::kScatterAdd:
        case Opcode::kIndexAdd:
          LAZYRT_COLLECTIVE_OPCODES(LAZYRT_CASE_OF_OPCODE)
          // Never fused (IsFusable): always materialized, so read by the load above.
          OpcodeUnreachable("fusion: a program step", static_cast<int32_t>(inst.opcode));
      }
    }
    const int64_t index = AddStep(b, std::move(step));
    if (extra_result) {
      b.kernel->add_extra_outputs(slot_[static_cast<size_t>(id)]);
      b.kernel->add_extra_roots(index);
      absl::StrAppend(b.kernel->mutable_label(), " & ", Label(inst));
    }
    return Memo(b, key, index);
  }

  int64_t Memo(ProgramBuilder& b, const std::pair<int64_t, std::vector<int64_t>>& key, int64_t step) {
    b.memo.emplace(key, step);
    return step;
  }

  std::string Label(const HloInst& inst) const {
    std::string label = OpcodeName(inst.opcode);
    if (!inst.operands.empty()) {
      std::vector<std::string> ops;
      for (int64_t op : inst.operands) ops.push_back(OpcodeName(Inst(op).opcode));
      absl::StrAppend(&label, "(", absl::StrJoin(ops, ", "), ")");
    }
    return label;
  }

  void EmitKernel(int64_t id) {
    // A concatenation an attention's gradient kernel writes is that kernel; a sum a DOT computes, the DOT.
    const auto added = added_to_product_.find(id);
    const int64_t computed = written_by_[static_cast<size_t>(id)] >= 0 ? written_by_[static_cast<size_t>(id)]
                             : added != added_to_product_.end()        ? added->second.product
                                                                       : id;
    const HloInst& inst = Inst(computed);
    proto::Kernel* k = exe_.add_kernels();
    k->set_output(slot_[static_cast<size_t>(id)]);
    k->set_label(Label(inst));
    if (written_by_[static_cast<size_t>(id)] >= 0) {
      absl::StrAppend(k->mutable_label(), " into ", Label(Inst(id)));
      for (const OperandView& view : result_views_.at(computed)) {
        SetView(*k->add_result_views(), view.dims, view.offset, view.strides);
      }
    }
    ProgramBuilder b{k, id, {}, {}};
    switch (inst.opcode) {
      case Opcode::kReduce: {
        const HloInst& in = Inst(inst.operands[0]);
        k->set_kind(proto::Kernel::REDUCE);
        k->set_combiner(static_cast<int32_t>(inst.combiner));
        for (int64_t d : inst.dims) k->add_reduce_dims(d);
        *k->mutable_iteration_shape() = ToProto(in.shape);
        const size_t rank = in.shape.dims.size();
        const int64_t root =
            Build(b, inst.operands[0], IdentityView(rank), rank, !materialized_[static_cast<size_t>(inst.operands[0])]);
        // Loops moved into the reduction (sibling fusion) are results of the program too. Its last step
        // must be the value reduced: after theirs, a convert forwards it (no copy, FusedProgram).
        for (size_t j = 0; j < m_.insts.size(); ++j) {
          if (materialized_[j] && FinalKernel(static_cast<int64_t>(j)) == id)
            Build(b, static_cast<int64_t>(j), IdentityView(rank), rank, false);
        }
        if (root != k->program_size() - 1) {
          proto::Step forward;
          forward.set_opcode(static_cast<int32_t>(Opcode::kConvert));
          forward.set_type(k->program(static_cast<int>(root)).type());
          forward.add_args(root);
          AddStep(b, std::move(forward));
        }
        return;
      }
      case Opcode::kDot: {
        const HloInst& a = Inst(inst.operands[0]);
        const HloInst& c = Inst(inst.operands[1]);
        const size_t r = inst.shape.dims.size();
        int64_t batch = 1;
        for (size_t d = 0; d + 2 < r; ++d) batch *= inst.shape.dims[d];
        const int64_t m = inst.shape.dims[r - 2], n = inst.shape.dims[r - 1];
        const size_t ra = a.shape.dims.size();
        const int64_t kk = a.shape.dims[inst.transpose_lhs ? ra - 2 : ra - 1];
        k->set_kind(proto::Kernel::DOT);
        k->set_batch(batch);
        k->set_m(m);
        k->set_n(n);
        k->set_k(kk);
        k->set_transpose_lhs(inst.transpose_lhs);
        k->set_transpose_rhs(inst.transpose_rhs);
        k->set_lhs_batch_stride(a.shape.dims.size() == 2 ? 0 : m * kk);
        k->set_rhs_batch_stride(c.shape.dims.size() == 2 ? 0 : kk * n);
        break;
      }
      case Opcode::kArgmax:
        k->set_kind(proto::Kernel::ARGMAX);
        k->set_axis(inst.axis);
        break;
      case Opcode::kCumsum:
      case Opcode::kArgsort:
        // The iteration shape is the array walked, for the kernel's line in diagnostics.
        k->set_kind(inst.opcode == Opcode::kCumsum ? proto::Kernel::CUMSUM : proto::Kernel::ARGSORT);
        k->set_axis(inst.axis);
        if (inst.opcode == Opcode::kArgsort) k->set_direction(static_cast<int32_t>(inst.direction));
        *k->mutable_iteration_shape() = ToProto(inst.shape);
        break;
      case Opcode::kIndexSelect:
        k->set_kind(proto::Kernel::INDEX_SELECT);
        k->set_axis(inst.axis);
        k->set_site(inst.site);
        break;
      case Opcode::kGather:
        k->set_kind(proto::Kernel::GATHER);
        k->set_axis(inst.axis);
        k->set_site(inst.site);
        break;
      case Opcode::kScatterAdd:
      case Opcode::kIndexAdd:
        k->set_kind(proto::Kernel::SCATTER);
        k->set_opcode(static_cast<int32_t>(inst.opcode));
        k->set_axis(inst.axis);
        k->set_site(inst.site);
        break;
      case Opcode::kConcatenate:
        k->set_kind(proto::Kernel::CONCATENATE);
        k->set_axis(inst.axis);
        AddInputs(inst, *k);
        return;
      case Opcode::kAttention:
      case Opcode::kAttentionGrad:
        k->set_kind(inst.opcode == Opcode::kAttention ? proto::Kernel::ATTENTION : proto::Kernel::ATTENTION_GRAD);
        k->set_scale(inst.value);
        k->set_causal(inst.causal);
        k->set_dropout(inst.dropout);
        k->set_stream(inst.stream);
        AddInputs(inst, *k);
        return;
      case Opcode::kLayerNorm:
      case Opcode::kRmsNorm:
      case Opcode::kLayerNormGrad:
      case Opcode::kRmsNormGrad:
        k->set_kind(proto::Kernel::NORMALIZE);
        k->set_opcode(static_cast<int32_t>(inst.opcode));
        k->set_axis(inst.axis);
        k->set_epsilon(inst.value);
        break;
        LAZYRT_COLLECTIVE_OPCODES(LAZYRT_CASE_OF_OPCODE)
        k->set_kind(proto::Kernel::COLLECTIVE);
        k->set_opcode(static_cast<int32_t>(inst.opcode));
        k->set_combiner(static_cast<int32_t>(inst.combiner));
        k->set_axis(inst.opcode == Opcode::kAllToAll ? inst.dims[0] : inst.axis);
        if (inst.opcode == Opcode::kAllToAll) k->set_concat_axis(inst.dims[1]);
        for (const std::vector<int64_t>& group : inst.replica_groups) {
          k->add_replica_groups()->mutable_partitions()->Assign(group.begin(), group.end());
        }
        break;
      LAZYRT_ELEMENTWISE_OPCODE_CASES:
      case Opcode::kConstant:
      case Opcode::kIota:
      case Opcode::kRngUniform:
      case Opcode::kRngNormal:
      case Opcode::kBroadcast:
      case Opcode::kTranspose:
      case Opcode::kSlice:
        k->set_kind(proto::Kernel::LOOP);
        *k->mutable_iteration_shape() = ToProto(inst.shape);
        Build(b, id, IdentityView(inst.shape.dims.size()), inst.shape.dims.size(), true);
        return;
      case Opcode::kParameter:
      case Opcode::kReshape:
        // Slots, not kernels: a parameter's bytes are the caller's, a reshape aliases its operand's.
        OpcodeUnreachable("fusion: a kernel", static_cast<int32_t>(inst.opcode));
    }
    for (int64_t op : inst.operands) k->add_inputs(slot_[static_cast<size_t>(op)]);
    if (added != added_to_product_.end()) {
      const AddedToProduct& sum = added->second;
      k->add_operand_views();
      k->add_operand_views();
      for (size_t a = 0; a < sum.addends.size(); ++a) {
        absl::StrAppend(k->mutable_label(), " + ", OpcodeName(Inst(sum.addends[a]).opcode));
        k->add_inputs(slot_[static_cast<size_t>(sum.views[a].base)]);
        SetView(*k->add_operand_views(), Inst(id).shape.dims, sum.views[a].strided.offset,
                sum.views[a].strided.strides);
      }
    }
  }

  static void SetView(proto::OperandView& to, std::span<const int64_t> dims, int64_t offset,
                      std::span<const int64_t> strides) {
    to.mutable_dims()->Assign(dims.begin(), dims.end());
    to.set_offset(offset);
    to.mutable_strides()->Assign(strides.begin(), strides.end());
  }

  // The kernel's inputs: each operand's slot, or where an operand is read through a view (ViewOf: it is
  // not stored itself), the slot of the value it views and the view.
  void AddInputs(const HloInst& inst, proto::Kernel& k) const {
    for (int64_t operand : inst.operands) {
      proto::OperandView* entry = k.add_operand_views();
      const std::optional<ViewedOperand> view =
          materialized_[static_cast<size_t>(operand)] ? std::nullopt : ViewOf(operand);
      if (!view) {
        k.add_inputs(slot_[static_cast<size_t>(operand)]);
        continue;
      }
      k.add_inputs(slot_[static_cast<size_t>(view->base)]);
      SetView(*entry, Inst(operand).shape.dims, view->strided.offset, view->strided.strides);
    }
    if (std::ranges::all_of(k.operand_views(), [](const proto::OperandView& v) { return v.dims().empty(); })) {
      k.clear_operand_views();
    }
  }

  const HloModule& m_;
  FusionOptions options_;
  proto::Executable& exe_;
  std::vector<bool> materialized_;
  std::vector<std::vector<int64_t>> readers_;  // by instruction
  std::vector<int64_t> bytes_before_;          // of the values of the instructions before each
  // The loop kernel that computes a value (as an extra output if it is stored: a result, or read by a
  // later kernel), or -1.
  std::vector<int64_t> absorbed_into_;
  // Sibling fusion: where a reduction's kernel runs instead of its own place, the place of the loop it
  // took in (-1: its own).
  std::vector<int64_t> moved_to_;
  // The attention gradient whose kernel writes a concatenation (-1: none), by concatenation, and the views
  // it writes dq, dk and dv through, by gradient (WriteGradientsWhereConcatenated).
  std::vector<int64_t> written_by_;
  absl::flat_hash_map<int64_t, std::vector<OperandView>> result_views_;
  // The sums a DOT computes (AddToProducts), by sum: the product, the addends in the order they are added,
  // and how the DOT reads each.
  struct AddedToProduct {
    int64_t product;
    std::vector<int64_t> addends;
    std::vector<ViewedOperand> views;
  };
  absl::flat_hash_map<int64_t, AddedToProduct> added_to_product_;
  absl::flat_hash_map<int64_t, int64_t> sum_of_product_;  // the sum each such product's kernel computes
  std::vector<int64_t> slot_;
};

}  // namespace

absl::StatusOr<int64_t> EmitKernels(const HloModule& module, const FusionOptions& options, proto::Executable& exe) {
  return Emitter(module, options, exe).Run();
}

int64_t SiblingFusionFallbacks() { return g_sibling_fallbacks.load(std::memory_order_relaxed); }

}  // namespace lazyrt::pjrt
