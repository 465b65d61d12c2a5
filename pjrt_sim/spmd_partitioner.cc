#include "pjrt_sim/spmd_partitioner.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pjrt_sim/hlo.h"
#include "pjrt_sim/opcode.h"

namespace lazyrt::pjrt {
namespace {

// For each dim of a value, the mesh axis it is split over, or kWhole.
using Axes = std::vector<int64_t>;
using Dims = std::vector<int64_t>;
constexpr int64_t kWhole = -1;

bool IsReplicated(const Axes& axes) {
  return std::all_of(axes.begin(), axes.end(), [](int64_t a) { return a == kWhole; });
}
int64_t SplitCount(const Axes& axes) {
  return std::count_if(axes.begin(), axes.end(), [](int64_t a) { return a != kWhole; });
}
bool Uses(const Axes& axes, int64_t axis) { return std::find(axes.begin(), axes.end(), axis) != axes.end(); }
Dims DimsOf(const proto::Shape& s) { return {s.dims().begin(), s.dims().end()}; }
Axes AxesOf(const proto::Sharding& s, size_t rank) {
  if (s.dim_axes().empty()) return Axes(rank, kWhole);
  return {s.dim_axes().begin(), s.dim_axes().end()};
}
proto::Sharding ToProto(const Axes& axes) {
  proto::Sharding s;
  if (!IsReplicated(axes)) {
    for (int64_t a : axes) s.add_dim_axes(a);
  }
  return s;
}

// The partitions of a mesh and the groups a collective over some of its axes runs in.
class MeshGrid {
 public:
  explicit MeshGrid(const proto::Mesh& mesh) : shape_(mesh.shape().begin(), mesh.shape().end()) {
    for (int64_t s : shape_) size_ *= s;
  }
  int64_t size() const { return size_; }
  int64_t axis_size(int64_t axis) const { return shape_[static_cast<size_t>(axis)]; }

  // The groups of partitions that differ only in the coordinates of `axes`, each ordered row-major over
  // those coordinates (for one axis: a member's position is its coordinate along the axis).
  std::vector<std::vector<int64_t>> Groups(std::vector<int64_t> axes) const {
    std::sort(axes.begin(), axes.end());
    std::map<int64_t, std::vector<int64_t>> by_rest;  // ordered: groups come out in a fixed order
    for (int64_t p = 0; p < size_; ++p) {
      int64_t rest = 0;
      int64_t remaining = p;
      int64_t stride = 1;
      for (size_t a = shape_.size(); a-- > 0;) {
        const int64_t coordinate = remaining % shape_[a];
        remaining /= shape_[a];
        if (!std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(a))) rest += coordinate * stride;
        stride *= shape_[a];
      }
      by_rest[rest].push_back(p);  // p ascending: row-major over the group's own axes too
    }
    std::vector<std::vector<int64_t>> groups;
    for (auto& [rest, members] : by_rest) groups.push_back(std::move(members));
    return groups;
  }

  Dims LocalDims(Dims dims, const Axes& axes) const {
    for (size_t d = 0; d < dims.size(); ++d) {
      if (axes[d] != kWhole) dims[d] /= axis_size(axes[d]);
    }
    return dims;
  }

