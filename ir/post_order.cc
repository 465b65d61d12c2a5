#include "ir/post_order.h"

#include <mutex>

namespace lazyrt::ir {
namespace {

std::mutex& TraversalMutex() {
  static std::mutex mu;
  return mu;
}

uint64_t g_epoch = 0;          // guarded by TraversalMutex
size_t g_last_size = 0;        // size of the previous traversal: steps repeat, so it predicts the next

}  // namespace

PostOrder::PostOrder(std::span<const Value> roots) {
  std::lock_guard<std::mutex> lock(TraversalMutex());
  const uint64_t epoch = ++g_epoch;
  struct Frame {
    const Node* node;
    size_t next_operand;
  };
  static std::vector<Frame> stack;     // guarded by TraversalMutex; keeps its capacity across syncs
  static std::vector<uint64_t> words;  // likewise: what the DAG hash hashes
  words.clear();
  words.reserve(g_last_size * 3 + roots.size() + 1);
  nodes_.reserve(g_last_size);
  operand_positions_.reserve(g_last_size * 2);
  operand_begin_.reserve(g_last_size + 1);
  for (const Value& root : roots) {
    const Node* r = root.node.get();
    if (r->visit_epoch_ == epoch) continue;
    r->visit_epoch_ = epoch;
    stack.push_back({r, 0});
    while (!stack.empty()) {
      Frame& top = stack.back();
      const Node* node = top.node;
      if (top.next_operand < node->operands_.size()) {
        const Node* child = node->operands_[top.next_operand++].node.get();
        if (child->visit_epoch_ != epoch) {
          child->visit_epoch_ = epoch;
          stack.push_back({child, 0});  // invalidates `top`; it is not used again this iteration
        }
        continue;
      }
      stack.pop_back();
      // Every operand is placed already: name it by position now, while the node is in cache, and
      // add the node to the DAG hash's input.
      const uint32_t position = static_cast<uint32_t>(nodes_.size());
      node->position_ = position;
      nodes_.push_back(node);
      operand_begin_.push_back(static_cast<uint32_t>(operand_positions_.size()));
      words.push_back(node->hash());
      for (const Value& v : node->operands_) {
        operand_positions_.push_back(v.node->position_);
        words.push_back((static_cast<uint64_t>(v.node->position_) << 32) | v.index);
      }
      if (node->op() == OpKind::kDeviceData) parameter_positions_.push_back(position);
    }
  }
  operand_begin_.push_back(static_cast<uint32_t>(operand_positions_.size()));
  words.push_back(roots.size());
  for (const Value& root : roots) {
    root_positions_.push_back(root.node->position_);
    words.push_back((static_cast<uint64_t>(root.node->position_) << 32) | root.index);
  }
  dag_hash_ = HashBytes(words.data(), words.size() * sizeof(uint64_t));
  g_last_size = nodes_.size();
}

}  // namespace lazyrt::ir
