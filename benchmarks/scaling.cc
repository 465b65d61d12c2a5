// How each phase of a sync scales with graph size: trace, hash (post-order + graph key), lower,
// compile, load (serialize + LoadSerializedExecutable) and a cache-hit sync, for elementwise chains
// y = y * c + x on one-element tensors from 10 to 1,000,000 nodes. Prints the median cost per node of
// every phase at every size and writes them as CSV (nodes,phase,reps,median_ms,ns_per_node).
//
//   scaling [--sizes 10,100,...] [--max-compile-nodes N] [--csv PATH] [--budget-ms X]
//
// The per-step overhead of the runtime (trace, hash, sync) must grow linearly with the graph: the
// program ends by printing, for those phases, the spread of ns/node from 1,000 nodes up.
// Lower, compile and load are measured up to --max-compile-nodes (default: every size; at 1,000,000
// nodes a compile takes seconds, so the whole run takes a few minutes); above it they are skipped, and
// the cache-hit sync still compiles its graph once, untimed, to have something to hit.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "benchmarks/configure_without_cache.h"
#include "ir/hash.h"
#include "ir/post_order.h"
#include "lazy/metrics.h"
#include "lazy/options.h"
#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"
#include "lowering/lower.h"
#include "pjrt_sim/client.h"
#include "pjrt_sim/compiler.h"
#include "pjrt_sim/elapsed.h"

