// Iterative post-order traversal of the graph below a set of roots, and the graph's DAG hash.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ir/node.h"

namespace lazyrt::ir {

// Nodes below `roots`, operands before users, each once, with every operand and root named by its
// position in that order. Uses an explicit stack, so a graph of any depth is fine. Traversal marks
// live in the nodes (no hash set: this runs on every sync) and are only touched inside the
// constructor, under a process-wide lock; the finished object is plain data.
class PostOrder {
 public:
  explicit PostOrder(std::span<const Value> roots);

  std::span<const Node* const> nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }
  // Positions (in nodes()) of the operands of nodes()[i], in operand order.
  std::span<const uint32_t> operand_positions(size_t i) const {
    return std::span(operand_positions_).subspan(operand_begin_[i], operand_begin_[i + 1] - operand_begin_[i]);
  }
  // Positions of the roots, in the order given.
  std::span<const uint32_t> root_positions() const { return root_positions_; }
  // Positions of the DeviceData leaves: the graph's parameters, in post-order. Never de-duplicated
  // by value.
  std::span<const uint32_t> parameter_positions() const { return parameter_positions_; }

  // Hash of the DAG: every node's hash with its operands named by position, then the roots. Unlike a
  // root's own hash (which sees only shapes at DeviceData leaves), this tells (a+b)*a from (a+b)*b.
  HashValue dag_hash() const { return dag_hash_; }

 private:
  std::vector<const Node*> nodes_;
  std::vector<uint32_t> operand_positions_;
  std::vector<uint32_t> operand_begin_;
  std::vector<uint32_t> root_positions_;
  std::vector<uint32_t> parameter_positions_;
  HashValue dag_hash_ = 0;
};

}  // namespace lazyrt::ir
