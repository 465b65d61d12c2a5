// Fuzzes the IDX reader of the examples (lazy/idx_dataset.h, ParseIdx): the headers' sizes come
// from a file, so no product may overflow and nothing may be read beyond the bytes present.
// Input: a u32 little-endian length L, L bytes of image file, then the label file. Checked, besides
// never crashing: an accepted dataset is exactly count x features pixels in [0, 1] and count labels
// below the class count, and the bytes held them all.
#include <cstdint>
#include <cstring>
#include <string>

#include "lazy/idx_dataset.h"
#include "tests/fuzz/fuzz_execution.h"

namespace lazyrt::fuzz {
namespace {

constexpr const char* kName = "idx_fuzzer";

FuzzStats& Stats() {
  static FuzzStats* stats = new FuzzStats(kName, {"accepted"});
  return *stats;
}

void Check(const std::string& images, const std::string& labels) {
  absl::StatusOr<data::Dataset> d = data::ParseIdx(images, labels, data::kFashionMnistClasses, "images", "labels");
  if (!d.ok()) return;
  Stats().Count(0);
  if (d->count < 1 || d->features < 1) Violation(kName, "an empty dataset accepted");
  if (static_cast<uint64_t>(d->count) * static_cast<uint64_t>(d->features) != d->images.size() ||
      d->images.size() + 16 != images.size()) {
    Violation(kName, "the pixels are not count x features, all of the image file's");
  }
  if (d->labels.size() != static_cast<size_t>(d->count) || labels.size() != d->labels.size() + 8) {
    Violation(kName, "the labels are not count, all of the label file's");
  }
  for (float v : d->images) {
    if (!(v >= 0.0f && v <= 1.0f)) Violation(kName, "a pixel outside [0, 1]");
  }
  for (int64_t label : d->labels) {
    if (label < 0 || label >= data::kFashionMnistClasses) Violation(kName, "a label out of range accepted");
  }
}

}  // namespace
}  // namespace lazyrt::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t length;
  std::memcpy(&length, data, 4);
  const std::string rest(reinterpret_cast<const char*>(data) + 4, size - 4);
  const size_t split = std::min<size_t>(length, rest.size());
  lazyrt::fuzz::Check(rest.substr(0, split), rest.substr(split));
  return 0;
}
