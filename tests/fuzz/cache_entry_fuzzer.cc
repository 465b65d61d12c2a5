// Fuzzes the persistent cache's entry format (cache/entry_format.h) and the whole Store::Lookup path
// with arbitrary bytes as an entry file. Every input runs twice: as given, and "repaired" — its three
// checksums recomputed wherever the claimed lengths allow — so that mutated lengths, sizes, strings
// and zstd frames reach the checks behind the checksums instead of dying at the first one.
//
// Properties, beyond "no crash, no leak, no out-of-bounds read, no huge allocation":
//   - a decoded header re-encodes to exactly the bytes it came from, and the file is exactly
//     header + payload long;
//   - a decoded payload is raw_size bytes, and EncodeEntry of it decodes back to it;
//   - Store::Verify and Store::Lookup agree with the in-memory decoding (hit or miss, and the
//     reason), a hit returns the decoded payload, and a damaged entry is removed by the lookup.
#include <unistd.h>
#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "cache/entry_format.h"
#include "cache/layout.h"
#include "cache/store.h"

namespace lazyrt::cache {
namespace {

// The property failed: print why and abort, so libFuzzer keeps the input as a crash.
[[noreturn]] void Violation(const std::string& what) {
  std::fprintf(stderr, "cache_entry_fuzzer: property violated: %s\n", what.c_str());
  std::abort();
}

uint64_t Load64(const std::string& bytes, size_t offset) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(bytes[offset + i])} << (8 * i);
  return v;
}
uint32_t Load32(const std::string& bytes, size_t offset) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(bytes[offset + i])} << (8 * i);
  return v;
}
void Store64(std::string& bytes, size_t offset, uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes[offset + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// `bytes` with the prefix, header and payload checksums recomputed as far as its lengths allow
// (the layout is the one documented in entry_format.h).
std::string Repaired(std::string bytes) {
  if (bytes.size() < kFixedHeaderSize) return bytes;
  Store64(bytes, 64, XXH3_64bits(bytes.data(), 64));
  const uint64_t strings_end = kFixedHeaderSize + uint64_t{Load32(bytes, 12)} + Load32(bytes, 16) + Load32(bytes, 20);
  if (strings_end + 8 > bytes.size()) return bytes;
  const uint64_t compressed_size = Load64(bytes, 32);
  const uint64_t payload_start = strings_end + 8;
  const uint64_t payload_size = std::min<uint64_t>(compressed_size, bytes.size() - payload_start);
  Store64(bytes, 40, XXH3_64bits(bytes.data() + payload_start, payload_size));
  Store64(bytes, 64, XXH3_64bits(bytes.data(), 64));  // the payload checksum is in the prefix
  Store64(bytes, strings_end, XXH3_64bits(bytes.data(), strings_end));
  return bytes;
}

// The lookup outcome the in-memory functions predict for `bytes` as the entry of `key` in a store
// of `producer`: the payload, or the miss.
std::variant<std::string, Miss> Predict(const std::string& bytes, absl::string_view key, absl::string_view producer) {
  const absl::string_view view(bytes);
  Decoded<EntryHeader> header = DecodeHeader(view.substr(0, kMaxHeaderSize), bytes.size());
  if (Miss* miss = std::get_if<Miss>(&header)) return *miss;
  const EntryHeader& h = std::get<EntryHeader>(header);
  const uint64_t header_size = EncodedHeaderSize(h);
  if (header_size + h.compressed_size != bytes.size()) {
    Violation("DecodeHeader accepted a file that is not exactly header + payload long");
  }
  if (absl::StatusOr<std::string> encoded = EncodeHeader(h); encoded.ok()) {
    if (*encoded != view.substr(0, header_size)) Violation("a decoded header does not re-encode to its bytes");
  } else if (h.raw_size <= kMaxPayloadBytes) {
    Violation("a decoded header within the limits does not encode: " + std::string(encoded.status().message()));
  }
  if (CheckEntryIdentity(h, h.key, h.producer_version).has_value()) {
    Violation("an entry is foreign to its own key and producer");
  }
  if (std::optional<Miss> miss = CheckEntryIdentity(h, key, producer)) return *miss;
  Decoded<std::string> payload = DecodePayload(h, view.substr(header_size));
  if (Miss* miss = std::get_if<Miss>(&payload)) return *miss;
  std::string& raw = std::get<std::string>(payload);
  if (raw.size() != h.raw_size) Violation("a decoded payload is not raw_size bytes");
  // Round trip: the payload encodes and decodes back to itself.
  absl::StatusOr<std::string> again = EncodeEntry(h, raw);
  if (!again.ok()) Violation("a decoded entry does not encode: " + std::string(again.status().message()));
  Decoded<EntryHeader> again_header = DecodeHeader(absl::string_view(*again).substr(0, kMaxHeaderSize), again->size());
  if (!std::holds_alternative<EntryHeader>(again_header)) Violation("a re-encoded entry does not decode");
  Decoded<std::string> again_payload =
      DecodePayload(std::get<EntryHeader>(again_header), absl::string_view(*again).substr(EncodedHeaderSize(h)));
  if (!std::holds_alternative<std::string>(again_payload) || std::get<std::string>(again_payload) != raw) {
    Violation("a re-encoded payload does not decode to itself");
  }
  return std::move(raw);
}

// A scratch cache directory for the whole run, removed at exit.
const std::string& ScratchDir() {
  static const std::string* dir = [] {
    std::string name = "/tmp/lazyrt-cache-fuzz-XXXXXX";
    if (mkdtemp(name.data()) == nullptr) Violation("mkdtemp failed");
    auto* path = new std::string(name);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(ScratchDir(), ignored);
    });
    return path;
  }();
  return *dir;
}

