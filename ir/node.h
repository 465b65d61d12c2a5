// The lazy IR: immutable nodes shared between tensors, referenced through Values.
#pragma once

#include <cstdint>
#include <memory>
#include <source_location>
#include <span>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "ir/attributes.h"
#include "ir/hash.h"
#include "ir/node_arena.h"
#include "ir/op_kind.h"
#include "ir/shape.h"

namespace lazyrt::ir {

class Node;
using NodePtr = std::shared_ptr<const Node>;

// One output of a node (PyTorch LTC's Value: {node, output index}).
struct Value {
  NodePtr node;
  uint32_t index = 0;

  const Shape& shape() const;
  // The node's hash mixed with the output index.
  HashValue hash() const;
  explicit operator bool() const { return node != nullptr; }
};

// The payload of a DeviceData leaf (a device buffer or a host scalar awaiting upload). Owned by the
// runtime; the IR never looks inside, and it never enters a hash.
class LeafData {
 public:
  virtual ~LeafData() = default;
};

using OperandList = absl::InlinedVector<Value, 2>;
using ShapeList = absl::InlinedVector<Shape, 1>;
// The list of one output's shape, moved in: ShapeList{shape} copies it (an initializer list's elements
// are const), a dims copy more per traced op.
inline ShapeList OneShape(Shape shape) {
  ShapeList list;
  list.push_back(std::move(shape));
  return list;
}

class Node;
// Diagnostics may tag a new node with a small id for the call stack that created it (the runtime
// above installs the hook only when diagnostics are on; 0 means "no stack"). The id lets two calls of
// one helper from different places be told apart; ir/ never looks inside it. The hook sees the node
// with every field but the id set.
using CreationContextHook = uint16_t (*)(const Node& node);
void SetCreationContextHook(CreationContextHook hook);

class Node {
 public:
  // Computes the node's hash from op, attributes, output shapes and operand hashes.
  Node(OpKind op, OperandList operands, ShapeList shapes, Attributes attrs = {},
       std::shared_ptr<const LeafData> leaf_data = nullptr,
       std::source_location created_at = std::source_location::current(), const char* api_name = nullptr);
  // Releases operand chains iteratively, so dropping a million-node chain cannot overflow the stack.
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  OpKind op() const { return op_; }
  std::span<const Value> operands() const { return operands_; }
  const Value& operand(size_t i) const { return operands_[i]; }
  size_t num_outputs() const { return shapes_.size(); }
  const Shape& shape(size_t output = 0) const { return shapes_[output]; }
  std::span<const Shape> shapes() const { return shapes_; }
  const Attributes& attrs() const { return attrs_; }
  HashValue hash() const { return hash_; }
  // Where the user's code created this node (for diagnostics).
  const std::source_location& created_at() const { return created_at_; }
  // The creation hook's id for the call stack that created this node (0 when none was captured).
  uint16_t creation_context() const { return creation_context_; }
  const std::shared_ptr<const LeafData>& leaf_data() const { return leaf_data_; }
  // The public function that made this node when it is not the op's own (embedding's rows are an
  // IndexSelect), for errors found when the graph runs; nullptr otherwise. A string literal; not part
  // of the hash.
  const char* api_name() const { return api_name_; }

  // "Mul(%0, %1) : f32[2,3]" without the operand names.
  std::string ToString() const;

 private:
  friend class PostOrder;

  // Fields a traversal touches come first, so visiting a node costs one cache line.
  OpKind op_;
  uint16_t creation_context_ = 0;  // fits beside op_ in the first word
  // Scratch state of the traversal in progress (see PostOrder), guarded by its lock.
  mutable uint32_t position_ = 0;
  mutable uint64_t visit_epoch_ = 0;
  HashValue hash_;
  OperandList operands_;
  ShapeList shapes_;
  Attributes attrs_;
  std::shared_ptr<const LeafData> leaf_data_;
  std::source_location created_at_;
  const char* api_name_ = nullptr;
};

template <typename... Args>
NodePtr MakeNode(Args&&... args) {
  // Created non-const so that ~Node may move operands out of its (sole-owned) operand nodes.
  return std::allocate_shared<Node>(NodeAllocator<Node>(), std::forward<Args>(args)...);
}

}  // namespace lazyrt::ir
