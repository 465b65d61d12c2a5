// What the runtime records about the graph behind a cache entry, in the entry's metadata (one JSON
// object, EncodeEntryMetadata): the graph's signature, checked at every load because a checksum
// proves an entry undamaged but not that it belongs to the graph being run, and the ingredients of
// its key, which explain a miss when the same graph was stored under another key. The runtime
// writes it and the CLI reads it; both use this struct.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lazyrt::cache {

// The dtype (the device's name: "f32", "s64", "pred", ...) and dimensions of one parameter or result.
struct TensorSignature {
  std::string dtype = {};
  std::vector<int64_t> dims = {};

  std::string ToString() const;  // "f32[2,3]"
  friend bool operator==(const TensorSignature&, const TensorSignature&) = default;
};

// Everything besides the graph that goes into a key: the same graph under another key differs in one.
struct KeyIngredients {
  std::string lazyrt_version = {};
  std::string lowering_version = {};
  std::string compiler_version = {};
  std::string device_kind = {};
  int64_t device_count = 0;
  std::string compile_options = {};

  friend bool operator==(const KeyIngredients&, const KeyIngredients&) = default;
};

struct EntryMetadata {
  // The entry's key (the header's key too), and the graph's hash without the ingredients.
  std::string key = {};
  std::string graph_hash = {};
  KeyIngredients ingredients = {};
  std::vector<TensorSignature> parameters = {};
  std::vector<TensorSignature> results = {};
  // For listings.
  int64_t nodes = 0;
  std::string module = {};
};

// Bounds on what a metadata text may hold; a longer text is not decoded.
inline constexpr size_t kMaxSignatureTensors = 1 << 14;
inline constexpr size_t kMaxSignatureRank = 16;

// The JSON text stored as an entry's metadata.
std::string EncodeEntryMetadata(const EntryMetadata& metadata);

// The metadata in `text`. INVALID_ARGUMENT saying which field is missing, of the wrong type or out of
// bounds (a negative dimension, more than kMaxSignatureRank of them, ...) when the text is not
// metadata EncodeEntryMetadata wrote.
absl::StatusOr<EntryMetadata> DecodeEntryMetadata(absl::string_view text);

// Where `stored` (an entry's metadata) does not fit `graph` (the graph being run): another key, or a
// parameter or result of another count, dtype or shape. A sentence naming the first difference;
// nullopt when the signatures are the same.
std::optional<std::string> SignatureMismatch(const EntryMetadata& stored, const EntryMetadata& graph);

// The ingredients that differ between an entry (`stored`) and this process (`current`), e.g.
// "compiler version (entry: lazyrt-sim-compiler/2, this process: lazyrt-sim-compiler/3)", joined by
// "; "; nullopt when they are the same.
std::optional<std::string> IngredientDifference(const KeyIngredients& stored, const KeyIngredients& current);

}  // namespace lazyrt::cache
