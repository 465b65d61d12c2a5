// Fuzzes the check that a cache entry fits the graph being run: an entry's checksums prove it
// undamaged, not that it belongs to the graph, so the runtime and `lazyrt cache verify` decode the
// entry's metadata (cache::DecodeEntryMetadata), load its executable
// (Client::LoadSerializedExecutable, with its parse and arena bounds) and compare the executable's
// parameters and results with the metadata's signature (cache::SignatureMismatch).
//
// Input: a u32 little-endian length L, L bytes of metadata text, then the executable's bytes (the
// seeds are real entries' metadata and payloads). Checked, besides never crashing or allocating
// without bound: metadata that decodes encodes and decodes to itself and fits itself; and the
// signature check says "fits" exactly when the executable's shapes equal the metadata's.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "absl/strings/string_view.h"
#include "cache/entry_metadata.h"
#include "pjrt_sim/client.h"
#include "tests/fuzz/fuzz_execution.h"

namespace lazyrt::fuzz {
namespace {

constexpr const char* kName = "entry_signature_fuzzer";

FuzzStats& Stats() {
  static FuzzStats* stats = new FuzzStats(kName, {"decoded metadata", "loaded", "signature fits"});
  return *stats;
}

pjrt::Client& SmallClient() {
  // Less memory than the executables a crafted arena could claim: the loader must refuse those.
  static pjrt::Client* client = pjrt::Client::Create({.num_devices = 1, .device_memory_bytes = 64 << 20})->release();
  return *client;
}

std::vector<cache::TensorSignature> Signature(const std::vector<pjrt::ArrayShape>& shapes) {
  std::vector<cache::TensorSignature> out;
  for (const pjrt::ArrayShape& s : shapes) out.push_back({std::string(pjrt::PrimitiveTypeName(s.type)), s.dims});
  return out;
}

void Check(absl::string_view metadata_text, absl::string_view payload) {
  absl::StatusOr<cache::EntryMetadata> metadata = cache::DecodeEntryMetadata(metadata_text);
  if (metadata.ok()) {
    Stats().Count(0);
    absl::StatusOr<cache::EntryMetadata> again = cache::DecodeEntryMetadata(cache::EncodeEntryMetadata(*metadata));
    if (!again.ok())
      Violation(kName, "decoded metadata does not decode once encoded: " + std::string(again.status().message()));
    if (cache::SignatureMismatch(*again, *metadata) || !(again->ingredients == metadata->ingredients) ||
        again->graph_hash != metadata->graph_hash || again->nodes != metadata->nodes) {
      Violation(kName, "metadata changes when encoded and decoded");
    }
    if (cache::SignatureMismatch(*metadata, *metadata)) Violation(kName, "metadata does not fit itself");
    if (cache::IngredientDifference(metadata->ingredients, metadata->ingredients)) {
      Violation(kName, "key ingredients differ from themselves");
    }
  }
  absl::StatusOr<std::shared_ptr<pjrt::Executable>> loaded = SmallClient().LoadSerializedExecutable(payload);
  if (!loaded.ok()) return;
  Stats().Count(1);
  if ((*loaded)->proto().arena_bytes() > int64_t{64} << 20) Violation(kName, "an arena larger than the device loaded");
  if (!metadata.ok()) return;
  cache::EntryMetadata actual;
  actual.key = metadata->key;
  actual.parameters = Signature((*loaded)->parameter_shapes());
  actual.results = Signature((*loaded)->output_shapes());
  const bool fits = !cache::SignatureMismatch(*metadata, actual).has_value();
  const bool equal = actual.parameters == metadata->parameters && actual.results == metadata->results;
  if (fits != equal)
    Violation(kName, fits ? "a signature that differs was said to fit" : "an equal signature was said not to fit");
  if (fits) Stats().Count(2);
}

}  // namespace
}  // namespace lazyrt::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // strings that are not UTF-8 are refused, not logged
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t length;
  std::memcpy(&length, data, 4);
  const absl::string_view rest(reinterpret_cast<const char*>(data) + 4, size - 4);
  const size_t split = std::min<size_t>(length, rest.size());
  lazyrt::fuzz::Check(rest.substr(0, split), rest.substr(split));
  return 0;
}
