#include "ir/attributes.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lazyrt::ir {

absl::string_view AttrKeyName(AttrKey key) {
  switch (key) {
    case AttrKey::kAxes: return "axes";
    case AttrKey::kPermutation: return "permutation";
    case AttrKey::kSizes: return "sizes";
    case AttrKey::kKeepDim: return "keepdim";
    case AttrKey::kDType: return "dtype";
    case AttrKey::kAxis: return "axis";
    case AttrKey::kStart: return "start";
    case AttrKey::kLimit: return "limit";
    case AttrKey::kStride: return "stride";
    case AttrKey::kNumClasses: return "num_classes";
    case AttrKey::kValue: return "value";
    case AttrKey::kStream: return "stream";
    case AttrKey::kApproximate: return "approximate";
    case AttrKey::kScale: return "scale";
    case AttrKey::kCausal: return "causal";
    case AttrKey::kEpsilon: return "epsilon";
    case AttrKey::kDescending: return "descending";
    case AttrKey::kDropout: return "dropout";
    case AttrKey::kMeshShape: return "mesh_shape";
    case AttrKey::kMeshDevices: return "mesh_devices";
    case AttrKey::kShardAxes: return "shard_axes";
    case AttrKey::kBeta: return "beta";
    case AttrKey::kSquare: return "square";
  }
  return "?";
}

Attributes::Attributes(std::initializer_list<Entry> entries) {
  for (const Entry& e : entries) Set(e.key, e.value);
}

Attributes& Attributes::Set(AttrKey key, AttrValue value) {
  auto it =
      std::lower_bound(entries_.begin(), entries_.end(), key, [](const Entry& e, AttrKey k) { return e.key < k; });
  if (it != entries_.end() && it->key == key) {
    it->value = std::move(value);
  } else {
    entries_.insert(it, {key, std::move(value)});
  }
  return *this;
}

const Attributes::Entry* Attributes::Lookup(AttrKey key) const {
  for (const Entry& e : entries_) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

void Attributes::HashInto(Hasher& hasher) const {
  for (const Entry& e : entries_) {
    hasher.Add((static_cast<uint64_t>(e.key) << 8) | e.value.index());
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, double>) {
            hasher.AddDouble(v);
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            hasher.Add(v.size());
            for (int64_t x : v) hasher.Add(static_cast<uint64_t>(x));
          } else {
            hasher.Add(static_cast<uint64_t>(v));
          }
        },
        e.value);
  }
}

std::string AttrValueToString(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return absl::StrCat("[", absl::StrJoin(v, ","), "]");
        } else if constexpr (std::is_same_v<T, DType>) {
          return std::string(DTypeName(v));
        } else {
          return absl::StrCat(v);
        }
      },
      value);
}

std::string Attributes::ToString() const {
  std::string out;
  for (const Entry& e : entries_) {
    if (!out.empty()) out += ' ';
    absl::StrAppend(&out, AttrKeyName(e.key), "=", AttrValueToString(e.value));
  }
  return out;
}

bool operator==(const Attributes& a, const Attributes& b) {
  if (a.entries_.size() != b.entries_.size()) return false;
  for (size_t i = 0; i < a.entries_.size(); ++i) {
    if (a.entries_[i].key != b.entries_[i].key || a.entries_[i].value != b.entries_[i].value) {
      return false;
    }
  }
  return true;
}

}  // namespace lazyrt::ir
