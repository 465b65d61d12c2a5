#include "pjrt_sim/collective_trace.h"

#include <deque>
#include <mutex>
#include <utility>

#include "pjrt_sim/device.h"

namespace lazyrt::pjrt {
namespace {

struct CollectiveLog {
  std::mutex mu;
  std::deque<CollectiveSpanRecord> spans;
};

CollectiveLog& GetCollectiveLog() {
  static auto* log = new CollectiveLog();  // never destroyed: streams may still run collectives at exit
  return *log;
}

}  // namespace

CollectiveSpan::CollectiveSpan(Device* device, std::string what)
    : device_(device), what_(std::move(what)), start_(std::chrono::steady_clock::now()) {}

CollectiveSpan::~CollectiveSpan() {
  if (device_ == nullptr) return;
  CollectiveSpanRecord record{device_->id(), std::move(what_), start_, std::chrono::steady_clock::now()};
  device_->RecordCollective(std::chrono::duration_cast<std::chrono::nanoseconds>(record.end - record.start).count());
  CollectiveLog& log = GetCollectiveLog();
  std::lock_guard<std::mutex> lock(log.mu);
  if (log.spans.size() == kMaxCollectiveSpans) log.spans.pop_front();
  log.spans.push_back(std::move(record));
}

std::vector<CollectiveSpanRecord> CollectiveSpans() {
  CollectiveLog& log = GetCollectiveLog();
  std::lock_guard<std::mutex> lock(log.mu);
  return {log.spans.begin(), log.spans.end()};
}

}  // namespace lazyrt::pjrt
