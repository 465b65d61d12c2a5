// A graph's structure in plain data, kept for graphs that were compiled, so a later recompile can be
// explained: which nodes differ between two graphs, what differs, and where the user created them.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "ir/post_order.h"

namespace lazyrt::ir {

struct NodeSignature {
  std::string op;
  std::string shape;       // "f32[128,10]" (all outputs, comma-separated)
  std::string attributes;  // Attributes::ToString()
  std::vector<uint32_t> operands;
  std::string created_at;  // "file.cpp:42"
  uint16_t context = 0;    // Node::creation_context(): which call stack created it (0: unknown)
  bool leaf = false;       // DeviceData: an input of the graph
};

using GraphSignature = std::vector<NodeSignature>;

GraphSignature SignatureOf(const PostOrder& order);

// What a root cause changed.
enum class DifferenceKind : uint8_t {
  kConstantValue,  // a constant baked into the graph (a static scalar) has another value
  kShape,          // a node whose operands are unchanged (an input, a factory) has another shape
  kAttribute,      // another attribute (dims, an axis) on unchanged operands
  kPresence,       // the node exists in only one of the graphs (an optional input, a branch taken)
  kStructure,      // the same node reads other operands
};
const char* DifferenceKindName(DifferenceKind kind);  // "constant value", "shape", ...

struct GraphDifference {
  DifferenceKind kind = DifferenceKind::kStructure;
  size_t node = 0;     // index in the post-order of the graph that has it (the newer one unless absent there)
  std::string before;  // for kPresence: "present" or "absent"
  std::string now;
  std::string created_at;  // where the differing node was created
  uint16_t context = 0;    // and by which call stack
  bool leaf = false;       // the node is an input of the graph
  // kPresence of nodes one place creates several of (a loop over parameters): which of them is which
  // cannot be told, so the cause is their number ("3 nodes" -> "5 nodes"), once per place.
  bool repeated = false;
  // Identifies the node across graphs: its creation site and op, and which of the nodes sharing those
  // it is (in post-order). Equal ids in two comparisons mean the same place in the user's program.
  std::string id;
};

struct GraphComparison {
  // The root causes: nodes that differ themselves while every operand is unchanged (nodes that only
  // inherit a change are not listed), in post-order. Empty when the graphs are equal. A changed shape
  // also changes constants computed from it (a mean's 1/n): both are listed; telling which follows
  // from which needs more graphs than two (see lazy/diagnostics.cc).
  std::vector<GraphDifference> causes;
  // Nodes of `now` paired with a node of `before` (created at the same place by the same op), over the
  // larger graph's size: 1 for graphs that differ only in values or shapes, near 0 for unrelated programs.
  double similarity = 1;
};

// Compares two graphs node by node. Nodes are paired by where they were created (file:line and call
// stack), op, and rank among the nodes sharing those, so an input that comes and goes or a branch that
// adds nodes shifts nothing else: each is one cause, not a cascade.
GraphComparison CompareGraphs(const GraphSignature& before, const GraphSignature& now);

// The root causes of CompareGraphs, kept for existing callers.
std::vector<GraphDifference> RootCauses(const GraphSignature& before, const GraphSignature& now);

// "file.cpp:42", the path as DisplayPath shows it; "" when unknown.
std::string LocationText(const std::source_location& where);
// A source path as a user reads it: relative to the working directory when under it, else relative
// to the source root that built lazyrt when under that, else unchanged. The same rule for every file,
// the user's and lazyrt's alike.
std::string DisplayPath(std::string_view path);

}  // namespace lazyrt::ir
