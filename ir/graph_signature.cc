#include "ir/graph_signature.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace lazyrt::ir {

std::string LocationText(const std::source_location& where) {
  if (where.file_name() == nullptr || where.file_name()[0] == '\0') return "";
  return absl::StrCat(where.file_name(), ":", where.line());
}

GraphSignature SignatureOf(const PostOrder& order) {
  GraphSignature sig;
  sig.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const Node* n = order.nodes()[i];
    NodeSignature s;
    s.op = std::string(OpKindName(n->op()));
    for (size_t o = 0; o < n->num_outputs(); ++o) absl::StrAppend(&s.shape, o ? "," : "", n->shape(o).ToString());
    s.attributes = n->attrs().ToString();
    const auto positions = order.operand_positions(i);
    s.operands.assign(positions.begin(), positions.end());
    s.created_at = LocationText(n->created_at());
    sig.push_back(std::move(s));
  }
  return sig;
}

std::vector<GraphDifference> RootCauses(const GraphSignature& before, const GraphSignature& now) {
  std::vector<GraphDifference> causes;
  const size_t common = std::min(before.size(), now.size());
  std::vector<bool> changed(common, false);
  auto structure = [&](size_t i, std::string was, std::string is, const std::string& where) {
    GraphDifference d;
    d.differs = true;
    d.node = i;
    d.what = "structure";
    d.before = std::move(was);
    d.now = std::move(is);
    d.created_at = where;
    return std::vector<GraphDifference>{d};
  };
  for (size_t i = 0; i < common; ++i) {
    const NodeSignature& a = before[i];
    const NodeSignature& b = now[i];
    if (a.op != b.op) return structure(i, absl::StrCat(a.op, " ", a.shape), absl::StrCat(b.op, " ", b.shape), b.created_at);
    if (a.operands != b.operands) {
      return structure(i, absl::StrCat(a.op, " reading other operands"), absl::StrCat(b.op, " reading other operands"),
                       b.created_at);
    }
    bool inherited = false;
    for (uint32_t o : b.operands) inherited = inherited || (o < common && changed[o]);
    // A node whose operands changed follows them (its shape, and attributes derived from shapes such as
    // reshape sizes); only a node with unchanged operands can be a cause.
    const bool differs = a.attributes != b.attributes || a.shape != b.shape;
    changed[i] = inherited || differs;
    if (inherited || !differs) continue;
    GraphDifference d;
    d.differs = true;
    d.node = i;
    d.created_at = b.created_at;
    if (a.attributes != b.attributes) {
      d.what = a.op == "Constant" ? "constant value" : "attribute";
      d.before = a.attributes;
      d.now = b.attributes;
    } else {
      d.what = "shape";
      d.before = a.shape;
      d.now = b.shape;
    }
    causes.push_back(std::move(d));
  }
  // A changed shape also changes the constants computed from it (a mean's 1/n): when shapes changed,
  // they are the explanation.
  const bool shapes_changed =
      std::any_of(causes.begin(), causes.end(), [](const GraphDifference& d) { return d.what == "shape"; });
  if (shapes_changed) {
    std::erase_if(causes, [](const GraphDifference& d) { return d.what != "shape"; });
  }
  if (causes.empty() && before.size() != now.size()) {
    const GraphSignature& longer = now.size() > before.size() ? now : before;
    return structure(common, absl::StrCat(before.size(), " nodes"), absl::StrCat(now.size(), " nodes"),
                     longer[common].created_at);
  }
  return causes;
}

}  // namespace lazyrt::ir
