// The compiler's version: part of every executable's identity and every cache key. Bump it whenever
// a change could alter what the compiler emits or how an executable is read.
#pragma once

#include "absl/strings/string_view.h"

namespace lazyrt::pjrt {

inline constexpr absl::string_view kCompilerVersion = "lazyrt-sim-compiler/4";

}  // namespace lazyrt::pjrt
