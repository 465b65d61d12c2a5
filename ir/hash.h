// Stable 64-bit hashing (XXH3). Only values enter a hash, never addresses, so two processes that
// build the same graph compute the same hashes.
#pragma once

#include <cstdint>
#include <cstring>
#include "absl/strings/string_view.h"

#include "absl/container/inlined_vector.h"

namespace lazyrt::ir {

using HashValue = uint64_t;

HashValue HashBytes(const void* data, size_t size);
// Order-sensitive combination of two hashes.
HashValue HashCombine(HashValue a, HashValue b);

// Accumulates words and hashes them in one XXH3 call (cheaper than the streaming API for the few
// dozen bytes a node contributes).
class Hasher {
 public:
  void Add(uint64_t word) { words_.push_back(word); }
  void AddDouble(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    Add(bits);
  }
  void AddString(absl::string_view s) {
    Add(s.size());
    Add(HashBytes(s.data(), s.size()));
  }
  HashValue Finish() const { return HashBytes(words_.data(), words_.size() * sizeof(uint64_t)); }

 private:
  absl::InlinedVector<uint64_t, 24> words_;
};

// "9f86d081884c7d65": a hash as 16 lowercase hex digits.
std::string HashToHex(HashValue h);

}  // namespace lazyrt::ir
