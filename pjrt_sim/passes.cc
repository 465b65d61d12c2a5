#include "pjrt_sim/passes.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pjrt_sim/compute_type.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/replica_groups.h"

namespace lazyrt::pjrt {
namespace {

// Points every use of an instruction at forward[id] (which is never later than id).
void ForwardUses(HloModule& module, const std::vector<int64_t>& forward) {
  for (HloInst& inst : module.insts) {
    for (int64_t& op : inst.operands) op = forward[static_cast<size_t>(op)];
  }
  for (int64_t& out : module.outputs) out = forward[static_cast<size_t>(out)];
}

std::vector<int64_t> Identity(size_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

bool IsSplat(const HloInst& inst, double value) { return inst.opcode == Opcode::kConstant && inst.value == value; }

// The parts of a concatenation along its axis: [begin, end) and the operand, and whether it is a splat 0.
struct ConcatPart {
  int64_t begin, end, operand;
  bool zero;
};
std::vector<ConcatPart> PartsOf(const HloModule& module, const HloInst& concat) {
  std::vector<ConcatPart> parts;
  int64_t at = 0;
  for (int64_t id : concat.operands) {
    const HloInst& part = module.insts[static_cast<size_t>(id)];
    const int64_t size = part.shape.dims[static_cast<size_t>(concat.axis)];
    parts.push_back({at, at + size, id, IsSplat(part, 0)});
    at += size;
  }
  return parts;
}

// add(a, b) of two concatenations along one axis where, wherever a part of one is not a splat 0, the
// other is all zeros: the operands of the concatenation that equals the sum (each nonzero part once, and
// zero parts between them), or nullopt. That is how the gradients of slices that tile an array sum up
// (a slice's gradient is its g between zeros): one copy, not a zero-filled array per slice and adds.
std::optional<std::vector<int64_t>> SumOfZeroPaddedParts(const HloModule& module, const HloInst& add) {
  const HloInst& a = module.insts[static_cast<size_t>(add.operands[0])];
  const HloInst& b = module.insts[static_cast<size_t>(add.operands[1])];
  if (a.opcode != Opcode::kConcatenate || b.opcode != Opcode::kConcatenate || a.axis != b.axis ||
      !(a.shape == add.shape) || !(b.shape == add.shape)) {
    return std::nullopt;
  }
  const std::vector<ConcatPart> parts[2] = {PartsOf(module, a), PartsOf(module, b)};
  const auto zero_over = [](const std::vector<ConcatPart>& of, int64_t begin, int64_t end) {
    return std::ranges::all_of(of, [&](const ConcatPart& p) { return p.zero || p.end <= begin || p.begin >= end; });
  };
  // The part of a or b that starts at `at` and is not hidden under the other's values.
  const auto part_at = [&](int64_t at, bool zero) -> const ConcatPart* {
    for (int side = 0; side < 2; ++side) {
      for (const ConcatPart& p : parts[side]) {
        if (p.begin == at && p.end > at && p.zero == zero && zero_over(parts[1 - side], p.begin, p.end)) return &p;
      }
    }
    return nullptr;
  };
  // Walks the axis, taking a nonzero part first where one starts: it must appear.
  std::vector<int64_t> result;
  const int64_t total = add.shape.dims[static_cast<size_t>(a.axis)];
  for (int64_t at = 0; at < total;) {
    const ConcatPart* next = part_at(at, false);
    if (next == nullptr) next = part_at(at, true);
    if (next == nullptr) return std::nullopt;
    result.push_back(next->operand);
    at = next->end;
  }
  return result;
}

bool IsIdentityPermutation(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Whether a permutation swaps the last two dims and keeps the others: a matrix transpose (batched).
bool SwapsLastTwoDims(const std::vector<int64_t>& perm) {
  const size_t r = perm.size();
  if (r < 2 || perm[r - 1] != static_cast<int64_t>(r - 2) || perm[r - 2] != static_cast<int64_t>(r - 1)) return false;
  for (size_t d = 0; d + 2 < r; ++d) {
    if (perm[d] != static_cast<int64_t>(d)) return false;
  }
  return true;
}

// How many operand and output references each instruction has.
std::vector<int64_t> UseCounts(const HloModule& module) {
  std::vector<int64_t> uses(module.insts.size(), 0);
  for (const HloInst& inst : module.insts) {
    for (int64_t op : inst.operands) ++uses[static_cast<size_t>(op)];
  }
  for (int64_t out : module.outputs) ++uses[static_cast<size_t>(out)];
  return uses;
}

// A value as stored in `type` and read back: what a kernel would load.
double RoundTo(PrimitiveType type, double v) {
  switch (type) {
    case PrimitiveType::kBF16: return Bf16ToFloat(FloatToBf16(static_cast<float>(v)));
    case PrimitiveType::kF16: return HalfToFloat(FloatToHalf(static_cast<float>(v)));
    case PrimitiveType::kF32:
    case PrimitiveType::kF64:
    case PrimitiveType::kS32:
    case PrimitiveType::kS64:
    case PrimitiveType::kPred:
      return DispatchComputeType(type, [&]<typename T>() { return static_cast<double>(SaturatingCast<T>(v)); });
  }
  return v;  // unreachable: the switch covers every type
}

// Whether a reduction's result is one of its inputs (so reducing copies of a value gives the value).
bool IsSelective(Combiner combiner) {
  switch (combiner) {
    case Combiner::kMax:
    case Combiner::kMin:
    case Combiner::kAll:
    case Combiner::kAny: return true;
    case Combiner::kSum:
    case Combiner::kProd: return false;
  }
  return false;  // unreachable: the switch covers every combiner
}

// Whether converting any value of `narrow` to `wide` is exact (and so converting it back gives it again).
bool HoldsEveryValueOf(PrimitiveType wide, PrimitiveType narrow) {
  using enum PrimitiveType;
  switch (narrow) {
    case kPred: return true;
    case kBF16:
    case kF16: return wide == kF32 || wide == kF64;
    case kF32: return wide == kF64;
    case kS32: return wide == kS64 || wide == kF64;
    case kF64:
    case kS64: return false;
  }
  return false;
}

}  // namespace

int64_t EliminateDeadCode(HloModule& module) {
  const size_t n = module.insts.size();
  std::vector<bool> live(n, false);
  for (int64_t out : module.outputs) live[static_cast<size_t>(out)] = true;
  for (size_t i = n; i-- > 0;) {
    if (module.insts[i].opcode == Opcode::kParameter) live[i] = true;
    if (!live[i]) continue;
    for (int64_t op : module.insts[i].operands) live[static_cast<size_t>(op)] = true;
  }
  std::vector<int64_t> renumber(n, -1);
  std::vector<HloInst> kept;
  for (size_t i = 0; i < n; ++i) {
    if (!live[i]) continue;
    renumber[i] = static_cast<int64_t>(kept.size());
    kept.push_back(std::move(module.insts[i]));
  }
  const int64_t removed = static_cast<int64_t>(n - kept.size());
  module.insts = std::move(kept);
  ForwardUses(module, renumber);
  return removed;
}

int64_t EliminateCommonSubexpressions(HloModule& module) {
  absl::flat_hash_map<std::string, int64_t> seen;
  std::vector<int64_t> forward = Identity(module.insts.size());
  int64_t changes = 0;
  for (size_t i = 0; i < module.insts.size(); ++i) {
    HloInst& inst = module.insts[i];
    for (int64_t& op : inst.operands) op = forward[static_cast<size_t>(op)];
    if (inst.opcode == Opcode::kParameter) continue;
    // The value by its bits: StrCat(double) keeps only 6 significant digits, which would merge
    // constants 1 and 1.0000001.
    const std::string key = absl::StrCat(
        static_cast<int32_t>(inst.opcode), "|", absl::StrJoin(inst.operands, ","), "|", inst.shape.ToString(), "|",
        std::bit_cast<uint64_t>(inst.value), "|", absl::StrJoin(inst.dims, ","), "|", absl::StrJoin(inst.start, ","),
        "|", absl::StrJoin(inst.limit, ","), "|", absl::StrJoin(inst.stride, ","), "|", inst.axis, "|",
        static_cast<int32_t>(inst.direction), "|", static_cast<int32_t>(inst.combiner), "|", inst.stream, "|",
        inst.transpose_lhs, inst.transpose_rhs, inst.causal, "|", std::bit_cast<uint64_t>(inst.dropout), "|",
        ReplicaGroupsText(inst.replica_groups));
    auto [it, inserted] = seen.emplace(key, static_cast<int64_t>(i));
    if (!inserted) {
      forward[i] = it->second;
      ++changes;
    }
  }
  for (int64_t& out : module.outputs) out = forward[static_cast<size_t>(out)];
  return changes;
}

int64_t SimplifyAlgebra(HloModule& module) {
  std::vector<int64_t> forward = Identity(module.insts.size());
  std::vector<int64_t> uses = UseCounts(module);
  int64_t changes = 0;
  for (size_t i = 0; i < module.insts.size(); ++i) {
    HloInst& inst = module.insts[i];
    for (int64_t& op : inst.operands) op = forward[static_cast<size_t>(op)];
    auto operand = [&](size_t k) -> HloInst& { return module.insts[static_cast<size_t>(inst.operands[k])]; };
    auto replace_with = [&](int64_t id) {
      forward[i] = id;
      // Its readers read `id` now, and it (dead) no longer does.
      const bool reads_id = std::find(inst.operands.begin(), inst.operands.end(), id) != inst.operands.end();
      uses[static_cast<size_t>(id)] += uses[i] - (reads_id ? 1 : 0);
      ++changes;
    };
    // Points operand k at `id` instead. The counts of uses stay exact (or high, for operands of dead
    // instructions): the convert rule rewrites an operand in place where it counts one use.
    auto read_instead = [&](size_t k, int64_t id) {
      --uses[static_cast<size_t>(inst.operands[k])];
      ++uses[static_cast<size_t>(id)];
      inst.operands[k] = id;
    };
    const bool same_as_operand0 = !inst.operands.empty() && operand(0).shape == inst.shape;
    switch (inst.opcode) {
      case Opcode::kAdd:
        if (IsSplat(operand(1), 0) && same_as_operand0) {
          replace_with(inst.operands[0]);
        } else if (IsSplat(operand(0), 0) && operand(1).shape == inst.shape) {
          replace_with(inst.operands[1]);
        } else if (std::optional<std::vector<int64_t>> parts = SumOfZeroPaddedParts(module, inst)) {
          inst.opcode = Opcode::kConcatenate;
          inst.axis = operand(0).axis;
          for (int64_t op : inst.operands) --uses[static_cast<size_t>(op)];
          for (int64_t op : *parts) ++uses[static_cast<size_t>(op)];
          inst.operands = *std::move(parts);
          ++changes;
        }
        break;
      case Opcode::kSubtract:
        if (IsSplat(operand(1), 0) && same_as_operand0) replace_with(inst.operands[0]);
        break;
      case Opcode::kMultiply:
        if (IsSplat(operand(1), 1) && same_as_operand0)
          replace_with(inst.operands[0]);
        else if (IsSplat(operand(0), 1) && operand(1).shape == inst.shape)
          replace_with(inst.operands[1]);
        break;
      case Opcode::kDivide:
        if (IsSplat(operand(1), 1) && same_as_operand0) replace_with(inst.operands[0]);
        break;
      case Opcode::kNegate:
        if (operand(0).opcode == Opcode::kNegate) replace_with(operand(0).operands[0]);
        break;
      case Opcode::kConvert:
        if (same_as_operand0) {
          replace_with(inst.operands[0]);
        } else if (operand(0).opcode == Opcode::kConvert &&
                   module.insts[static_cast<size_t>(operand(0).operands[0])].shape == inst.shape &&
                   HoldsEveryValueOf(operand(0).shape.type, inst.shape.type)) {
          // convert(convert(v, wider), v's type) = v where the wider type holds every value of v's: the
          // gradient of a bf16 tensor widened to f32 and rounded back for a bf16 product (the attention's
          // bf16 gradients into the qkv projection's backward) was a loop writing a copy of v. Only a NaN's
          // payload may differ (the rounding makes every bf16 NaN 0x7fc0).
          replace_with(operand(0).operands[0]);
        } else if (operand(0).opcode == Opcode::kReshape && uses[static_cast<size_t>(inst.operands[0])] == 1) {
          // convert(reshape(v)) = reshape(convert(v)) (row-major order is the same in both shapes), where v
          // is elementwise work or a view read here only, and the convert does not widen: the convert's
          // loop computes v instead of v being stored whole for the reshape and read back (the
          // attention's heads, transposed back and rounded to bf16 for the output projection, were
          // written in f32 first). A stored v (a product), or a widening convert (recomputed by each
          // reader from the narrower v), stays after the reshape.
          HloInst& reshape = operand(0);
          const HloInst& v = module.insts[static_cast<size_t>(reshape.operands[0])];
          if (IsFusable(v.opcode) && uses[static_cast<size_t>(reshape.operands[0])] == 1 &&
              ByteWidth(inst.shape.type) <= ByteWidth(v.shape.type)) {
            reshape.opcode = Opcode::kConvert;
            reshape.shape = {inst.shape.type, v.shape.dims};
            inst.opcode = Opcode::kReshape;
            ++changes;
          }
        } else if (operand(0).opcode == Opcode::kTranspose && SwapsLastTwoDims(operand(0).dims) &&
                   uses[static_cast<size_t>(inst.operands[0])] == 1) {
          // convert(transpose(v)) = transpose(convert(v)) with the last two dims swapped: a product reading
          // it takes the transpose as its operand's (the DOT rule), and a loop reads it through its load, so
          // the convert runs over v in v's order instead of gathering a column at a time (the bf16 copies of
          // a linear layer's [out, in] weights read as [in, out]: 0.71 ms of the bf16 GPT step, 0.35 in order).
          HloInst& transpose = operand(0);
          const HloInst& v = module.insts[static_cast<size_t>(transpose.operands[0])];
          inst.dims = std::exchange(transpose.dims, {});
          transpose.opcode = Opcode::kConvert;
          transpose.shape = {inst.shape.type, v.shape.dims};
          inst.opcode = Opcode::kTranspose;
          ++changes;
        }
        break;
      case Opcode::kReshape:
        if (same_as_operand0) {
          replace_with(inst.operands[0]);
        } else if (operand(0).opcode == Opcode::kReshape) {
          read_instead(0, operand(0).operands[0]);
          ++changes;
        }
        break;
      case Opcode::kTranspose:
        if (IsIdentityPermutation(inst.dims)) {
          replace_with(inst.operands[0]);
        } else if (operand(0).opcode == Opcode::kTranspose) {
          // result dim d = inner's dim dims[d] = source dim inner.dims[dims[d]].
          std::vector<int64_t> composed(inst.dims.size());
          for (size_t d = 0; d < composed.size(); ++d) {
            composed[d] = operand(0).dims[static_cast<size_t>(inst.dims[d])];
          }
          read_instead(0, operand(0).operands[0]);
          inst.dims = composed;
          ++changes;
          if (IsIdentityPermutation(inst.dims)) replace_with(inst.operands[0]);
        } else if (operand(0).opcode == Opcode::kDot && SwapsLastTwoDims(inst.dims) &&
                   uses[static_cast<size_t>(inst.operands[0])] == 1) {
          // (A B)^T = B^T A^T: the product computes the transposed result directly, written
          // contiguously, instead of being written and then read back with a stride.
          const HloInst dot = operand(0);
          inst.opcode = Opcode::kDot;
          read_instead(0, dot.operands[1]);
          inst.operands.push_back(dot.operands[0]);
          ++uses[static_cast<size_t>(dot.operands[0])];
          inst.transpose_lhs = !dot.transpose_rhs;
          inst.transpose_rhs = !dot.transpose_lhs;
          inst.dims.clear();
          ++changes;
        }
        break;
      case Opcode::kBroadcast:
        if (same_as_operand0) {
          replace_with(inst.operands[0]);
        } else if (operand(0).opcode == Opcode::kConstant) {
          // A broadcast splat is a splat of the bigger shape.
          inst.opcode = Opcode::kConstant;
          inst.value = operand(0).value;
          --uses[static_cast<size_t>(inst.operands[0])];
          inst.operands.clear();
          inst.dims.clear();
          ++changes;
        }
        break;
      case Opcode::kSlice:
        if (same_as_operand0) replace_with(inst.operands[0]);
        break;
      case Opcode::kReduce:
        if (inst.dims.empty()) replace_with(inst.operands[0]);
        break;
      case Opcode::kDot:
        // dot(transpose(a), b) with only the last two dims swapped reads a transposed instead.
        for (size_t k = 0; k < 2; ++k) {
          const HloInst& t = operand(k);
          if (t.opcode != Opcode::kTranspose || !SwapsLastTwoDims(t.dims)) continue;
          read_instead(k, t.operands[0]);
          (k == 0 ? inst.transpose_lhs : inst.transpose_rhs) ^= true;
          ++changes;
        }
        break;
      case Opcode::kExp:
      case Opcode::kLog:
      case Opcode::kTanh:
      case Opcode::kLogistic:
      case Opcode::kErf:
      case Opcode::kGelu:
      case Opcode::kGeluDerivative:
      case Opcode::kSin:
      case Opcode::kCos:  // the unary IsCostlyFunction
        if (operand(0).opcode == Opcode::kBroadcast && uses[static_cast<size_t>(inst.operands[0])] == 1) {
          // f(broadcast(v)) = broadcast(f(v)) for a costly f: evaluated once per element of v instead of once per
          // element of the broadcast (a log-softmax's log(sum), broadcast along its rows, took a logarithm per
          // logit). Fusion then stores f(v) where its readers would repeat it much, or evaluates it in them.
          HloInst& broadcast = operand(0);
          const HloInst& v = module.insts[static_cast<size_t>(broadcast.operands[0])];
          inst.dims = std::exchange(broadcast.dims, {});
          broadcast.opcode = inst.opcode;
          broadcast.shape = {inst.shape.type, v.shape.dims};
          inst.opcode = Opcode::kBroadcast;
          ++changes;
        }
        break;
      // No rewrite rule for the others.
      case Opcode::kParameter:
      case Opcode::kConstant:
      case Opcode::kIota:
      case Opcode::kRngUniform:
      case Opcode::kRngNormal:
      case Opcode::kAbs:
      case Opcode::kSqrt:
      case Opcode::kRsqrt:
      case Opcode::kSign:
      case Opcode::kNot:
      case Opcode::kPower:
      case Opcode::kMaximum:
      case Opcode::kMinimum:
      case Opcode::kCompare:
      case Opcode::kAnd:
      case Opcode::kOr:
      case Opcode::kSelect:
      case Opcode::kConcatenate:
      case Opcode::kIndexSelect:
      case Opcode::kGather:
      case Opcode::kArgmax:
      case Opcode::kAttention:
      case Opcode::kAttentionGrad: break;
      case Opcode::kLayerNorm:
      case Opcode::kRmsNorm:
      case Opcode::kLayerNormGrad:
      case Opcode::kRmsNormGrad: break;
      case Opcode::kCumsum:
      case Opcode::kArgsort:
      case Opcode::kScatterAdd:
      case Opcode::kIndexAdd:
        break;
        // Collectives: each partition's value depends on the others', which no local rule can see.
        LAZYRT_COLLECTIVE_OPCODES(LAZYRT_CASE_OF_OPCODE)
        break;
    }
  }
  for (int64_t& out : module.outputs) out = forward[static_cast<size_t>(out)];
  return changes;
}

int64_t FoldConstants(HloModule& module) {
  int64_t changes = 0;
  for (HloInst& inst : module.insts) {
    if (inst.operands.empty() || inst.opcode == Opcode::kRngUniform || inst.opcode == Opcode::kRngNormal) continue;
    bool all_splat = true;
    for (int64_t op : inst.operands)
      all_splat = all_splat && module.insts[static_cast<size_t>(op)].opcode == Opcode::kConstant;
    // A reduction over an empty dimension yields its identity, not the splat.
    if (!all_splat ||
        (inst.opcode == Opcode::kReduce && module.insts[static_cast<size_t>(inst.operands[0])].shape.numel() == 0)) {
      continue;
    }
    auto arg_type = [&](size_t k) { return module.insts[static_cast<size_t>(inst.operands[k])].shape.type; };
    // An operand as a kernel would load it: a module constant's value need not be representable in its
    // type (0.1 as f32 or bf16, 2 as pred, 3e9 as s32), and the kernel rounds it first.
    auto arg = [&](size_t k) {
      return RoundTo(arg_type(k), module.insts[static_cast<size_t>(inst.operands[k])].value);
    };
    double value;
    if (IsUnary(inst.opcode)) {
      value = DispatchComputeType(inst.shape.type, [&]<typename T>() {
        return static_cast<double>(ApplyUnary<T>(inst.opcode, static_cast<T>(arg(0))));
      });
    } else if (inst.opcode == Opcode::kConvert) {
      value = DispatchComputeType(inst.shape.type,
                                  [&]<typename T>() { return static_cast<double>(SaturatingCast<T>(arg(0))); });
    } else if (inst.opcode == Opcode::kCompare) {
      value = DispatchComputeType(arg_type(0), [&]<typename T>() {
        return static_cast<double>(ApplyCompare<T>(inst.direction, static_cast<T>(arg(0)), static_cast<T>(arg(1))));
      });
    } else if (IsBinary(inst.opcode)) {
      value = DispatchComputeType(inst.shape.type, [&]<typename T>() {
        return static_cast<double>(ApplyBinary<T>(inst.opcode, static_cast<T>(arg(0)), static_cast<T>(arg(1))));
      });
    } else if (inst.opcode == Opcode::kSelect) {
      value = arg(0) != 0 ? arg(1) : arg(2);
    } else if (inst.opcode == Opcode::kReshape || inst.opcode == Opcode::kTranspose ||
               inst.opcode == Opcode::kBroadcast || inst.opcode == Opcode::kSlice ||
               (inst.opcode == Opcode::kReduce && IsSelective(inst.combiner))) {
      value = arg(0);  // a splat stays a splat (and the max, min, all or any of copies of a value is it)
    } else {
      continue;  // sums of splats, dots, gathers...: left to the kernels
    }
    // A constant holds a double: an s64 result of magnitude 2^53 or more may have lost its low bits
    // already, so leave it to the kernel.
    if (inst.shape.type == PrimitiveType::kS64 && std::fabs(value) >= 0x1p53) continue;
    inst.opcode = Opcode::kConstant;
    inst.value = RoundTo(inst.shape.type, value);
    inst.operands.clear();
    inst.dims.clear();
    ++changes;
  }
  return changes;
}

int64_t ScheduleReductionsEarly(HloModule& module) {
  const size_t n = module.insts.size();
  // What moves: the products and reductions that shrink, and the views that nothing else reads.
  std::vector<bool> moves(n, false);
  std::vector<std::vector<int64_t>> readers(n);
  for (size_t i = 0; i < n; ++i) {
    const HloInst& inst = module.insts[i];
    int64_t largest = 0;
    for (int64_t op : inst.operands) {
      largest = std::max(largest, module.insts[static_cast<size_t>(op)].shape.numel());
      readers[static_cast<size_t>(op)].push_back(static_cast<int64_t>(i));
    }
    moves[i] = (inst.opcode == Opcode::kDot || inst.opcode == Opcode::kReduce) &&
               inst.shape.numel() * kShrinkFactor <= largest;
  }
  for (size_t i = n; i-- > 0;) {
    const Opcode op = module.insts[i].opcode;
    const bool view =
        op == Opcode::kReshape || op == Opcode::kTranspose || op == Opcode::kSlice || op == Opcode::kBroadcast;
    moves[i] = moves[i] || (view && !readers[i].empty() &&
                            std::ranges::all_of(readers[i], [&](int64_t r) { return moves[static_cast<size_t>(r)]; }));
  }
  // Each instruction's place as (where its chain starts, how deep in it, its own index), compared in that
  // order: an instruction left in place starts a chain at its index; one moved up follows its latest
  // operand, one deeper. Operands stay before their users: a user left in place comes after it in the
  // old order too, and one moved up follows the latest of its operands.
  struct Place {
    size_t start, depth, index;
    auto operator<=>(const Place&) const = default;
  };
  std::vector<Place> place(n);
  for (size_t i = 0; i < n; ++i) {
    std::optional<Place> latest;
    for (int64_t op : module.insts[i].operands) {
      latest = std::max(latest.value_or(place[static_cast<size_t>(op)]), place[static_cast<size_t>(op)]);
    }
    place[i] = moves[i] && latest ? Place{latest->start, latest->depth + 1, i} : Place{i, 0, i};
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::ranges::sort(order, [&](size_t a, size_t b) { return place[a] < place[b]; });
  // Moved: ahead of an instruction that was before it.
  int64_t moved = 0;
  size_t earliest_after = n;
  for (size_t j = n; j-- > 0;) {
    moved += order[j] > earliest_after;
    earliest_after = std::min(earliest_after, order[j]);
  }
  if (moved == 0) return 0;
  std::vector<int64_t> renumber(n);
  std::vector<HloInst> reordered;
  reordered.reserve(n);
  for (size_t at : order) {
    renumber[at] = static_cast<int64_t>(reordered.size());
    reordered.push_back(std::move(module.insts[at]));
  }
  module.insts = std::move(reordered);
  ForwardUses(module, renumber);
  return moved;
}

}  // namespace lazyrt::pjrt
