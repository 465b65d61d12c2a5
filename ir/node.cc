#include "ir/node.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace lazyrt::ir {

namespace {
std::atomic<CreationContextHook> creation_context_hook{nullptr};
}  // namespace

void SetCreationContextHook(CreationContextHook hook) { creation_context_hook.store(hook, std::memory_order_release); }

const Shape& Value::shape() const { return node->shape(index); }

HashValue Value::hash() const { return index == 0 ? node->hash() : HashCombine(node->hash(), index); }

Node::Node(OpKind op, OperandList operands, ShapeList shapes, Attributes attrs,
           std::shared_ptr<const LeafData> leaf_data, std::source_location created_at, const char* api_name)
    : op_(op),
      hash_(0),
      operands_(std::move(operands)),
      shapes_(std::move(shapes)),
      attrs_(std::move(attrs)),
      leaf_data_(std::move(leaf_data)),
      created_at_(created_at),
      api_name_(api_name) {
  Hasher h;
  h.Add(OpKindStableId(op_));
  h.Add(static_cast<uint64_t>(operands_.size()) | (static_cast<uint64_t>(shapes_.size()) << 32));
  for (const Value& v : operands_) {
    h.Add(v.node->hash());
    h.Add(v.index);
  }
  for (const Shape& s : shapes_) {
    h.Add(static_cast<uint64_t>(s.dtype()) | (static_cast<uint64_t>(s.rank()) << 8));
    for (int64_t d : s.dims()) h.Add(static_cast<uint64_t>(d));
  }
  attrs_.HashInto(h);
  hash_ = h.Finish();
  if (CreationContextHook hook = creation_context_hook.load(std::memory_order_acquire)) creation_context_ = hook(*this);
}

Node::~Node() {
  // Take sole-owned operands out before they are destroyed recursively; then destroy them here one at a
  // time, each after its own sole-owned operands have been taken out.
  absl::InlinedVector<NodePtr, 8> doomed;
  auto take_sole_owned = [&doomed](OperandList& operands) {
    for (Value& v : operands) {
      if (v.node && v.node.use_count() == 1) doomed.push_back(std::move(v.node));
    }
  };
  take_sole_owned(operands_);
  while (!doomed.empty()) {
    NodePtr node = std::move(doomed.back());
    doomed.pop_back();
    if (node.use_count() == 1) take_sole_owned(const_cast<Node&>(*node).operands_);
  }
}

std::string Node::ToString() const {
  std::string out(OpKindName(op_));
  if (!attrs_.empty()) absl::StrAppend(&out, "{", attrs_.ToString(), "}");
  absl::StrAppend(&out, " : ");
  for (size_t i = 0; i < shapes_.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", shapes_[i].ToString());
  }
  return out;
}

}  // namespace lazyrt::ir
