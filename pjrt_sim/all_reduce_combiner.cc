#include "pjrt_sim/all_reduce_combiner.h"

#include <functional>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "pjrt_sim/replica_groups.h"

namespace lazyrt::pjrt {
namespace {

// Which of the module's all-reduces each instruction depends on (itself included), as bits by the
// all-reduce's position in `all_reduces`.
class AllReduceAncestors {
 public:
  AllReduceAncestors(const HloModule& module, const std::vector<int64_t>& all_reduces)
      : words_((all_reduces.size() + 63) / 64), bits_(module.insts.size() * words_, 0) {
    std::vector<int64_t> ordinal(module.insts.size(), -1);
    for (size_t k = 0; k < all_reduces.size(); ++k)
      ordinal[static_cast<size_t>(all_reduces[k])] = static_cast<int64_t>(k);
    for (size_t i = 0; i < module.insts.size(); ++i) {
      for (int64_t op : module.insts[i].operands) {
        for (size_t w = 0; w < words_; ++w) bits_[i * words_ + w] |= bits_[static_cast<size_t>(op) * words_ + w];
      }
      if (ordinal[i] >= 0) Set(i, static_cast<size_t>(ordinal[i]));
    }
  }
  // Whether instruction `id` depends on the `k`-th all-reduce.
  bool DependsOn(int64_t id, size_t k) const {
    return ((bits_[static_cast<size_t>(id) * words_ + k / 64] >> (k % 64)) & 1U) != 0;
  }

