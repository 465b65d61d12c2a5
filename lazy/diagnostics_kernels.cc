// The kernel-profile view of diagnostics (LAZYRT_DEBUG >= 3, LAZYRT_KERNEL_PROFILE): where the device's time went, by
// kernel of the executables held in memory.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/hash.h"
#include "lazy/diagnostics_internal.h"
#include "lazy/executable_cache.h"
#include "pjrt_sim/executable.h"

namespace lazyrt::detail {

std::string KernelProfileText(int64_t shown) {
  struct Row {
    std::string graph, kind, iteration, label;
    int kernel = 0;
    pjrt::Executable::KernelTime time;
  };
  std::vector<Row> rows;
  int64_t total_ns = 0;
  // Over the kernels run again after each run but their first (LAZYRT_KERNEL_PROFILE_RERUNS): those runs' time,
  // and the reruns'.
  int64_t rerun_kernels_later_ns = 0, rerun_ns = 0;
  bool any_reruns = false;
  {
    ExecutableCache::Get().ForEachLoaded([&](const ir::HashValue& key, const std::shared_ptr<pjrt::Executable>& exe) {
      const std::vector<pjrt::Executable::KernelTime> times = exe->kernel_times();
      for (size_t k = 0; k < times.size(); ++k) {
        if (times[k].runs == 0) continue;
        const pjrt::proto::Kernel& kernel = exe->proto().kernels(static_cast<int>(k));
        rows.push_back({ir::HashToHex(key), pjrt::proto::Kernel::Kind_Name(kernel.kind()),
                        pjrt::KernelIterationText(exe->proto(), kernel), kernel.label(), static_cast<int>(k),
                        times[k]});
        total_ns += times[k].total_ns;
        any_reruns = any_reruns || times[k].reruns > 0;
        if (times[k].reruns > 0 && times[k].reruns == times[k].runs - 1) {
          rerun_kernels_later_ns += times[k].total_ns - times[k].first_ns;
          rerun_ns += times[k].rerun_ns;
        }
      }
    });
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.time.total_ns > b.time.total_ns; });
  // The same time by kind of kernel, longest first: where a step goes at a glance, before the kernels.
  std::vector<std::pair<std::string, int64_t>> by_kind;
  for (const Row& r : rows) {
    auto it = std::find_if(by_kind.begin(), by_kind.end(), [&](const auto& k) { return k.first == r.kind; });
    if (it == by_kind.end()) it = by_kind.insert(by_kind.end(), {r.kind, 0});
    it->second += r.time.total_ns;
  }
  std::stable_sort(by_kind.begin(), by_kind.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  const size_t shown_rows = static_cast<size_t>(std::max<int64_t>(0, shown));
  std::string out = absl::StrFormat("device time by kernel: %.1f ms in %d kernels of the loaded executables%s\n",
                                    static_cast<double>(total_ns) / 1e6, rows.size(),
                                    rows.size() > shown_rows ? absl::StrCat(", the ", shown_rows, " longest") : "");
  if (!by_kind.empty()) {
    absl::StrAppend(&out, "  by kind:");
    for (const auto& [kind, ns] : by_kind) {
      absl::StrAppend(
          &out, absl::StrFormat(" %s %.1f ms (%.0f%%)", kind, static_cast<double>(ns) / 1e6,
                                100.0 * static_cast<double>(ns) / static_cast<double>(std::max<int64_t>(1, total_ns))));
    }
    absl::StrAppend(&out, "\n");
  }
  if (rerun_kernels_later_ns > 0) {
    const int64_t spared_ns = rerun_kernels_later_ns - rerun_ns;  // negative where the reruns took longer
    absl::StrAppend(
        &out, absl::StrFormat("  reruns (LAZYRT_KERNEL_PROFILE_RERUNS): the kernels run again took %.1f ms after "
                              "their first runs and %.1f ms run again at once, %+.1f ms (%+.0f%%): what running at "
                              "once spared them (data left in another core's cache or in memory, threads waking)\n",
                              static_cast<double>(rerun_kernels_later_ns) / 1e6, static_cast<double>(rerun_ns) / 1e6,
                              static_cast<double>(spared_ns) / 1e6,
                              100.0 * static_cast<double>(spared_ns) / static_cast<double>(rerun_kernels_later_ns)));
  }
  // MEAN: of the runs after the first (FIRST), which pays for what later runs reuse. RERUN: of the second runs
  // at once, where there are any.
  absl::StrAppend(&out, absl::StrFormat("  %-16s %4s  %-6s  %-24s %7s %10s %9s %9s%s %6s  %s\n", "GRAPH", "#", "KIND",
                                        "ITERATION", "RUNS", "TOTAL ms", "FIRST us", "MEAN us",
                                        any_reruns ? absl::StrFormat(" %9s", "RERUN us") : "", "SHARE", "LABEL"));
  for (size_t i = 0; i < rows.size() && i < shown_rows; ++i) {
    const Row& r = rows[i];
    const int64_t later_runs = r.time.runs > 1 ? r.time.runs - 1 : 1;
    const int64_t later_ns = r.time.runs > 1 ? r.time.total_ns - r.time.first_ns : r.time.total_ns;
    std::string rerun_column;
    if (any_reruns) {
      rerun_column = r.time.reruns > 0 ? absl::StrFormat(" %9.1f", static_cast<double>(r.time.rerun_ns) / 1e3 /
                                                                       static_cast<double>(r.time.reruns))
                                       : absl::StrFormat(" %9s", "-");
    }
    absl::StrAppend(
        &out, absl::StrFormat(
                  "  %-16s %4d  %-6s  %-24s %7d %10.2f %9.1f %9.1f%s %5.1f%%  %s\n", r.graph, r.kernel, r.kind,
                  r.iteration, r.time.runs, r.time.total_ns / 1e6, r.time.first_ns / 1e3,
                  static_cast<double>(later_ns) / 1e3 / static_cast<double>(later_runs), rerun_column,
                  100.0 * static_cast<double>(r.time.total_ns) / static_cast<double>(std::max<int64_t>(1, total_ns)),
                  r.label));
  }
  return out;
}

}  // namespace lazyrt::detail
