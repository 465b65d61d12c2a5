// The collectives that ran, as spans per device for the Chrome trace: a bounded process-wide log.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace lazyrt::pjrt {

class Device;

struct CollectiveSpanRecord {
  int device = 0;    // Device::id()
  std::string what;  // "all_reduce 'all_reduce(dot)' (kernel 3)"
  std::chrono::steady_clock::time_point start, end;
};

// Records the time from its construction to its destruction as one span of `device` (none if null), and
// counts it in the device's CollectiveStats.
class CollectiveSpan {
 public:
  CollectiveSpan(Device* device, std::string what);
  ~CollectiveSpan();
  CollectiveSpan(const CollectiveSpan&) = delete;
  CollectiveSpan& operator=(const CollectiveSpan&) = delete;

 private:
  Device* device_;
  std::string what_;
  std::chrono::steady_clock::time_point start_;
};

// The newest kMaxCollectiveSpans spans, oldest first.
inline constexpr size_t kMaxCollectiveSpans = 1 << 14;
std::vector<CollectiveSpanRecord> CollectiveSpans();

}  // namespace lazyrt::pjrt
