#include "ir/post_order.h"

#include <mutex>

namespace lazyrt::ir {
namespace {

std::mutex& TraversalMutex() {
  static auto& mu = *new std::mutex;  // never destroyed, as the vectors below
  return mu;
}

uint64_t g_epoch = 0;    // guarded by TraversalMutex
size_t g_last_size = 0;  // size of the previous traversal: steps repeat, so it predicts the next

}  // namespace

PostOrder::PostOrder(std::span<const Value> roots) {
  std::lock_guard<std::mutex> lock(TraversalMutex());
  const uint64_t epoch = ++g_epoch;
  // Each stack entry is a node to expand (visit its operands) or, once expanded, to place. A node's
  // operands are pushed together, in reverse so that operand 0 is expanded first: the order is the
  // recursive one, and the operands' cache lines are fetched side by side rather than one after
  // another along a chain.
  struct Entry {
    const Node* node;
    bool expanded;
  };
  // Working vectors are locals, so the compiler keeps their ends in registers (members and statics
  // would be stored and reloaded around every write through a node); the statics only keep their
  // capacity from one traversal to the next.
  // (Never destroyed: a sync may run from an exit handler, after function statics are gone.)
  static auto& spare_stack = *new std::vector<Entry>;     // guarded by TraversalMutex
  static auto& spare_words = *new std::vector<uint64_t>;  // likewise: what the DAG hash hashes
  std::vector<Entry> stack = std::move(spare_stack);
  std::vector<uint64_t> words = std::move(spare_words);
  std::vector<const Node*> nodes;
  std::vector<uint32_t> operand_positions, operand_begin, parameter_positions;
  words.clear();
  words.reserve(g_last_size * 3 + roots.size() + 1);
  nodes.reserve(g_last_size);
  operand_positions.reserve(g_last_size * 2);
  operand_begin.reserve(g_last_size + 1);
  for (const Value& root : roots) {
    stack.push_back({root.node.get(), false});
    while (!stack.empty()) {
      const Entry entry = stack.back();
      stack.pop_back();
      const Node* node = entry.node;
      const std::span<const Value> operands = node->operands_;
      if (!entry.expanded) {
        if (node->visit_epoch_ == epoch) continue;  // reached again through another user
        node->visit_epoch_ = epoch;
        stack.push_back({node, true});
        for (size_t i = operands.size(); i-- > 0;) {
          const Node* child = operands[i].node.get();
          if (child->visit_epoch_ != epoch) stack.push_back({child, false});
        }
        continue;
      }
      // Every operand is placed already: name it by position now, while the node is in cache, and
      // add the node to the DAG hash's input.
      const uint32_t position = static_cast<uint32_t>(nodes.size());
      node->position_ = position;
      nodes.push_back(node);
      operand_begin.push_back(static_cast<uint32_t>(operand_positions.size()));
      words.push_back(node->hash());
      for (const Value& v : operands) {
        operand_positions.push_back(v.node->position_);
        words.push_back((static_cast<uint64_t>(v.node->position_) << 32) | v.index);
      }
      if (node->op() == OpKind::kDeviceData) parameter_positions.push_back(position);
    }
  }
  operand_begin.push_back(static_cast<uint32_t>(operand_positions.size()));
  words.push_back(roots.size());
  for (const Value& root : roots) {
    root_positions_.push_back(root.node->position_);
    words.push_back((static_cast<uint64_t>(root.node->position_) << 32) | root.index);
  }
  dag_hash_ = HashBytes(words.data(), words.size() * sizeof(uint64_t));
  g_last_size = nodes.size();
  nodes_ = std::move(nodes);
  operand_positions_ = std::move(operand_positions);
  operand_begin_ = std::move(operand_begin);
  parameter_positions_ = std::move(parameter_positions);
  spare_stack = std::move(stack);
  spare_words = std::move(words);
}

}  // namespace lazyrt::ir
