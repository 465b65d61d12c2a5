#include "ir/dump.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "ir/post_order.h"

namespace lazyrt::ir {
namespace {

std::string OperandName(uint32_t position, const Value& v) {
  std::string name = absl::StrCat("%", position);
  if (v.node->num_outputs() > 1) absl::StrAppend(&name, ".", v.index);
  return name;
}

}  // namespace

std::string GraphText(std::span<const Value> roots) {
  PostOrder order(roots);
  std::string out;
  size_t param = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const Node* n = order.nodes()[k];
    absl::StrAppend(&out, "%", k, " = ", OpKindName(n->op()), "(");
    for (size_t i = 0; i < n->operands().size(); ++i) {
      absl::StrAppend(&out, i ? ", " : "", OperandName(order.operand_positions(k)[i], n->operand(i)));
    }
    absl::StrAppend(&out, ")");
    if (!n->attrs().empty()) absl::StrAppend(&out, " {", n->attrs().ToString(), "}");
    absl::StrAppend(&out, " : ");
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      absl::StrAppend(&out, i ? ", " : "", n->shape(i).ToString());
    }
    if (n->op() == OpKind::kDeviceData) absl::StrAppend(&out, "  # parameter ", param++);
    out += '\n';
  }
  out += "roots:";
  for (size_t i = 0; i < roots.size(); ++i) {
    absl::StrAppend(&out, " ", OperandName(order.root_positions()[i], roots[i]));
  }
  absl::StrAppend(&out, "\nhash: ", HashToHex(order.dag_hash()), "\n");
  return out;
}

std::string GraphDot(std::span<const Value> roots) {
  PostOrder order(roots);
  std::string out = "digraph lazyrt {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (size_t k = 0; k < order.size(); ++k) {
    const Node* n = order.nodes()[k];
    std::string label = absl::StrCat(OpKindName(n->op()));
    if (!n->attrs().empty()) {
      absl::StrAppend(&label, "\\n", absl::StrReplaceAll(n->attrs().ToString(), {{"\"", "\\\""}}));
    }
    absl::StrAppend(&label, "\\n", n->shape().ToString());
    absl::StrAppend(&out, "  n", k, " [label=\"", label, "\"");
    if (n->op() == OpKind::kDeviceData) absl::StrAppend(&out, ", style=filled, fillcolor=lightgrey");
    out += "];\n";
    for (uint32_t operand : order.operand_positions(k)) {
      absl::StrAppend(&out, "  n", operand, " -> n", k, ";\n");
    }
  }
  for (uint32_t root : order.root_positions()) absl::StrAppend(&out, "  n", root, " [peripheries=2];\n");
  out += "}\n";
  return out;
}

}  // namespace lazyrt::ir
