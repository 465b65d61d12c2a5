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

std::string metrics_report() {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  std::string out = "counters:\n";
  for (const auto& [name, value] : r.counters) absl::StrAppendFormat(&out, "  %-36s %lld\n", name, static_cast<long long>(value->load()));
  out += "timers (ms):                              count      total       mean        p50        p90        max\n";
  for (const auto& [name, samples] : r.timers) {
    std::vector<double> s = samples;
    std::sort(s.begin(), s.end());
    double total = 0;
    for (double v : s) total += v;
    auto pct = [&](double p) { return s.empty() ? 0.0 : s[std::min(s.size() - 1, static_cast<size_t>(p * static_cast<double>(s.size())))]; };
    absl::StrAppendFormat(&out, "  %-36s %8zu %10.3f %10.3f %10.3f %10.3f %10.3f\n", name, s.size(), total,
                          s.empty() ? 0.0 : total / static_cast<double>(s.size()), pct(0.5), pct(0.9),
                          s.empty() ? 0.0 : s.back());
  }
  return out;
}

}  // namespace lazyrt
