#include "lazy/metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cache/miss_reason.h"
#include "lazy/error.h"

namespace lazyrt {
namespace {

// A timer's samples in bounded memory, whatever the length of the run: count, total and extremes
// exactly, percentiles from a histogram of logarithmic buckets (16 per doubling: within 4.4%).
class Timer {
 public:
  void Add(double ms) {
    ++count_;
    total_ += ms;
    min_ = std::min(min_, ms);
    max_ = std::max(max_, ms);
    ++buckets_[BucketOf(ms)];
  }

  TimerSummary Summary(std::string name) const {
    TimerSummary t;
    t.name = std::move(name);
    t.count = count_;
    t.total_ms = total_;
    if (count_ == 0) return t;
    t.mean_ms = total_ / static_cast<double>(count_);
    t.p50_ms = Percentile(0.5);
    t.p90_ms = Percentile(0.9);
    t.max_ms = max_;
    return t;
  }

 private:
  static constexpr int kPerDoubling = 16;
  static constexpr double kSmallestMs = 1e-6;  // 1 ns: bucket 0 holds everything faster
  static constexpr size_t kBuckets = 48 * kPerDoubling;

  static size_t BucketOf(double ms) {
    if (!(ms > kSmallestMs)) return 0;
    // Clamped as a double: an infinite or huge duration must not overflow the conversion.
    return static_cast<size_t>(std::min(static_cast<double>(kBuckets - 1), std::log2(ms / kSmallestMs) * kPerDoubling));
  }

  // The sample of rank p*count, as the middle of its bucket (clamped to what was seen).
  double Percentile(double p) const {
    const int64_t rank = std::min(count_ - 1, static_cast<int64_t>(p * static_cast<double>(count_)));
    int64_t seen = 0;
    for (size_t b = 0; b < kBuckets; ++b) {
      seen += buckets_[b];
      if (seen > rank) {
        const double middle = kSmallestMs * std::exp2((static_cast<double>(b) + 0.5) / kPerDoubling);
        return std::clamp(middle, min_, max_);
      }
    }
    return max_;
  }

  int64_t count_ = 0;
  double total_ = 0, min_ = std::numeric_limits<double>::infinity(), max_ = 0;
  std::array<int64_t, kBuckets> buckets_{};
};

struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<std::atomic<int64_t>>, std::less<>> counters;
  std::map<std::string, Timer, std::less<>> timers;
};

Registry& GetRegistry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

std::atomic<int64_t>& Counter(absl::string_view name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.counters.find(name);
  if (it == r.counters.end()) {
    it = r.counters.emplace(std::string(name), std::make_unique<std::atomic<int64_t>>(0)).first;
  }
  return *it->second;
}

std::string PersistentCacheMissCounter(absl::string_view reason_name) {
  return absl::StrCat(counters::kPersistentCacheMiss, "_", reason_name);
}

int64_t CounterValue(absl::string_view name, std::source_location loc) {
  static const auto* known = [] {
    auto* names = new std::vector<std::string>;
#define LAZYRT_X(constant, counter_name) names->emplace_back(counter_name);
    LAZYRT_COUNTERS(LAZYRT_X)
#undef LAZYRT_X
    for (cache::MissReason reason : cache::kAllMissReasons) {
      names->push_back(PersistentCacheMissCounter(cache::MissReasonName(reason)));
    }
    return names;
  }();
  if (std::find(known->begin(), known->end(), name) == known->end()) {
    throw Error(
        absl::StrCat("CounterValue: no counter is named '", name, "'; the counters are ", absl::StrJoin(*known, ", ")),
        loc);
  }
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.counters.find(name);
  return it == r.counters.end() ? 0 : it->second->load();
}

void RecordTime(absl::string_view name, double ms) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.timers.find(name);
  if (it == r.timers.end()) it = r.timers.emplace(std::string(name), Timer{}).first;
  it->second.Add(ms);
}

std::vector<std::pair<std::string, int64_t>> metrics_counters() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [name, value] : r.counters) out.emplace_back(name, value->load());
  return out;
}

std::vector<TimerSummary> metrics_timers() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<TimerSummary> out;
  for (const auto& [name, timer] : r.timers) out.push_back(timer.Summary(name));
  return out;
}

std::string metrics_report() {
  std::string out = "counters:\n";
  for (const auto& [name, value] : metrics_counters()) {
    absl::StrAppendFormat(&out, "  %-40s %lld\n", name, static_cast<long long>(value));
  }
  absl::StrAppendFormat(&out, "timers (ms):%32s %8s %10s %10s %10s %10s %10s\n", "", "count", "total", "mean", "p50",
                        "p90", "max");
  for (const TimerSummary& t : metrics_timers()) {
    absl::StrAppendFormat(&out, "  %-40s %8d %10.3f %10.3f %10.3f %10.3f %10.3f\n", t.name, t.count, t.total_ms,
                          t.mean_ms, t.p50_ms, t.p90_ms, t.max_ms);
  }
  return out;
}

}  // namespace lazyrt
