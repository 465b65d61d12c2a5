// A graph's structure in plain data, kept for graphs that were compiled, so a later recompile can be
// explained: the first node where two graphs differ, what differs, and where the user created it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/post_order.h"

namespace lazyrt::ir {

struct NodeSignature {
  std::string op;
  std::string shape;       // "f32[128,10]" (all outputs, comma-separated)
  std::string attributes;  // Attributes::ToString()
  std::vector<uint32_t> operands;
  std::string created_at;  // "file.cpp:42"
};

using GraphSignature = std::vector<NodeSignature>;

GraphSignature SignatureOf(const PostOrder& order);

struct GraphDifference {
  bool differs = false;
  size_t node = 0;    // index in post-order
  std::string what;   // "constant value", "shape", "op", "attribute", "structure"
  std::string before;
  std::string now;
  std::string created_at;  // where the differing node of the newer graph was created
};

// Why `now` differs from `before`: the root causes, walking both in post-order. A root cause is a node
// that differs itself (its op, a constant's value, an attribute, or a leaf's shape) while every
// operand is unchanged; nodes that only inherit a change are not listed. When the graphs' structure
// differs (a different op or operand wiring, or a different size) that first difference is the only
// entry. Empty when the graphs are equal.
std::vector<GraphDifference> RootCauses(const GraphSignature& before, const GraphSignature& now);

// "path/to/file.cpp:42" -> the same with the path shortened to what the user wrote.
std::string LocationText(const std::source_location& where);

}  // namespace lazyrt::ir