namespace {

using Clock = std::chrono::steady_clock;
using lazyrt::MsSince;
using lazyrt::Tensor;

struct Flags {
  std::vector<int64_t> sizes = {10, 100, 1000, 3000, 10000, 30000, 100000, 300000, 1000000};
  int64_t max_compile_nodes = 1000000;
  std::string csv = "scaling.csv";
  // Target time per phase and size: the repetition count is this over one repetition's time, at
  // least 3 (so there is a median) and at most 2000.
  double budget_ms = 300;
};

[[noreturn]] void Usage(const std::string& error) {
  std::fprintf(stderr,
               "scaling: %s\nusage: scaling [--sizes 10,100,...] [--max-compile-nodes N] [--csv PATH] "
               "[--budget-ms X]\n",
               error.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage("missing value for " + flag);
    const std::string value = argv[++i];
    if (flag == "--sizes") {
      f.sizes.clear();
      for (absl::string_view part : absl::StrSplit(value, ',')) {
        int64_t n = 0;
        if (!absl::SimpleAtoi(part, &n) || n < 4) Usage("--sizes needs integers >= 4, got '" + value + "'");
        f.sizes.push_back(n);
      }
    } else if (flag == "--max-compile-nodes") {
      if (!absl::SimpleAtoi(value, &f.max_compile_nodes)) Usage("--max-compile-nodes needs an integer");
    } else if (flag == "--csv") {
      f.csv = value;
    } else if (flag == "--budget-ms") {
      if (!absl::SimpleAtod(value, &f.budget_ms) || !(f.budget_ms > 0)) Usage("--budget-ms needs a positive number");
    } else {
      Usage("unknown flag " + flag);
    }
  }
  return f;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Repeats `once` (which returns the milliseconds of its timed part) until the budget is spent, at
// least 3 and at most 2000 times, and returns the median and the count.
template <typename F>
std::pair<double, int> Measure(double budget_ms, F once) {
  std::vector<double> ms;
  double spent = 0;
  while (ms.size() < 3 || (spent < budget_ms && ms.size() < 2000)) {
    const Clock::time_point start = Clock::now();
    ms.push_back(once());
    spent += MsSince(start);  // untimed set-up and teardown count against the budget too
  }
  return {Median(ms), static_cast<int>(ms.size())};
}

// About n nodes: the two leaves, then two ops per link.
Tensor Chain(const Tensor& x, const Tensor& c, int64_t n) {
  Tensor y = x;
  for (int64_t i = 0; i < (n - 2) / 2; ++i) y = y * c + x;
  return y;
}

struct Row {
  int64_t nodes;
  std::string phase;
  int reps;
  double median_ms;
  double ns_per_node() const { return median_ms * 1e6 / static_cast<double>(nodes); }
};

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  if (!lazyrt::bench::ConfigureWithoutPersistentCache("scaling")) return 2;
  absl::StatusOr<std::unique_ptr<lazyrt::pjrt::Client>> client = lazyrt::pjrt::Client::Create();
  if (!client.ok()) {
    std::fprintf(stderr, "scaling: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }
  lazyrt::pjrt::Device* device = (*client)->devices()[0];
  const lazyrt::pjrt::CompileOptions compile_options;

  const std::vector<float> one = {1.0f};
  const Tensor x = Tensor::FromData(one, {1});
  const Tensor c = Tensor::FromData(one, {1});

  std::vector<Row> rows;
  std::printf("%10s %6s  %10s %10s %10s %10s %10s %10s   (ns per node, median)\n", "nodes", "", "trace", "hash",
              "lower", "compile", "load", "sync-hit");
  for (const int64_t n : flags.sizes) {
    std::map<std::string, double> ns;
    auto add = [&](const std::string& phase, int64_t nodes, std::pair<double, int> m) {
      rows.push_back({nodes, phase, m.second, m.first});
      ns[phase] = rows.back().ns_per_node();
      std::fflush(stdout);
    };
    // The graph's real size (two leaves, the ops), the denominator of every phase.
    int64_t nodes = 0;
    {
      const Tensor y = Chain(x, c, n);
      const std::vector<lazyrt::ir::Value> roots = {y.ir_value()};
      nodes = static_cast<int64_t>(lazyrt::ir::PostOrder(roots).size());
    }

    // Trace: ops -> nodes, with each link's temporaries registered and dropped. The chain is torn down
    // outside the timed region.
    add("trace", nodes, Measure(flags.budget_ms, [&] {
          const Clock::time_point start = Clock::now();
          Tensor y = Chain(x, c, n);
          const double ms = MsSince(start);
          y = Tensor();
          return ms;
        }));

    Tensor y = Chain(x, c, n);
    const std::vector<lazyrt::ir::Value> roots = {y.ir_value()};
    // Hash: the post-order walk with its DAG hash, and the graph key, as every sync computes them.
    add("hash", nodes, Measure(flags.budget_ms, [&] {
          const Clock::time_point start = Clock::now();
          const lazyrt::ir::PostOrder order(roots);
          const lazyrt::ir::HashValue key = lazyrt::ir::HashCombine(order.dag_hash(), 0x6c617a7972740000ULL);
          const double ms = MsSince(start);
          if (key == 0) std::printf(" ");  // keeps the key computed
          return ms;
        }));

    if (nodes <= flags.max_compile_nodes) {
      const lazyrt::ir::PostOrder order(roots);
      const std::string name = absl::StrCat("chain_", nodes);
      add("lower", nodes, Measure(flags.budget_ms, [&] {
            const Clock::time_point start = Clock::now();
            absl::StatusOr<lazyrt::pjrt::proto::Module> module = lazyrt::lowering::LowerGraph(order, name);
            const double ms = MsSince(start);
            if (!module.ok()) Usage(absl::StrCat("lowering failed: ", module.status().message()));
            return ms;
          }));
      absl::StatusOr<lazyrt::pjrt::proto::Module> module = lazyrt::lowering::LowerGraph(order, name);
      std::shared_ptr<lazyrt::pjrt::Executable> exe;
      add("compile", nodes, Measure(flags.budget_ms, [&] {
            const Clock::time_point start = Clock::now();
            absl::StatusOr<std::shared_ptr<lazyrt::pjrt::Executable>> compiled =
                (*client)->Compile(*module, compile_options, device);
            const double ms = MsSince(start);
            if (!compiled.ok()) Usage(absl::StrCat("compiling failed: ", compiled.status().message()));
            exe = *std::move(compiled);
            return ms;
          }));
      add("load", nodes, Measure(flags.budget_ms, [&] {
            const Clock::time_point start = Clock::now();
            const std::string bytes = exe->Serialize();
            absl::StatusOr<std::shared_ptr<lazyrt::pjrt::Executable>> loaded =
                (*client)->LoadSerializedExecutable(bytes);
            const double ms = MsSince(start);
            if (!loaded.ok()) Usage(absl::StrCat("loading failed: ", loaded.status().message()));
            return ms;
          }));
    }
    y = Tensor();

    // Cache-hit sync: collect the live tensor, post-order, key, in-memory lookup, launch. Tracing before
    // and the wait for the device (and for the graph's release) after are outside the timed region.
    {
      Tensor first = Chain(x, c, n);
      lazyrt::sync();  // compiles: the graph every later sync of this size hits
      lazyrt::wait_device();
    }
    add("sync", nodes, Measure(flags.budget_ms, [&] {
          Tensor z = Chain(x, c, n);
          const Clock::time_point start = Clock::now();
          lazyrt::sync();
          const double ms = MsSince(start);
          z = Tensor();
          lazyrt::wait_device();
          return ms;
        }));

    auto cell = [&](const char* phase) {
      return ns.count(phase) ? absl::StrCat(static_cast<int64_t>(ns[phase] + 0.5)) : std::string("-");
    };
    std::printf("%10lld %6s  %10s %10s %10s %10s %10s %10s\n", static_cast<long long>(nodes), "", cell("trace").c_str(),
                cell("hash").c_str(), cell("lower").c_str(), cell("compile").c_str(), cell("load").c_str(),
                cell("sync").c_str());
    std::fflush(stdout);
  }

  std::ofstream csv(flags.csv, std::ios::trunc);
  csv << "nodes,phase,reps,median_ms,ns_per_node\n";
  for (const Row& r : rows)
    csv << r.nodes << "," << r.phase << "," << r.reps << "," << r.median_ms << "," << r.ns_per_node() << "\n";
  csv.close();
  if (!csv) {
    std::fprintf(stderr, "scaling: cannot write %s\n", flags.csv.c_str());
    return 1;
  }
  std::printf("wrote %s\n", flags.csv.c_str());
  // A graph-size limit (LAZYRT_GRAPH_LIMIT) would cut the chains into pieces: every figure above wrong.
  if (lazyrt::CounterValue(lazyrt::counters::kSyncGraphLimit) != 0) {
    std::fprintf(stderr, "scaling: the runtime split graphs at a size limit; unset LAZYRT_GRAPH_LIMIT\n");
    return 1;
  }

  // Linearity of the per-step phases from 1,000 nodes up: the largest ns/node over the smallest.
  for (const char* phase : {"trace", "hash", "sync"}) {
    double lo = 0, hi = 0;
    int64_t lo_n = 0, hi_n = 0;
    for (const Row& r : rows) {
      if (r.phase != phase || r.nodes < 1000) continue;
      if (lo_n == 0 || r.ns_per_node() < lo) lo = r.ns_per_node(), lo_n = r.nodes;
      if (hi_n == 0 || r.ns_per_node() > hi) hi = r.ns_per_node(), hi_n = r.nodes;
    }
    if (lo_n != 0) {
      std::printf("%-6s ns/node from 1,000 nodes up: min %.1f (at %lld), max %.1f (at %lld), max/min %.2f\n", phase, lo,
                  static_cast<long long>(lo_n), hi, static_cast<long long>(hi_n), hi / lo);
    }
  }
  return 0;
}
