#include "lazy/metrics.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_format.h"

namespace lazyrt {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<std::atomic<int64_t>>, std::less<>> counters;
  std::map<std::string, std::vector<double>, std::less<>> timers;
};

Registry& Get() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

std::atomic<int64_t>& Counter(absl::string_view name) {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.counters.find(name);
  if (it == r.counters.end()) {
    it = r.counters.emplace(std::string(name), std::make_unique<std::atomic<int64_t>>(0)).first;
  }
  return *it->second;
}

int64_t CounterValue(absl::string_view name) {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.counters.find(name);
  return it == r.counters.end() ? 0 : it->second->load();
}

void RecordTime(absl::string_view name, double ms) {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.timers.find(name);
  if (it == r.timers.end()) it = r.timers.emplace(std::string(name), std::vector<double>{}).first;
  it->second.push_back(ms);
}

std::vector<std::pair<std::string, int64_t>> metrics_counters() {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [name, value] : r.counters) out.emplace_back(name, value->load());
  return out;
}

std::vector<TimerSummary> metrics_timers() {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<TimerSummary> out;
  for (const auto& [name, samples] : r.timers) {
    std::vector<double> s = samples;
    std::sort(s.begin(), s.end());
    TimerSummary t;
    t.name = name;
    t.count = static_cast<int64_t>(s.size());
    for (double v : s) t.total_ms += v;
    if (!s.empty()) {
      auto pct = [&](double p) { return s[std::min(s.size() - 1, static_cast<size_t>(p * static_cast<double>(s.size())))]; };
      t.mean_ms = t.total_ms / static_cast<double>(s.size());
      t.p50_ms = pct(0.5);
      t.p90_ms = pct(0.9);
      t.max_ms = s.back();
    }
    out.push_back(std::move(t));
  }
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