 private:
  Dims shape_;
  int64_t size_ = 1;
};

// Where the split dims of a value of `from` dims land after a reshape to `to` dims: a split dim maps to
// the dim that starts at the same element offset when one of the two is the product of a run of the other's
// dims starting there (so that every piece is one contiguous run of elements on both sides). nullopt when a
// split dim does not survive.
std::optional<Axes> MapReshape(const Dims& from, const Dims& to, const Axes& from_axes, const MeshGrid& mesh) {
  auto prefixes = [](const Dims& dims) {
    Dims p(dims.size() + 1, 1);
    for (size_t d = 0; d < dims.size(); ++d) p[d + 1] = p[d] * dims[d];
    return p;
  };
  const Dims pf = prefixes(from), pt = prefixes(to);
  auto contains = [](const Dims& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  Axes out(to.size(), kWhole);
  for (size_t d = 0; d < from.size(); ++d) {
    if (from_axes[d] == kWhole) continue;
    const int64_t pieces = mesh.axis_size(from_axes[d]);
    std::optional<size_t> found;
    for (size_t r = 0; r < to.size() && !found; ++r) {
      if (pt[r] != pf[d] || (to[r] == 1 && from[d] != 1) || to[r] % pieces != 0) continue;
      if (to[r] >= from[d] ? contains(pf, pt[r + 1]) : contains(pt, pf[d + 1])) found = r;
    }
    if (!found) return std::nullopt;
    out[*found] = from_axes[d];
  }
  return out;
}

// The dims of a dot: where M, K (lhs) and K, N (rhs) sit, and whether each operand has batch dims.
struct DotDims {
  size_t lhs_m, lhs_k, rhs_k, rhs_n;
  size_t batch;  // the result's batch dims
  bool lhs_batched, rhs_batched;
};
DotDims DotDimsOf(const proto::Instruction& inst, const proto::Shape& lhs, const proto::Shape& rhs) {
  const size_t ra = static_cast<size_t>(lhs.dims_size()), rb = static_cast<size_t>(rhs.dims_size());
  const size_t rank = static_cast<size_t>(inst.shape().dims_size());
  return DotDims{.lhs_m = ra - (inst.transpose_lhs() ? 1 : 2),
                 .lhs_k = ra - (inst.transpose_lhs() ? 2 : 1),
                 .rhs_k = rb - (inst.transpose_rhs() ? 1 : 2),
                 .rhs_n = rb - (inst.transpose_rhs() ? 2 : 1),
                 .batch = rank - 2,
                 .lhs_batched = ra > 2,
                 .rhs_batched = rb > 2};
}

// The operand dims REDUCE or ARGMAX reduces.
Dims ReducedDims(const proto::Instruction& inst) {
  if (static_cast<Opcode>(inst.opcode()) == Opcode::kArgmax) return {inst.axis()};
  return {inst.dims().begin(), inst.dims().end()};
}

// The mesh axis a dot contracts over: K's when K is split on one side, or on both by the same axis (the other
// side is then sliced to match); whole otherwise.
int64_t ContractingAxis(const Axes& lhs, const Axes& rhs, const DotDims& dd) {
  const int64_t a = lhs[dd.lhs_k], b = rhs[dd.rhs_k];
  if (a == b || b == kWhole) return a;
  if (a == kWhole && !Uses(lhs, b)) return b;
  return kWhole;
}

// Ops computed row by row along `axis` (and, for normalization, the dims after it): those dims must be whole.
// Layer norm's gradient with its affine packs each group of rows along axis - 1 (CheckNormalize): that dim
// too. A normalization's weight and bias (operands of a lower rank) are whole.
bool IsRowWise(Opcode op) { return ClassOf(op) == OpClass::kNormalize || ClassOf(op) == OpClass::kAlongAxis; }
Axes WithRowDimsWhole(const proto::Instruction& inst, Axes axes) {
  const Opcode op = static_cast<Opcode>(inst.opcode());
  const bool normalize = ClassOf(op) == OpClass::kNormalize;
  const bool packed = op == Opcode::kLayerNormGrad && inst.operands_size() == 3;
  const size_t axis = static_cast<size_t>(inst.axis()) - (packed ? 1 : 0);
  const size_t end = normalize ? axes.size() : axis + 1;
  for (size_t d = axis; d < end; ++d) axes[d] = kWhole;
  return axes;
}

// ---- Rules for slicing, concatenation, indexing and attention ---------------------------------------------
// Each op's result dims that must be whole for a partition to compute its piece from its operands' pieces,
// and the layout each operand then needs. Attention runs per batch element (per head, in a GPT), so its batch
// dims split freely; an indexing op splits every dim but the one it indexes along.

// Whether SLICE keeps dim d whole (a piece of a split dim is then the operand's own piece).
bool SlicesWholeDim(const proto::Instruction& inst, const proto::Shape& in, size_t d) {
  const int i = static_cast<int>(d);
  return inst.start(i) == 0 && inst.limit(i) == in.dims(i) && inst.stride(i) == 1;
}

// The leading dims of an ATTENTION or ATTENTION_GRAD result that are batch dims: the rest are per element.
size_t AttentionBatchDims(const proto::Instruction& inst) {
  const size_t rank = static_cast<size_t>(inst.shape().dims_size());
  return static_cast<Opcode>(inst.opcode()) == Opcode::kAttentionGrad ? rank - 1 : rank - 2;
}

// Its operands before the optional mask: q, k, v (and for the gradient, the forward result and d(output)).
int AttentionTensorOperands(const proto::Instruction& inst) {
  return static_cast<Opcode>(inst.opcode()) == Opcode::kAttentionGrad ? 5 : 3;
}

bool HasPiecewiseRule(Opcode op) {
  return op == Opcode::kSlice || op == Opcode::kConcatenate || op == Opcode::kIndexSelect || op == Opcode::kGather ||
         op == Opcode::kIndexAdd || op == Opcode::kScatterAdd || op == Opcode::kAttention ||
         op == Opcode::kAttentionGrad;
}

class Partitioner {
 public:
  explicit Partitioner(const proto::Module& m) : in_(m), mesh_(m.mesh()) {}

  absl::StatusOr<SpmdPartitioned> Run() {
    Propagate();
    SpmdPartitioned result;
    proto::Module& out = result.module;
    out.set_name(in_.name());
    *out.mutable_mesh() = in_.mesh();
    out_ = &out;
    value_.assign(static_cast<size_t>(in_.instructions_size()), -1);
    have_.resize(static_cast<size_t>(in_.instructions_size()));
    for (int64_t id = 0; id < in_.instructions_size(); ++id) {
      Partition(id, result);
      // An annotated value is laid out as annotated even where its rule computed it otherwise.
      const Axes& target = *ShardingOf(id);
      if (fixed_[static_cast<size_t>(id)] && have_[static_cast<size_t>(id)] != target) {
        consumer_ = {.id = id, .has_rule = true, .annotation = true};
        Define(id, Operand(id, target), target);
      }
    }
    for (int64_t o : in_.outputs()) {
      out.add_outputs(value_[static_cast<size_t>(o)]);
      result.output_shardings.push_back(ToProto(have_[static_cast<size_t>(o)]));
    }
    out.set_num_partitions(mesh_.size());
    result.replicated_fallbacks = fallbacks_;
    result.collectives = collectives_;
    result.reshardings = std::move(reshardings_);
    return result;
  }

 private:
  const proto::Instruction& Inst(int64_t id) const { return in_.instructions(static_cast<int>(id)); }
  size_t RankOf(int64_t id) const { return static_cast<size_t>(Inst(id).shape().dims_size()); }
  const std::optional<Axes>& ShardingOf(int64_t id) const { return sharding_[static_cast<size_t>(id)]; }

  // ---- Propagation ---------------------------------------------------------------------------------------

  void Propagate() {
    const size_t n = static_cast<size_t>(in_.instructions_size());
    sharding_.assign(n, std::nullopt);
    fixed_.assign(n, false);
    users_.assign(n, {});
    for (int64_t id = 0; id < in_.instructions_size(); ++id) {
      const proto::Instruction& inst = Inst(id);
      for (int64_t o : inst.operands()) users_[static_cast<size_t>(o)].push_back(id);
      const Opcode op = static_cast<Opcode>(inst.opcode());
      // Parameters arrive as annotated; random numbers are drawn whole (the global stream's numbers).
      if (inst.has_sharding() || op == Opcode::kParameter || op == Opcode::kRngUniform || op == Opcode::kRngNormal) {
        sharding_[static_cast<size_t>(id)] = AxesOf(inst.sharding(), RankOf(id));
        fixed_[static_cast<size_t>(id)] = true;
      }
    }
    // Split dims spread first (a replicated neighbour says nothing yet); what stays unknown is replicated.
    for (bool changed = true; changed;) {
      changed = false;
      for (int64_t id = 0; id < in_.instructions_size(); ++id) changed |= Assign(id, Forward(id));
      for (int64_t id = in_.instructions_size() - 1; id >= 0; --id) {
        for (int64_t user : users_[static_cast<size_t>(id)]) {
          if (ShardingOf(id)) break;
          changed |= Assign(id, Backward(user, id));
        }
      }
    }
    for (size_t id = 0; id < n; ++id) {
      if (!sharding_[id]) sharding_[id] = Axes(RankOf(static_cast<int64_t>(id)), kWhole);
    }
  }

  bool Assign(int64_t id, std::optional<Axes> axes) {
    std::optional<Axes>& s = sharding_[static_cast<size_t>(id)];
    if (s || !axes || IsReplicated(*axes)) return false;
    s = std::move(axes);
    return true;
  }

  // The sharding instruction `id` gets from its operands' (nullopt: no rule, or nothing known).
  std::optional<Axes> Forward(int64_t id) const {
    const proto::Instruction& inst = Inst(id);
    if (ShardingOf(id)) return std::nullopt;
    const Opcode op = static_cast<Opcode>(inst.opcode());
    auto operand = [&](int i) -> const std::optional<Axes>& { return ShardingOf(inst.operands(i)); };
    if (HasPiecewiseRule(op)) return ForwardPiecewise(id);
    if (IsElementwise(op) || IsRowWise(op)) {
      std::optional<Axes> best;  // the operand split the most ways
      for (int i = 0; i < inst.operands_size(); ++i) {
        if (operand(i) && operand(i)->size() == RankOf(id) && (!best || SplitCount(*operand(i)) > SplitCount(*best)))
          best = operand(i);
      }
      if (best && IsRowWise(op)) return WithRowDimsWhole(inst, *best);
      return best;
    }
    switch (op) {
      case Opcode::kBroadcast: {
        if (!operand(0)) return std::nullopt;
        Axes out(RankOf(id), kWhole);
        for (int i = 0; i < inst.dims_size(); ++i)
          out[static_cast<size_t>(inst.dims(i))] = (*operand(0))[static_cast<size_t>(i)];
        return out;
      }
      case Opcode::kTranspose: {
        if (!operand(0)) return std::nullopt;
        Axes out(RankOf(id));
        for (int i = 0; i < inst.dims_size(); ++i)
          out[static_cast<size_t>(i)] = (*operand(0))[static_cast<size_t>(inst.dims(i))];
        return out;
      }
      case Opcode::kReshape:
        if (!operand(0)) return std::nullopt;
        return MapReshape(DimsOf(Inst(inst.operands(0)).shape()), DimsOf(inst.shape()), *operand(0), mesh_);
      case Opcode::kReduce:
      case Opcode::kArgmax: {
        if (!operand(0)) return std::nullopt;
        const Dims reduced = ReducedDims(inst);
        Axes out;
        for (size_t d = 0; d < operand(0)->size(); ++d) {
          if (std::find(reduced.begin(), reduced.end(), static_cast<int64_t>(d)) == reduced.end()) {
            out.push_back((*operand(0))[d]);
          }
        }
        return out;
      }
      case Opcode::kDot: {
        if (!operand(0) && !operand(1)) return std::nullopt;
        const Axes lhs = operand(0).value_or(Axes(RankOf(inst.operands(0)), kWhole));
        const Axes rhs = operand(1).value_or(Axes(RankOf(inst.operands(1)), kWhole));
        const DotDims dd = DotDimsOf(inst, Inst(inst.operands(0)).shape(), Inst(inst.operands(1)).shape());
        Axes out(RankOf(id), kWhole);
        for (size_t b = 0; b < dd.batch; ++b)
          out[b] = dd.lhs_batched && lhs[b] != kWhole ? lhs[b] : dd.rhs_batched ? rhs[b] : kWhole;
        out[dd.batch] = lhs[dd.lhs_m];
        out[dd.batch + 1] = rhs[dd.rhs_n];
        // A contracting axis leaves partial sums: it splits no dim of the result.
        return Deduplicated(out, ContractingAxis(lhs, rhs, dd));
      }
      default: return std::nullopt;
    }
  }

  // `axes` with every axis used a second time (or equal to `excluded`) made whole.
  static Axes Deduplicated(Axes axes, int64_t excluded = kWhole) {
    for (size_t d = 0; d < axes.size(); ++d) {
      if (axes[d] == kWhole) continue;
      if (axes[d] == excluded || std::find(axes.begin(), axes.begin() + static_cast<ptrdiff_t>(d), axes[d]) !=
                                     axes.begin() + static_cast<ptrdiff_t>(d)) {
        axes[d] = kWhole;
      }
    }
    return axes;
  }

  // The sharding operand `operand_id` of `user` should have for `user`'s sharding (nullopt: no rule).
  std::optional<Axes> Backward(int64_t user, int64_t operand_id) const {
    if (fixed_[static_cast<size_t>(operand_id)] || !ShardingOf(user)) return std::nullopt;
    const proto::Instruction& inst = Inst(user);
    int i = 0;
    while (inst.operands(i) != operand_id) ++i;
    std::optional<Axes> want = OperandAxes(user, i, LocalAxes(user, *ShardingOf(user)));
    if (!want) return std::nullopt;
    const Opcode op = static_cast<Opcode>(Inst(operand_id).opcode());
    if (op == Opcode::kIota) (*want)[static_cast<size_t>(Inst(operand_id).axis())] = kWhole;  // values by index
    return want;
  }

  // The sharding operand i of `id` needs for `id` to compute `result` locally (nullopt: no rule). For a dot,
  // the contracting dim is left whole (the caller splits it when both sides already are).
  std::optional<Axes> OperandAxes(int64_t id, int i, const Axes& result) const {
    const proto::Instruction& inst = Inst(id);
    const Opcode op = static_cast<Opcode>(inst.opcode());
    const size_t operand_rank = RankOf(inst.operands(i));
    if (HasPiecewiseRule(op)) return PiecewiseOperandAxes(id, i, result);
    if (IsRowWise(op) && operand_rank < result.size()) return Axes(operand_rank, kWhole);  // a weight or bias
    if (IsElementwise(op) || IsRowWise(op)) return result;
    switch (op) {
      case Opcode::kBroadcast: {
        const proto::Shape& in = Inst(inst.operands(0)).shape();
        Axes want(operand_rank, kWhole);
        for (int j = 0; j < inst.dims_size(); ++j) {
          if (in.dims(j) == inst.shape().dims(static_cast<int>(inst.dims(j)))) {
            want[static_cast<size_t>(j)] = result[static_cast<size_t>(inst.dims(j))];
          }
        }
        return want;
      }
      case Opcode::kTranspose: {
        Axes want(operand_rank, kWhole);
        for (int j = 0; j < inst.dims_size(); ++j)
          want[static_cast<size_t>(inst.dims(j))] = result[static_cast<size_t>(j)];
        return want;
      }
      case Opcode::kReshape:
        return MapReshape(DimsOf(inst.shape()), DimsOf(Inst(inst.operands(0)).shape()), result, mesh_);
      case Opcode::kReduce:
      case Opcode::kArgmax: {
        const Dims reduced = ReducedDims(inst);
        Axes want;
        size_t kept = 0;
        for (size_t d = 0; d < operand_rank; ++d) {
          const bool is_reduced = std::find(reduced.begin(), reduced.end(), static_cast<int64_t>(d)) != reduced.end();
          want.push_back(is_reduced ? kWhole : result[kept++]);
        }
        return want;
      }
      case Opcode::kDot: {
        const DotDims dd = DotDimsOf(inst, Inst(inst.operands(0)).shape(), Inst(inst.operands(1)).shape());
        Axes want(operand_rank, kWhole);
        const bool batched = i == 0 ? dd.lhs_batched : dd.rhs_batched;
        for (size_t b = 0; batched && b < dd.batch; ++b) want[b] = result[b];
        if (i == 0) want[dd.lhs_m] = result[dd.batch];
        if (i == 1) want[dd.rhs_n] = result[dd.batch + 1];
        return want;
      }
      default: return std::nullopt;
    }
  }

  // ---- Rules for slicing, concatenation, indexing and attention -------------------------------------------

  // `target` with the dims made whole that instruction `id` cannot compute piece by piece: a row-wise op's
  // rows, the dims a slice cuts, the dim a concatenation joins or a scatter adds along, a gather's dims its
  // operand has more of than its index, attention's per-element dims.
  Axes LocalAxes(int64_t id, Axes target) const {
    const proto::Instruction& inst = Inst(id);
    const Opcode op = static_cast<Opcode>(inst.opcode());
    if (IsRowWise(op)) return WithRowDimsWhole(inst, std::move(target));
    const size_t axis = static_cast<size_t>(inst.axis());
    for (size_t d = 0; d < target.size(); ++d) {
      const int i = static_cast<int>(d);
      bool whole = false;
      switch (op) {
        case Opcode::kSlice: whole = !SlicesWholeDim(inst, Inst(inst.operands(0)).shape(), d); break;
        case Opcode::kConcatenate:
        case Opcode::kIndexAdd: whole = d == axis; break;
        case Opcode::kGather:
          whole = d != axis && Inst(inst.operands(0)).shape().dims(i) != inst.shape().dims(i);
          break;
        case Opcode::kScatterAdd:
          whole = d == axis || Inst(inst.operands(1)).shape().dims(i) != inst.shape().dims(i);
          break;
        case Opcode::kAttention:
        case Opcode::kAttentionGrad: whole = d >= AttentionBatchDims(inst); break;
        default: break;
      }
      if (whole) target[d] = kWhole;
    }
    return target;
  }

  // The sharding of a slice, concatenation, indexing or attention from its operands': the most split any
  // operand implies, with the dims it cannot split whole (nullopt: nothing known).
  std::optional<Axes> ForwardPiecewise(int64_t id) const {
    const proto::Instruction& inst = Inst(id);
    const Opcode op = static_cast<Opcode>(inst.opcode());
    const size_t rank = RankOf(id);
    std::optional<Axes> best;
    for (int i = 0; i < inst.operands_size(); ++i) {
      const std::optional<Axes>& known = ShardingOf(inst.operands(i));
      if (!known) continue;
      Axes implied(rank, kWhole);
      if (op == Opcode::kAttention || op == Opcode::kAttentionGrad) {
        if (i >= AttentionTensorOperands(inst)) continue;  // the mask (or seed) may be broadcast
        std::copy_n(known->begin(), AttentionBatchDims(inst), implied.begin());
      } else if (op == Opcode::kIndexSelect && i == 1) {
        implied[static_cast<size_t>(inst.axis())] = (*known)[0];
      } else if (known->size() == rank) {
        implied = *known;
        // The indexed operand's split along the indexed dim says nothing of the result's (it is read whole).
        if ((op == Opcode::kIndexSelect || op == Opcode::kGather) && i == 0) {
          implied[static_cast<size_t>(inst.axis())] = kWhole;
        }
      }
      implied = Deduplicated(LocalAxes(id, std::move(implied)));
      if (!best || SplitCount(implied) > SplitCount(*best)) best = std::move(implied);
    }
    // A split dim must come in equal pieces (an index_select of one row keeps that dim whole).
    for (size_t d = 0; best && d < rank; ++d) {
      if ((*best)[d] != kWhole && inst.shape().dims(static_cast<int>(d)) % mesh_.axis_size((*best)[d]) != 0) {
        (*best)[d] = kWhole;
      }
    }
    return best;
  }

  // The layout operand i of a slice, concatenation, indexing or attention needs for the op to compute
  // `result` (as LocalAxes left it) from its pieces. Attention with dropout has no rule: its random numbers
  // are drawn per element of the whole batch.
  std::optional<Axes> PiecewiseOperandAxes(int64_t id, int i, const Axes& result) const {
    const proto::Instruction& inst = Inst(id);
    const Opcode op = static_cast<Opcode>(inst.opcode());
    const size_t operand_rank = RankOf(inst.operands(i));
    const size_t axis = static_cast<size_t>(inst.axis());
    switch (op) {
      case Opcode::kIndexSelect:
        if (i == 1) return Axes{result[axis]};
        [[fallthrough]];
      case Opcode::kGather: {
        if (i == 1) return result;
        Axes want = result;  // the operand is read whole along the indexed dim
        want[axis] = kWhole;
        return want;
      }
      case Opcode::kIndexAdd:
        if (i == 1) return Axes{kWhole};
        return result;
      case Opcode::kAttention:
      case Opcode::kAttentionGrad: {
        if (inst.dropout() > 0) return std::nullopt;
        const size_t batch = AttentionBatchDims(inst);
        const proto::Shape& operand = Inst(inst.operands(i)).shape();
        const proto::Shape& q = Inst(inst.operands(0)).shape();
        Axes want(operand_rank, kWhole);
        for (size_t b = 0; b < batch; ++b) {
          // A mask's broadcast batch dim (size 1 against the queries' batch) is read whole.
          if (operand.dims(static_cast<int>(b)) == q.dims(static_cast<int>(b))) want[b] = result[b];
        }
        return want;
      }
      default: return result;  // SLICE, CONCATENATE, SCATTER_ADD: the result's own layout
    }
  }

  // ---- Partitioning ---------------------------------------------------------------------------------------

  proto::Instruction* Emit(const proto::Instruction& like, const Dims& dims, std::vector<int64_t> operands,
                           int64_t* id) {
    proto::Instruction* inst = out_->add_instructions();
    *inst = like;
    inst->clear_operands();
    inst->clear_sharding();
    inst->mutable_shape()->clear_dims();
    for (int64_t d : dims) inst->mutable_shape()->add_dims(d);
    for (int64_t o : operands) inst->add_operands(o);
    *id = out_->instructions_size() - 1;
    return inst;
  }

  proto::Instruction* EmitCollective(Opcode op, int64_t operand, const Dims& dims, const std::vector<int64_t>& axes,
                                     int64_t* id) {
    proto::Instruction like;
    like.set_opcode(static_cast<int32_t>(op));
    *like.mutable_shape() = out_->instructions(static_cast<int>(operand)).shape();
    proto::Instruction* inst = Emit(like, dims, {operand}, id);
    for (const std::vector<int64_t>& group : mesh_.Groups(axes)) {
      proto::ReplicaGroup* g = inst->add_replica_groups();
      for (int64_t p : group) g->add_partitions(p);
    }
    if (op != Opcode::kPartitionSlice) ++collectives_;
    return inst;
  }

  // A mesh axis that splits one dim of `value` (laid out as `axes`) where `want` splits another, whole, dim
  // moves there by one ALL_TO_ALL (each partition sends every other the piece it needs), not by gathering
  // the whole value and slicing it again.
  // Returns the bytes each partition receives.
  int64_t MoveSplitsBetweenDims(int64_t id, const Axes& want, Axes& axes, int64_t& value) {
    const Dims global = DimsOf(Inst(id).shape());
    int64_t received = 0;
    for (size_t from = 0; from < axes.size(); ++from) {
      if (axes[from] == kWhole || axes[from] == want[from]) continue;
      const auto to = std::find(want.begin(), want.end(), axes[from]);
      const size_t d = static_cast<size_t>(to - want.begin());
      if (to == want.end() || axes[d] != kWhole) continue;
      const int64_t n = mesh_.axis_size(axes[from]);
      received += LocalBytes(id, axes) / n * (n - 1);  // all pieces but its own
      axes[d] = axes[from];
      axes[from] = kWhole;
      proto::Instruction* inst =
          EmitCollective(Opcode::kAllToAll, value, mesh_.LocalDims(global, axes), {axes[d]}, &value);
      inst->add_dims(static_cast<int64_t>(d));     // split
      inst->add_dims(static_cast<int64_t>(from));  // concatenated
    }
    return received;
  }

  // The partitioned value of instruction `id` laid out as `want`: gathered where it is split and should not
  // be, then sliced where it is whole and should be split.
  int64_t Operand(int64_t id, const Axes& want) {
    const auto key = std::make_pair(id, want);
    if (auto it = resharded_.find(key); it != resharded_.end()) return it->second;
    Axes axes = have_[static_cast<size_t>(id)];
    int64_t v = value_[static_cast<size_t>(id)];
    const Dims global = DimsOf(Inst(id).shape());
    const int64_t exchanged = MoveSplitsBetweenDims(id, want, axes, v);  // by each partition
    if (exchanged > 0) NoteResharding(id, want, exchanged, proto::Resharding::EXCHANGED);
    int64_t received = 0;  // by each partition
    for (size_t d = 0; d < axes.size(); ++d) {
      if (axes[d] == kWhole || axes[d] == want[d]) continue;
      const int64_t from = axes[d];
      received += (mesh_.axis_size(from) - 1) * LocalBytes(id, axes);
      axes[d] = kWhole;
      EmitCollective(Opcode::kAllGather, v, mesh_.LocalDims(global, axes), {from}, &v)
          ->set_axis(static_cast<int64_t>(d));
    }
    bool sliced = false;
    for (size_t d = 0; d < axes.size(); ++d) {
      if (want[d] == kWhole || axes[d] == want[d]) continue;
      axes[d] = want[d];
      sliced = true;
      EmitCollective(Opcode::kPartitionSlice, v, mesh_.LocalDims(global, axes), {want[d]}, &v)
          ->set_axis(static_cast<int64_t>(d));
    }
    const bool parameter = static_cast<Opcode>(Inst(id).opcode()) == Opcode::kParameter;
    if (received > 0 && (parameter || sliced)) {
      NoteResharding(id, want, received, parameter ? proto::Resharding::PARAMETER : proto::Resharding::RESLICED);
    }
    resharded_.emplace(key, v);
    return v;
  }

  void Define(int64_t id, int64_t value, Axes axes) {
    value_[static_cast<size_t>(id)] = value;
    have_[static_cast<size_t>(id)] = std::move(axes);
  }

  void Partition(int64_t id, SpmdPartitioned& result) {
    const proto::Instruction& inst = Inst(id);
    const Opcode op = static_cast<Opcode>(inst.opcode());
    const Axes& target = *ShardingOf(id);
    const Dims global = DimsOf(inst.shape());
    int64_t v = -1;
    if (op == Opcode::kParameter) {
      Emit(inst, mesh_.LocalDims(global, target), {}, &v);
      const size_t number = static_cast<size_t>(inst.parameter_number());
      if (result.parameter_shardings.size() <= number) result.parameter_shardings.resize(number + 1);
      result.parameter_shardings[number] = ToProto(target);
      Define(id, v, target);
      return;
    }
    if (op == Opcode::kConstant || op == Opcode::kIota) {  // computed from the point alone
      Axes local = target;
      if (op == Opcode::kIota) local[static_cast<size_t>(inst.axis())] = kWhole;
      Emit(inst, mesh_.LocalDims(global, local), {}, &v);
      Define(id, v, local);
      return;
    }
    consumer_ = {.id = id, .has_rule = true, .annotation = false};
    if (op == Opcode::kDot) return PartitionDot(id, target);
    if (op == Opcode::kReduce) return PartitionReduce(id, target);
    if (op == Opcode::kIndexAdd && PartitionIndexAddOfSplitRows(id, target)) return;
    // Every other rule computes `target` locally from its operands when OperandAxes has one for it (with the
    // dims LocalAxes wants whole), else the op is computed replicated.
    Axes computed = LocalAxes(id, target);
    std::vector<std::optional<Axes>> wants;
    bool has_rule = !IsGenerator(op) && op != Opcode::kParameter;
    for (int i = 0; has_rule && i < inst.operands_size(); ++i) {
      wants.push_back(OperandAxes(id, i, computed));
      has_rule = wants.back().has_value();
    }
    if (!has_rule) {
      consumer_.has_rule = false;
      computed = Axes(global.size(), kWhole);
      wants.clear();
      for (int i = 0; i < inst.operands_size(); ++i) wants.emplace_back(Axes(RankOf(inst.operands(i)), kWhole));
      if (!IsGenerator(op)) ++fallbacks_;
    }
    std::vector<int64_t> operands;
    for (int i = 0; i < inst.operands_size(); ++i)
      operands.push_back(Operand(inst.operands(i), *wants[static_cast<size_t>(i)]));
    proto::Instruction* local = Emit(inst, mesh_.LocalDims(global, computed), operands, &v);
    // A slice takes the whole of each split dim: of the local piece, up to its local size.
    for (size_t d = 0; op == Opcode::kSlice && d < computed.size(); ++d) {
      if (computed[d] != kWhole) local->set_limit(static_cast<int>(d), local->shape().dims(static_cast<int>(d)));
    }
    Define(id, v, computed);
  }

  // [batch..., M, K] x [batch..., K, N]: batch, M and N split as the result wants; K split on both sides by
  // one axis leaves partial sums, combined by ALL_REDUCE (or REDUCE_SCATTER into a dim the result wants split
  // over that axis).
  void PartitionDot(int64_t id, const Axes& target) {
    const proto::Instruction& inst = Inst(id);
    const int64_t lhs_id = inst.operands(0), rhs_id = inst.operands(1);
    const DotDims dd = DotDimsOf(inst, Inst(lhs_id).shape(), Inst(rhs_id).shape());
    const Axes& lhs = *ShardingOf(lhs_id);
    const Axes& rhs = *ShardingOf(rhs_id);
    const int64_t k = ContractingAxis(lhs, rhs, dd);
    Axes computed = target;
    std::optional<size_t> scattered;
    for (size_t d = 0; d < computed.size(); ++d) {
      if (k != kWhole && computed[d] == k) {
        computed[d] = kWhole;
        scattered = d;
      }
    }
    Axes want_lhs = *OperandAxes(id, 0, computed);
    Axes want_rhs = *OperandAxes(id, 1, computed);
    want_lhs[dd.lhs_k] = k;
    want_rhs[dd.rhs_k] = k;
    const Dims global = DimsOf(inst.shape());
    int64_t v;
    Emit(inst, mesh_.LocalDims(global, computed), {Operand(lhs_id, want_lhs), Operand(rhs_id, want_rhs)}, &v);
    if (k != kWhole && scattered) {
      EmitCollective(Opcode::kReduceScatter, v, mesh_.LocalDims(global, target), {k}, &v)
          ->set_axis(static_cast<int64_t>(*scattered));
      computed = target;
    } else if (k != kWhole) {
      EmitCollective(Opcode::kAllReduce, v, mesh_.LocalDims(global, computed), {k}, &v)
          ->set_combiner(static_cast<int32_t>(Combiner::kSum));
    }
    Define(id, v, computed);
  }

  // A reduction keeps its operand's split reduced dims split (each partition reduces its piece) and
  // ALL_REDUCEs the partial results over their axes with the same combiner.
  void PartitionReduce(int64_t id, const Axes& target) {
    const proto::Instruction& inst = Inst(id);
    const int64_t operand_id = inst.operands(0);
    const Axes& operand = *ShardingOf(operand_id);
    Axes want = *OperandAxes(id, 0, target);
    std::vector<int64_t> partial;
    for (int64_t d : inst.dims()) {
      const int64_t axis = operand[static_cast<size_t>(d)];
      if (axis != kWhole && !Uses(target, axis)) {
        want[static_cast<size_t>(d)] = axis;
        partial.push_back(axis);
      }
    }
    const Dims global = DimsOf(inst.shape());
    int64_t v;
    Emit(inst, mesh_.LocalDims(global, target), {Operand(operand_id, want)}, &v);
    if (!partial.empty()) {
      EmitCollective(Opcode::kAllReduce, v, mesh_.LocalDims(global, target), partial, &v)
          ->set_combiner(inst.combiner());
    }
    Define(id, v, target);
  }

  // INDEX_ADD of source rows split over a mesh axis the result does not use (an embedding's gradient, its
  // tokens split over the batch): each partition adds its own rows into zeros, the partial sums are
  // ALL_REDUCEd and added to x. The table's bytes move once, not every row of the batch. False when the
  // rows are not split so (the generic rule then applies).
  bool PartitionIndexAddOfSplitRows(int64_t id, const Axes& target) {
    const proto::Instruction& inst = Inst(id);
    const size_t axis = static_cast<size_t>(inst.axis());
    const int64_t rows_axis = (*ShardingOf(inst.operands(2)))[axis];
    const Axes computed = LocalAxes(id, target);
    if (rows_axis == kWhole || Uses(computed, rows_axis)) return false;
    Axes want_src = computed;
    want_src[axis] = rows_axis;
    const Dims local = mesh_.LocalDims(DimsOf(inst.shape()), computed);
    proto::Instruction zeros_like;
    zeros_like.set_opcode(static_cast<int32_t>(Opcode::kConstant));
    zeros_like.mutable_shape()->set_type(inst.shape().type());
    int64_t zeros, v;
    Emit(zeros_like, local, {}, &zeros);
    Emit(inst, local, {zeros, Operand(inst.operands(1), {rows_axis}), Operand(inst.operands(2), want_src)}, &v);
    EmitCollective(Opcode::kAllReduce, v, local, {rows_axis}, &v)->set_combiner(static_cast<int32_t>(Combiner::kSum));
    proto::Instruction add_like;
    add_like.set_opcode(static_cast<int32_t>(Opcode::kAdd));
    add_like.mutable_shape()->set_type(inst.shape().type());
    Emit(add_like, local, {Operand(inst.operands(0), computed), v}, &v);
    Define(id, v, computed);
    return true;
  }

  // ---- Avoidable reshardings (see spmd_partitioner.h) ----------------------------------------------------

  // What the operands being resharded are for: the instruction being partitioned, or its own annotation.
  struct Consumer {
    int64_t id = -1;
    bool has_rule = true;
    bool annotation = false;
  };

  // The bytes of one partition's piece of instruction `id`'s value laid out as `axes`.
  int64_t LocalBytes(int64_t id, const Axes& axes) const {
    int64_t elements = 1;
    for (int64_t d : mesh_.LocalDims(DimsOf(Inst(id).shape()), axes)) elements *= d;
    return elements * ByteWidth(FromProto(Inst(id).shape().type()));
  }

  // Records the resharding of `id` (laid out as have_[id]) to `want` for consumer_, which made each partition
  // receive `received` bytes, when it is one of the avoidable kinds.
  void NoteResharding(int64_t id, const Axes& want, int64_t received, proto::Resharding::Kind kind) {
    if (!consumer_.has_rule) return;
    proto::Resharding& r = reshardings_.emplace_back();
    r.set_kind(kind);
    r.set_origin(Inst(id).origin());
    *r.mutable_shape() = Inst(id).shape();
    *r.mutable_had() = ToProto(have_[static_cast<size_t>(id)]);
    *r.mutable_needed() = ToProto(want);
    r.set_bytes_per_partition(received);
    const proto::Instruction& consumer = Inst(consumer_.id);
    r.set_consumer(consumer_.annotation ? "sharding annotation"
                                        : std::string(OpcodeName(static_cast<Opcode>(consumer.opcode()))));
    r.set_consumer_origin(consumer.origin());
  }

  const proto::Module& in_;
  MeshGrid mesh_;
  std::vector<std::optional<Axes>> sharding_;
  std::vector<bool> fixed_;
  std::vector<std::vector<int64_t>> users_;
  proto::Module* out_ = nullptr;
  std::vector<int64_t> value_;  // instruction id -> the partitioned module's id of its value
  std::vector<Axes> have_;      // ... and how that value is split
  std::map<std::pair<int64_t, Axes>, int64_t> resharded_;
  int64_t fallbacks_ = 0;
  int64_t collectives_ = 0;
  Consumer consumer_;
  std::vector<proto::Resharding> reshardings_;
};

}  // namespace

absl::StatusOr<SpmdPartitioned> PartitionSpmd(const proto::Module& module) {
  if (module.mesh().shape().empty()) return absl::InvalidArgumentError("the module has no mesh to partition over");
  return Partitioner(module).Run();
}

}  // namespace lazyrt::pjrt
