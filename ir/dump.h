// Human-readable views of a graph: a text listing and a Graphviz dot file.
#pragma once

#include <span>
#include <string>

#include "ir/node.h"

namespace lazyrt::ir {

// One line per node in post-order ("%3 = Add(%1, %2) : f32[2,3]"), DeviceData leaves numbered as
// parameters, then the roots and the DAG hash.
std::string GraphText(std::span<const Value> roots);
// A Graphviz digraph, edges from operand to user.
std::string GraphDot(std::span<const Value> roots);

}  // namespace lazyrt::ir
