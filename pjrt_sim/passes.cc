#include "pjrt_sim/passes.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pjrt_sim/element_ops.h"

namespace lazyrt::pjrt {
namespace {

std::atomic<int64_t> g_passes_run{0};

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

bool IsSplat(const HloInst& inst, double value) { return inst.opcode == proto::CONSTANT && inst.value == value; }

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

// Calls f.template operator()<T>() with T the type `type` computes in.
template <typename F>
decltype(auto) WithComputeType(PrimitiveType type, F&& f) {
  switch (type) {
    case PrimitiveType::kF64: return f.template operator()<double>();
    case PrimitiveType::kS32: return f.template operator()<int32_t>();
    case PrimitiveType::kS64: return f.template operator()<int64_t>();
    case PrimitiveType::kPred: return f.template operator()<uint8_t>();
    default: return f.template operator()<float>();
  }
}

// A value as stored in `type` and read back: what a kernel would load.
double RoundTo(PrimitiveType type, double v) {
  switch (type) {
    case PrimitiveType::kBF16: return Bf16ToFloat(FloatToBf16(static_cast<float>(v)));
    case PrimitiveType::kF16: return HalfToFloat(FloatToHalf(static_cast<float>(v)));
    default: return WithComputeType(type, [&]<typename T>() { return static_cast<double>(SaturatingCast<T>(v)); });
  }
}

}  // namespace

int64_t CompilerPassesRun() { return g_passes_run.load(); }
void CountPassRun() { g_passes_run.fetch_add(1); }

int64_t EliminateDeadCode(HloModule& module) {
  const size_t n = module.insts.size();
  std::vector<bool> live(n, false);
  for (int64_t out : module.outputs) live[static_cast<size_t>(out)] = true;
  for (size_t i = n; i-- > 0;) {
    if (module.insts[i].opcode == proto::PARAMETER) live[i] = true;
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
    if (inst.opcode == proto::PARAMETER) continue;
    // The value by its bits: StrCat(double) keeps only 6 significant digits, which would merge
    // constants 1 and 1.0000001.
    const std::string key = absl::StrCat(
        inst.opcode, "|", absl::StrJoin(inst.operands, ","), "|", inst.shape.ToString(), "|",
        std::bit_cast<uint64_t>(inst.value), "|",
        absl::StrJoin(inst.dims, ","), "|", absl::StrJoin(inst.start, ","), "|", absl::StrJoin(inst.limit, ","),
        "|", absl::StrJoin(inst.stride, ","), "|", inst.axis, "|", inst.direction, "|", inst.stream, "|",
        inst.transpose_lhs, inst.transpose_rhs);
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
    const bool same_as_operand0 = !inst.operands.empty() && operand(0).shape == inst.shape;
    switch (inst.opcode) {
      case proto::ADD:
        if (IsSplat(operand(1), 0) && same_as_operand0) replace_with(inst.operands[0]);
        else if (IsSplat(operand(0), 0) && operand(1).shape == inst.shape) replace_with(inst.operands[1]);
        break;
      case proto::SUBTRACT:
        if (IsSplat(operand(1), 0) && same_as_operand0) replace_with(inst.operands[0]);
        break;
      case proto::MULTIPLY:
        if (IsSplat(operand(1), 1) && same_as_operand0) replace_with(inst.operands[0]);
        else if (IsSplat(operand(0), 1) && operand(1).shape == inst.shape) replace_with(inst.operands[1]);
        break;
      case proto::DIVIDE:
        if (IsSplat(operand(1), 1) && same_as_operand0) replace_with(inst.operands[0]);
        break;
      case proto::NEGATE:
        if (operand(0).opcode == proto::NEGATE) replace_with(operand(0).operands[0]);
        break;
      case proto::CONVERT:
        if (same_as_operand0) replace_with(inst.operands[0]);
        break;
      case proto::RESHAPE:
        if (same_as_operand0) {
          replace_with(inst.operands[0]);
        } else if (operand(0).opcode == proto::RESHAPE) {
          inst.operands[0] = operand(0).operands[0];
          ++changes;
        }
        break;
      case proto::TRANSPOSE:
        if (IsIdentityPermutation(inst.dims)) {
          replace_with(inst.operands[0]);
        } else if (operand(0).opcode == proto::TRANSPOSE) {
          // result dim d = inner's dim dims[d] = source dim inner.dims[dims[d]].
          std::vector<int64_t> composed(inst.dims.size());
          for (size_t d = 0; d < composed.size(); ++d) {
            composed[d] = operand(0).dims[static_cast<size_t>(inst.dims[d])];
          }
          inst.operands[0] = operand(0).operands[0];
          inst.dims = composed;
          ++changes;
          if (IsIdentityPermutation(inst.dims)) forward[i] = inst.operands[0];
        } else if (operand(0).opcode == proto::DOT && SwapsLastTwoDims(inst.dims) &&
                   uses[static_cast<size_t>(inst.operands[0])] == 1) {
          // (A B)^T = B^T A^T: the product computes the transposed result directly, written
          // contiguously, instead of being written and then read back with a stride.
          const HloInst dot = operand(0);
          inst.opcode = proto::DOT;
          inst.operands = {dot.operands[1], dot.operands[0]};
          inst.transpose_lhs = !dot.transpose_rhs;
          inst.transpose_rhs = !dot.transpose_lhs;
          inst.dims.clear();
          ++changes;
        }
        break;
      case proto::BROADCAST:
        if (same_as_operand0) {
          replace_with(inst.operands[0]);
        } else if (operand(0).opcode == proto::CONSTANT) {
          // A broadcast splat is a splat of the bigger shape.
          inst.opcode = proto::CONSTANT;
          inst.value = operand(0).value;
          inst.operands.clear();
          inst.dims.clear();
          ++changes;
        }
        break;
      case proto::SLICE:
        if (same_as_operand0) replace_with(inst.operands[0]);
        break;
      case proto::REDUCE_SUM:
      case proto::REDUCE_MAX:
        if (inst.dims.empty()) replace_with(inst.operands[0]);
        break;
      case proto::DOT:
        // dot(transpose(a), b) with only the last two dims swapped reads a transposed instead.
        for (size_t k = 0; k < 2; ++k) {
          const HloInst& t = operand(k);
          if (t.opcode != proto::TRANSPOSE || !SwapsLastTwoDims(t.dims)) continue;
          inst.operands[k] = t.operands[0];
          (k == 0 ? inst.transpose_lhs : inst.transpose_rhs) ^= true;
          ++changes;
        }
        break;
      default: break;
    }
  }
  for (int64_t& out : module.outputs) out = forward[static_cast<size_t>(out)];
  return changes;
}

int64_t FoldConstants(HloModule& module) {
  int64_t changes = 0;
  for (HloInst& inst : module.insts) {
    if (inst.operands.empty() || inst.opcode == proto::RNG_UNIFORM || inst.opcode == proto::RNG_NORMAL) continue;
    bool all_splat = true;
    for (int64_t op : inst.operands) all_splat = all_splat && module.insts[static_cast<size_t>(op)].opcode == proto::CONSTANT;
    // A reduction over an empty dimension yields its identity, not the splat.
    if (!all_splat || (inst.opcode == proto::REDUCE_MAX && module.insts[static_cast<size_t>(inst.operands[0])].shape.numel() == 0)) {
      continue;
    }
    auto arg_type = [&](size_t k) { return module.insts[static_cast<size_t>(inst.operands[k])].shape.type; };
    // An operand as a kernel would load it: a module constant's value need not be representable in its
    // type (0.1 as f32 or bf16, 2 as pred, 3e9 as s32), and the kernel rounds it first.
    auto arg = [&](size_t k) { return RoundTo(arg_type(k), module.insts[static_cast<size_t>(inst.operands[k])].value); };
    double value;
    if (IsUnary(inst.opcode) && inst.opcode != proto::CONVERT) {
      value = WithComputeType(inst.shape.type, [&]<typename T>() {
        return static_cast<double>(ApplyUnary<T>(inst.opcode, static_cast<T>(arg(0))));
      });
    } else if (inst.opcode == proto::CONVERT) {
      value = WithComputeType(inst.shape.type, [&]<typename T>() { return static_cast<double>(SaturatingCast<T>(arg(0))); });
    } else if (inst.opcode == proto::COMPARE) {
      value = WithComputeType(arg_type(0), [&]<typename T>() {
        return static_cast<double>(ApplyCompare<T>(inst.direction, static_cast<T>(arg(0)), static_cast<T>(arg(1))));
      });
    } else if (IsBinary(inst.opcode)) {
      value = WithComputeType(inst.shape.type, [&]<typename T>() {
        return static_cast<double>(ApplyBinary<T>(inst.opcode, static_cast<T>(arg(0)), static_cast<T>(arg(1))));
      });
    } else if (inst.opcode == proto::SELECT) {
      value = arg(0) != 0 ? arg(1) : arg(2);
    } else if (inst.opcode == proto::RESHAPE || inst.opcode == proto::TRANSPOSE || inst.opcode == proto::BROADCAST ||
               inst.opcode == proto::SLICE || inst.opcode == proto::REDUCE_MAX) {
      value = arg(0);  // a splat stays a splat
    } else {
      continue;  // sums of splats, dots, gathers...: left to the kernels
    }
    // A constant holds a double: an s64 result of magnitude 2^53 or more may have lost its low bits
    // already, so leave it to the kernel.
    if (inst.shape.type == PrimitiveType::kS64 && std::fabs(value) >= 0x1p53) continue;
    inst.opcode = proto::CONSTANT;
    inst.value = RoundTo(inst.shape.type, value);
    inst.operands.clear();
    inst.dims.clear();
    ++changes;
  }
  return changes;
}

}  // namespace lazyrt::pjrt