// Writes `bytes` as the entry file of `key` and checks Verify and Lookup against Predict.
void CheckStore(const std::string& bytes, absl::string_view key, const std::string& producer) {
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open({.dir = ScratchDir(), .producer_version = producer, .event_log_max_bytes = 64 << 10});
  if (!store.ok()) Violation("cannot open the store: " + std::string(store.status().message()));
  const std::string path = ScratchDir() + "/" + EntryFileName(key);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.good()) Violation("cannot write " + path);
  }
  const std::variant<std::string, Miss> predicted = Predict(bytes, key, producer);
  const std::optional<Miss> verified = (*store)->Verify(key);
  const LookupResult looked_up = (*store)->Lookup(key);
  if (const Miss* want = std::get_if<Miss>(&predicted)) {
    if (!verified || verified->reason != want->reason) {
      Violation("Verify says " + std::string(verified ? MissReasonName(verified->reason) : "sound") +
                ", the entry format says " + std::string(MissReasonName(want->reason)));
    }
    const Miss* got = std::get_if<Miss>(&looked_up);
    if (got == nullptr || got->reason != want->reason) {
      Violation("Lookup " + std::string(got ? MissReasonName(got->reason) : "hit") + ", the entry format says " +
                std::string(MissReasonName(want->reason)));
    }
    // The cache removes only what it wrote: an entry with its magic (or a write cut short, a prefix of
    // the magic). A file without it is left alone, whatever its name.
    const bool ours = absl::StartsWith(bytes, kEntryMagic) || absl::StartsWith(kEntryMagic, bytes);
    if (ours && access(path.c_str(), F_OK) == 0) Violation("a damaged entry was not removed by the lookup");
    if (!ours && access(path.c_str(), F_OK) != 0) Violation("the lookup removed a file the cache did not write");
  } else {
    if (verified) Violation("Verify reports " + std::string(MissReasonName(verified->reason)) + " for a sound entry");
    const Entry* entry = std::get_if<Entry>(&looked_up);
    if (entry == nullptr) Violation("Lookup missed a sound entry");
    if (entry->payload != std::get<std::string>(predicted)) Violation("Lookup returned another payload");
    unlink(path.c_str());
  }
}

void CheckBytes(const std::string& bytes) {
  // The key and producer the entry claims, when it gets that far, so that sound entries reach the
  // payload; otherwise a fixed pair.
  std::string key = "fuzz-key", producer = "fuzz-producer";
  Decoded<EntryHeader> header = DecodeHeader(absl::string_view(bytes).substr(0, kMaxHeaderSize), bytes.size());
  if (const EntryHeader* h = std::get_if<EntryHeader>(&header)) {
    if (ValidateKey(h->key).ok()) key = h->key;
    if (!h->producer_version.empty()) producer = h->producer_version;
  }
  CheckStore(bytes, key, producer);
  if (key != "fuzz-key") CheckStore(bytes, "fuzz-key", producer);  // the same file under a foreign name
}

}  // namespace
}  // namespace lazyrt::cache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  lazyrt::cache::CheckBytes(bytes);
  const std::string repaired = lazyrt::cache::Repaired(bytes);
  if (repaired != bytes) lazyrt::cache::CheckBytes(repaired);
  return 0;
}
