// The host CPU's instruction-set features that decide how fast, and with what rounding, the device's
// kernels run: the GEMM libraries pick their kernels by them at run time (BLIS's haswell or skx,
// OpenBLAS's Haswell or SkylakeX, ...). Autotuned choices are measurements of those kernels, so an
// executable records the features it was tuned on, a loader refuses one tuned on other features, and
// the graph key names them (two machines sharing a cache directory keep an entry each).
#pragma once

#include <string>
#include <string_view>

namespace lazyrt::pjrt {

// "x86_64 avx avx2 fma avx512f ...": the architecture, then the features present, in a fixed order
// (the same text on every machine with the same features). Computed once per process.
const std::string& HostIsa();
// Whether HostIsa() names `feature` ("avx512f").
bool HostHas(std::string_view feature);

// How the runtime's own code is built: "" optimized without sanitizers, else "asan", "tsan" or "unoptimized".
// That code runs at another speed beside the GEMM libraries' (which no build instruments), so what a build
// measures is its own: the machine's GEMM tuning record (an AddressSanitizer build's, written first, had a
// Release build's MLP run its first products on a library 20% slower for good) and the executables it tunes
// and caches. Of pjrt_sim's compilation, not its caller's (the tests build at -O0).
std::string_view BuildFlavor();

}  // namespace lazyrt::pjrt
