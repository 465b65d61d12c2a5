// The memory view of diagnostics: samples of each device's bytes in use at every execution and
// transfer, for the Chrome trace's counter tracks.
#include <deque>
#include <mutex>

#include "lazy/diagnostics_internal.h"

namespace lazyrt::detail {
namespace {

// Samples kept for the trace; older ones are dropped.
constexpr size_t kMaxSamples = 100000;

struct SampleLog {
  std::mutex mu;
  std::deque<MemorySample> samples;
};

SampleLog& GetSampleLog() {
  static SampleLog* s = new SampleLog;  // never destroyed: the exit sync records after static destructors
  return *s;
}

}  // namespace

void RecordMemorySample(const pjrt::Device& device, int64_t bytes_in_use) {
  const MemorySample sample{.ms = NowMs(), .device = device.id(), .bytes_in_use = bytes_in_use};
  SampleLog& s = GetSampleLog();
  std::lock_guard<std::mutex> lock(s.mu);
  s.samples.push_back(sample);
  if (s.samples.size() > kMaxSamples) s.samples.pop_front();
}

void RecordMemorySample(const pjrt::Device& device) { RecordMemorySample(device, device.memory_stats().bytes_in_use); }

std::vector<MemorySample> MemorySamples() {
  SampleLog& s = GetSampleLog();
  std::lock_guard<std::mutex> lock(s.mu);
  return {s.samples.begin(), s.samples.end()};
}

}  // namespace lazyrt::detail