 private:
  void Set(size_t id, size_t k) { bits_[id * words_ + k / 64] |= uint64_t{1} << (k % 64); }
  size_t words_;
  std::vector<uint64_t> bits_;
};

struct Bucket {
  std::vector<size_t> members;  // positions in `all_reduces`, in instruction order
  int64_t bytes = 0;
};

// What must agree for all-reduces to be one collective.
using BucketKey = std::tuple<Combiner, PrimitiveType, ReplicaGroups>;

// Buckets in instruction order. An all-reduce joins the open bucket of its key unless that would pass
// the threshold. Every open bucket holding an all-reduce it depends on is closed first: a bucket then
// only ever depends on buckets closed before it, so combining cannot make a cycle (two buckets each
// waiting for the other's result).
std::vector<Bucket> FormBuckets(const HloModule& module, const std::vector<int64_t>& all_reduces,
                                int64_t threshold_bytes) {
  const AllReduceAncestors ancestors(module, all_reduces);
  std::vector<Bucket> buckets;
  std::map<BucketKey, size_t> open;  // key -> index in `buckets`
  for (size_t k = 0; k < all_reduces.size(); ++k) {
    const HloInst& inst = module.insts[static_cast<size_t>(all_reduces[k])];
    for (auto it = open.begin(); it != open.end();) {
      bool depends = false;
      for (size_t m : buckets[it->second].members) depends = depends || ancestors.DependsOn(all_reduces[k], m);
      it = depends ? open.erase(it) : std::next(it);
    }
    const int64_t bytes = inst.shape.byte_size();
    BucketKey key{inst.combiner, inst.shape.type, inst.replica_groups};
    auto it = open.find(key);
    if (it != open.end() && buckets[it->second].bytes + bytes > threshold_bytes) {
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) {
      buckets.emplace_back();
      it = open.emplace(std::move(key), buckets.size() - 1).first;
    }
    buckets[it->second].members.push_back(k);
    buckets[it->second].bytes += bytes;
  }
  return buckets;
}

// Appends an instruction of `opcode` with `operands` and `shape` (its other attributes as `set` leaves
// them) and returns its id.
int64_t Append(HloModule& module, Opcode opcode, std::vector<int64_t> operands, ArrayShape shape,
               const std::function<void(HloInst&)>& set = {}) {
  HloInst inst;
  inst.opcode = opcode;
  inst.operands = std::move(operands);
  inst.shape = std::move(shape);
  if (set) set(inst);
  module.insts.push_back(std::move(inst));
  return static_cast<int64_t>(module.insts.size()) - 1;
}

int64_t AppendReshape(HloModule& module, int64_t operand, ArrayShape shape) {
  if (module.insts[static_cast<size_t>(operand)].shape.dims == shape.dims) return operand;
  return Append(module, Opcode::kReshape, {operand}, std::move(shape));
}

// Appends the combined all-reduce of `members` (instruction ids, same key) and, for each member, its
// piece of the result in the member's shape; returns those pieces' ids.
std::vector<int64_t> AppendCombined(HloModule& module, const std::vector<int64_t>& members) {
  const HloInst& first = module.insts[static_cast<size_t>(members[0])];
  const Combiner combiner = first.combiner;
  const ReplicaGroups groups = first.replica_groups;
  const PrimitiveType type = first.shape.type;
  std::vector<int64_t> flat;
  int64_t total = 0;
  for (int64_t m : members) {
    const HloInst& inst = module.insts[static_cast<size_t>(m)];
    const int64_t n = inst.shape.numel();
    flat.push_back(AppendReshape(module, inst.operands[0], ArrayShape{inst.shape.type, {n}}));
    total += n;
  }
  const ArrayShape whole{type, {total}};
  const int64_t concat = Append(module, Opcode::kConcatenate, flat, whole, [](HloInst& c) { c.axis = 0; });
  const int64_t reduced = Append(module, Opcode::kAllReduce, {concat}, whole, [&](HloInst& r) {
    r.combiner = combiner;
    r.replica_groups = groups;
  });
  std::vector<int64_t> pieces;
  int64_t offset = 0;
  for (int64_t m : members) {
    const ArrayShape shape = module.insts[static_cast<size_t>(m)].shape;
    const int64_t n = shape.numel();
    const int64_t piece = Append(module, Opcode::kSlice, {reduced}, ArrayShape{shape.type, {n}}, [&](HloInst& s) {
      s.start = {offset};
      s.limit = {offset + n};
      s.stride = {1};
    });
    pieces.push_back(AppendReshape(module, piece, shape));
    offset += n;
  }
  return pieces;
}

// Reorders the instructions so that operands come before users again (a depth-first post order that
// visits roots in id order, so instructions move only as far as their new operands require) and
// renumbers them.
void SortTopologically(HloModule& module) {
  const size_t n = module.insts.size();
  std::vector<int64_t> renumber(n, -1);
  std::vector<bool> entered(n, false);
  std::vector<HloInst> sorted;
  sorted.reserve(n);
  std::vector<std::pair<int64_t, size_t>> stack;  // (instruction, next operand to visit)
  for (size_t root = 0; root < n; ++root) {
    if (entered[root]) continue;
    entered[root] = true;
    stack.emplace_back(static_cast<int64_t>(root), 0);
    while (!stack.empty()) {
      auto& [id, next] = stack.back();
      const std::vector<int64_t>& operands = module.insts[static_cast<size_t>(id)].operands;
      if (next < operands.size()) {
        const int64_t op = operands[next++];
        if (!entered[static_cast<size_t>(op)]) {
          entered[static_cast<size_t>(op)] = true;
          stack.emplace_back(op, 0);
        }
        continue;
      }
      renumber[static_cast<size_t>(id)] = static_cast<int64_t>(sorted.size());
      sorted.push_back(std::move(module.insts[static_cast<size_t>(id)]));
      stack.pop_back();
    }
  }
  for (HloInst& inst : sorted) {
    for (int64_t& op : inst.operands) op = renumber[static_cast<size_t>(op)];
  }
  for (int64_t& out : module.outputs) out = renumber[static_cast<size_t>(out)];
  module.insts = std::move(sorted);
}

}  // namespace

int64_t CombineAllReduces(HloModule& module, int64_t threshold_bytes) {
  if (threshold_bytes <= 0) return 0;
  std::vector<int64_t> all_reduces;
  for (size_t i = 0; i < module.insts.size(); ++i) {
    const HloInst& inst = module.insts[i];
    if (inst.opcode == Opcode::kAllReduce && inst.shape.numel() > 0) all_reduces.push_back(static_cast<int64_t>(i));
  }
  const size_t original = module.insts.size();
  std::vector<int64_t> forward(original);
  for (size_t i = 0; i < original; ++i) forward[i] = static_cast<int64_t>(i);
  int64_t removed = 0;
  for (const Bucket& bucket : FormBuckets(module, all_reduces, threshold_bytes)) {
    if (bucket.members.size() < 2) continue;
    std::vector<int64_t> members;
    for (size_t k : bucket.members) members.push_back(all_reduces[k]);
    const std::vector<int64_t> pieces = AppendCombined(module, members);
    for (size_t j = 0; j < members.size(); ++j) forward[static_cast<size_t>(members[j])] = pieces[j];
    removed += static_cast<int64_t>(members.size()) - 1;
  }
  if (removed == 0) return 0;
  // Every use of a combined all-reduce now reads its piece (the replaced ones are left without users).
  for (size_t i = 0; i < original; ++i) {
    for (int64_t& op : module.insts[i].operands) op = forward[static_cast<size_t>(op)];
  }
  for (int64_t& out : module.outputs) out = forward[static_cast<size_t>(out)];
  SortTopologically(module);
  return removed;
}

}  // namespace lazyrt::pjrt
