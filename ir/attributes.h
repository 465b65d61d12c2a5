// Typed node attributes: the static parameters of an op (dimensions, flags, a constant's value).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <variant>
#include <vector>
#include "absl/strings/string_view.h"

#include "ir/dtype.h"
#include "ir/hash.h"

namespace lazyrt::ir {

// Node hashes (the persistent cache's graph keys) take a key's number: append new keys, never insert or
// reorder (NodeHash.IsStableAcrossBuildsAndOpListChanges pins some).
enum class AttrKey : uint8_t {
  kAxes,         // vector: the dims a reduction reduces (sorted)
  kPermutation,  // vector: Permute: result dim i is operand dim permutation[i]
  kSizes,        // vector: Reshape/Expand target sizes
  kKeepDim,      // bool: reductions keep reduced dims as size 1
  kDType,        // DType: Convert target
  kAxis,         // int: concat, index_select, gather, softmax, argmax, cumsum, argsort
  kStart,        // vector: slice starts
  kLimit,        // vector: slice limits (exclusive)
  kStride,       // vector: slice strides
  kNumClasses,   // int: one_hot
  kValue,        // double: a Constant's value (static scalars only)
  kStream,       // int: which random stream of the step an Rng op draws from
  kApproximate,  // bool: Gelu uses the tanh approximation instead of erf
  kScale,        // double: Attention's factor of the scores q k^T
  kCausal,       // bool: Attention masks the keys after each query (top-left aligned)
  kEpsilon,      // double: LayerNorm, RmsNorm (and their gradients) add it to the variance
  kDescending,   // bool: Argsort orders from the largest
  kDropout,      // double: Attention's dropout probability (its seed the last operand, its stream kStream)
  // Shard (mark_sharding): the operand's value laid out over a device mesh. The mesh's axis sizes and its
  // devices (row-major over the mesh), and for each dim of the value the mesh axis it is split over (-1:
  // not split).
  kMeshShape,
  kMeshDevices,
  kShardAxes,
  kBeta,    // double: AdamWMoment's decay of the moment (beta1, beta2)
  kSquare,  // bool: AdamWMoment averages the squared gradient (the second moment)
};

absl::string_view AttrKeyName(AttrKey key);

using AttrValue = std::variant<int64_t, double, bool, std::vector<int64_t>, DType>;

class Attributes {
 public:
  struct Entry {
    AttrKey key;
    AttrValue value;
  };

  Attributes() = default;
  Attributes(std::initializer_list<Entry> entries);

  Attributes& Set(AttrKey key, AttrValue value);
  // The value under `key`, which must be present with type T (a programming error otherwise).
  template <typename T>
  const T& Get(AttrKey key) const {
    return std::get<T>(Lookup(key)->value);
  }
  template <typename T>
  const T* Find(AttrKey key) const {
    const Entry* e = Lookup(key);
    return e ? std::get_if<T>(&e->value) : nullptr;
  }
  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }

  void HashInto(Hasher& hasher) const;
  // "dims=[0,1] keepdim=true"
  std::string ToString() const;

  friend bool operator==(const Attributes& a, const Attributes& b);

 private:
  const Entry* Lookup(AttrKey key) const;
  // Sorted by key, each once: equal attributes hash, print and compare alike whatever the order they
  // were set in.
  std::vector<Entry> entries_;
};

std::string AttrValueToString(const AttrValue& value);

}  // namespace lazyrt::ir
