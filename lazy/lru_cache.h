// A small least-recently-used map: the in-memory cache of loaded executables.
#pragma once

#include <cstddef>
#include <list>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace lazyrt {

template <typename Key, typename Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  // The value under `key`, now the most recently used; nullptr if absent.
  Value* Get(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }
  // Inserts or replaces; drops the least recently used entry beyond capacity.
  void Put(const Key& key, Value value) {
    if (Value* existing = Get(key)) {
      *existing = std::move(value);
      return;
    }
    order_.emplace_front(key, std::move(value));
    index_[key] = order_.begin();
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }
  size_t size() const { return order_.size(); }
  // Calls fn(key, value) for every entry, most recently used first.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const auto& [key, value] : order_) fn(key, value);
  }

 private:
  size_t capacity_;
  std::list<std::pair<Key, Value>> order_;
  absl::flat_hash_map<Key, typename std::list<std::pair<Key, Value>>::iterator> index_;
};

}  // namespace lazyrt
