// The compiler's version and the executable format's: together the producer version, part of every
// executable's identity and every cache key. Bump the compiler version whenever a change could alter
// what the compiler emits, and the format version whenever the way an executable is read changes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace lazyrt::pjrt {

inline constexpr absl::string_view kCompilerVersion = "lazyrt-sim-compiler/31";
// 2: multi-output loop kernels. 3: the GEMM library of each DOT kernel and the CPU features it was tuned on.
// 4: NORMALIZE and SCATTER kernels, the sites of index-checking kernels. 5: the GEMM library of each
// attention kernel (before, the loading CPU's preferred one). 6: attention and concatenation operands read
// through views (proto::OperandView), which an earlier reader would ignore and read wrongly. 7: an attention's
// gradients written through result views (proto::Kernel.result_views), which an earlier reader would ignore.
// 8: a DOT's addends (inputs after its operands, read through operand views), which an earlier reader refuses.
// 9: layer norm's NORMALIZE kernels with the affine's inputs (the gradient packed), which an earlier reader refuses.
inline constexpr uint32_t kExecutableFormatVersion = 9;

// What produced an executable, as stored with it (a cache entry's producer version).
struct ProducerVersion {
  std::string compiler;
  uint32_t executable_format = 0;

  // This build's.
  static ProducerVersion Current() { return {std::string(kCompilerVersion), kExecutableFormatVersion}; }
  // The stored text, "lazyrt-sim-compiler/5; executable format 3".
  std::string ToString() const;
  // The inverse of ToString; nullopt for any other text.
  static std::optional<ProducerVersion> Parse(absl::string_view text);

  friend bool operator==(const ProducerVersion&, const ProducerVersion&) = default;
};

}  // namespace lazyrt::pjrt
