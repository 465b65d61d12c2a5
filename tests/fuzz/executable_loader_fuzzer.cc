// Fuzzes loading serialized executables: pjrt::Executable::Parse and Executable::Load (what
// Client::LoadSerializedExecutable does with a persistent-cache payload). Loading promises to check
// every index and size, so whatever it accepts must also run: an accepted executable is executed
// (when its work is small) on a small device with arguments of two byte patterns, and must never
// crash, hang or touch memory out of bounds; a kernel may only fail with a status.
//
// Inputs are framed executables (Serialize's header, then the proto); bytes without the frame's
// magic are also tried as a bare proto body. Besides libFuzzer's byte mutations, a custom mutator
// parses the input and changes fields through the protobuf API (tests/fuzz/proto_mutator.h), then
// frames it again, so that most mutants get past Parse and exercise Load's checks.
//
// Also checked: what Load accepts serializes, parses and loads again to the same proto.
#include <cstdint>
#include <cstring>
#include <string>

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/string_view.h"
#include "pjrt_sim/executable.h"
#include "tests/fuzz/fuzz_execution.h"
#include "tests/fuzz/proto_mutator.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace lazyrt::fuzz {
namespace {

constexpr const char* kName = "executable_loader_fuzzer";
// Executable::Serialize's frame: magic, u32 format version, u64 body length (little-endian).
constexpr char kMagic[8] = {'L', 'Z', 'R', 'T', 'E', 'X', 'E', '\n'};
constexpr size_t kFrameBytes = 8 + 4 + 8;
// Executables are run only below this estimated cost (elements and bytes touched).
constexpr int64_t kMaxRunCost = int64_t{1} << 22;

FuzzStats& Stats() {
  static FuzzStats* stats = new FuzzStats(kName, {"parsed", "loaded", "ran", "ran without error"});
  return *stats;
}

std::string Frame(const std::string& body) {
  std::string out(kFrameBytes, '\0');
  std::memcpy(out.data(), kMagic, 8);
  const uint32_t version = pjrt::Executable::kFormatVersion;
  const uint64_t length = body.size();
  std::memcpy(out.data() + 8, &version, 4);
  std::memcpy(out.data() + 12, &length, 8);
  return out + body;
}

void LoadAndRun(const pjrt::proto::Executable& proto) {
  Stats().Count(0);
  absl::StatusOr<std::shared_ptr<pjrt::Executable>> loaded = pjrt::Executable::Load(proto);
  if (!loaded.ok()) return;
  Stats().Count(1);
  // A loaded executable round-trips.
  const std::string bytes = (*loaded)->Serialize();
  absl::StatusOr<pjrt::proto::Executable> reparsed = pjrt::Executable::Parse(bytes);
  if (!reparsed.ok())
    Violation(kName, "a loaded executable's bytes do not parse: " + std::string(reparsed.status().message()));
  google::protobuf::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);  // a NaN compile time is the same NaN
  google::protobuf::util::MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  if (!differencer.Compare(*reparsed, proto)) {
    Violation(kName, "a loaded executable's bytes parse to another proto");
  }
  if (absl::StatusOr<std::shared_ptr<pjrt::Executable>> again = pjrt::Executable::Load(*reparsed); !again.ok()) {
    Violation(kName, "a loaded executable does not load again: " + std::string(again.status().message()));
  }
  if (EstimatedCost(proto, kMaxRunCost) >= kMaxRunCost) return;
  // Errors (out of memory, an index out of range in the data) are fine; crashes are not.
  if (RunWithFill(**loaded, 0x00).ok()) Stats().Count(3);
  RunWithFill(**loaded, 0xff).IgnoreError();
  Stats().Count(2);
}

}  // namespace
}  // namespace lazyrt::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Mutated strings are often invalid UTF-8, which protobuf logs on every parse: noise, not news.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lazyrt;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<pjrt::proto::Executable> parsed = pjrt::Executable::Parse(bytes);
  if (parsed.ok()) {
    fuzz::LoadAndRun(*parsed);
  } else if (size < 8 || std::memcmp(data, fuzz::kMagic, 8) != 0) {
    pjrt::proto::Executable body;
    if (body.ParseFromArray(data, static_cast<int>(size))) fuzz::LoadAndRun(body);
  }
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  using namespace lazyrt;
  // Half the time, and whenever the input is not a framed executable, libFuzzer's own mutations.
  if (seed % 2 == 0) return LLVMFuzzerMutate(data, size, max_size);
  absl::StatusOr<pjrt::proto::Executable> parsed =
      pjrt::Executable::Parse(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!parsed.ok()) return LLVMFuzzerMutate(data, size, max_size);
  fuzz::ProtoMutator(seed).Mutate(*parsed);
  const std::string framed = fuzz::Frame(parsed->SerializeAsString());
  if (framed.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, framed.data(), framed.size());
  return framed.size();
}
