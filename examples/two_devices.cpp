// Two devices: a tensor made on one, moved to the other with Tensor::to(Device), used there, and each
// device's memory along the way (memory_info). Also times to(): the host's return against the copy's
// completion.
//   LAZYRT_DEVICES=2 build/examples/two_devices [--mib N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "lazy/devices.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
double Mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

void PrintMemory(const char* when) {
  for (int d = 0; d < lazyrt::device_count(); ++d) {
    const lazyrt::MemoryInfo m = lazyrt::memory_info(lazyrt::Device{d});
    std::printf("%-22s lazy:%d  in use %9.2f MiB  peak %9.2f MiB  limit %9.0f MiB\n", when, d, Mib(m.bytes_in_use),
                Mib(m.peak_bytes), Mib(m.limit_bytes));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int64_t mib = 64;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mib") == 0 && i + 1 < argc) {
      mib = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: two_devices [--mib N] (with LAZYRT_DEVICES=2 or more)\n");
      return 2;
    }
  }
  if (lazyrt::device_count() < 2 || mib < 1) {
    std::fprintf(stderr, "two_devices: needs LAZYRT_DEVICES=2 (or more) and --mib >= 1\n");
    return 2;
  }
  const lazyrt::Device first{0}, second{1};
  const int64_t elements = mib * (1 << 20) / 4;
  PrintMemory("start");

  // Made on the first device and computed there (a graph of its own), then moved.
  lazyrt::Tensor x = lazyrt::rand({elements}, 0.0, 1.0, lazyrt::DType::kF32, first);
  lazyrt::sync(first);
  const double expected = lazyrt::sum(x * 2.0).item();
  lazyrt::wait_device(first);
  PrintMemory("x on lazy:0");

  const Clock::time_point start = Clock::now();
  lazyrt::Tensor y = x.to(second);  // queued on lazy:0's stream; the host goes on at once
  const double returned_ms = MsSince(start);
  lazyrt::wait_device(first);  // the copy runs on the source's stream
  const double copied_ms = MsSince(start);
  PrintMemory("x and its copy");

  const double total = lazyrt::sum(y * 2.0).item();  // computed on lazy:1
  std::printf("sum(2x) on lazy:0 %.6f, on lazy:1 %.6f: %s\n", expected, total,
              total == expected ? "equal" : "DIFFERENT");
  x = lazyrt::Tensor();
  lazyrt::wait_device(first);
  PrintMemory("x dropped");
  std::printf("to(lazy:1) of %lld MiB: returned after %.3f ms, copied after %.3f ms (%.2f GB/s)\n",
              static_cast<long long>(mib), returned_ms, copied_ms,
              static_cast<double>(elements) * 4 / (copied_ms * 1e6));
  return total == expected ? 0 : 1;
}
