#include "ir/hash.h"

#include <xxhash.h>

#include "absl/strings/str_format.h"

namespace lazyrt::ir {

HashValue HashBytes(const void* data, size_t size) { return XXH3_64bits(data, size); }

HashValue HashCombine(HashValue a, HashValue b) {
  uint64_t words[2] = {a, b};
  return XXH3_64bits(words, sizeof words);
}

std::string HashToHex(HashValue h) { return absl::StrFormat("%016x", h); }

}  // namespace lazyrt::ir
