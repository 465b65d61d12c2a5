#include "pjrt_sim/cpu_isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdint>

namespace lazyrt::pjrt {
namespace {

#if defined(__x86_64__)
struct Feature {
  const char* name;
  unsigned leaf, subleaf;
  int reg;  // 0 eax, 1 ebx, 2 ecx, 3 edx
  int bit;
};

// The features GEMM and elementwise kernels dispatch on (Intel SDM, CPUID leaves 1 and 7).
constexpr Feature kFeatures[] = {
    {"avx", 1, 0, 2, 28},        {"fma", 1, 0, 2, 12},         {"avx2", 7, 0, 1, 5},      {"avx512f", 7, 0, 1, 16},
    {"avx512dq", 7, 0, 1, 17},   {"avx512bw", 7, 0, 1, 30},    {"avx512vl", 7, 0, 1, 31}, {"avx512_vnni", 7, 0, 2, 11},
    {"avx512_bf16", 7, 1, 0, 5}, {"avx512_fp16", 7, 0, 3, 23}, {"amx_bf16", 7, 0, 3, 22}, {"amx_tile", 7, 0, 3, 24},
    {"amx_int8", 7, 0, 3, 25},
};

std::string Detect() {
  std::string isa = "x86_64";
  for (const Feature& f : kFeatures) {
    unsigned regs[4] = {0, 0, 0, 0};
    if (__get_cpuid_count(f.leaf, f.subleaf, &regs[0], &regs[1], &regs[2], &regs[3]) == 0) continue;
    if ((regs[f.reg] >> f.bit) & 1u) isa += std::string(" ") + f.name;
  }
  return isa;
}
#else
std::string Detect() { return "unknown-architecture"; }
#endif

}  // namespace

const std::string& HostIsa() {
  // Never destroyed: the sync of work pending at exit compiles on its own thread, which can run after
  // this thread has destroyed the statics (AddressSanitizer saw that use after free).
  static const std::string* const isa = new std::string(Detect());
  return *isa;
}

bool HostHas(std::string_view feature) {
  const std::string& isa = HostIsa();
  for (size_t at = isa.find(feature); at != std::string::npos; at = isa.find(feature, at + 1)) {
    const size_t end = at + feature.size();
    if (at > 0 && isa[at - 1] == ' ' && (end == isa.size() || isa[end] == ' ')) return true;
  }
  return false;
}

std::string_view BuildFlavor() {
#if defined(__has_feature)
#define LAZYRT_HAS_FEATURE(feature) __has_feature(feature)
#else
#define LAZYRT_HAS_FEATURE(feature) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || LAZYRT_HAS_FEATURE(address_sanitizer)
  return "asan";
#elif defined(__SANITIZE_THREAD__) || LAZYRT_HAS_FEATURE(thread_sanitizer)
  return "tsan";
#elif !defined(__OPTIMIZE__)
  return "unoptimized";
#else
  return "";
#endif
#undef LAZYRT_HAS_FEATURE
}

}  // namespace lazyrt::pjrt
