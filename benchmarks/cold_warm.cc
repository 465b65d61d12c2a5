// Cold start against warm start of examples/train_mlp, as separate processes: N runs each with an
// empty persistent cache directory of its own (cold: every graph is lowered and compiled), then N
// runs on the directory a cold run filled (warm: every graph is loaded, nothing compiles). Prints a
// table and, last, one JSON line; medians throughout, so one disturbed run cannot move a figure.
//
//   cold_warm [--train-mlp PATH] [--runs N] [--steps N] [--epochs N] [--max-load-over-compile X]
//             [--keep-dirs]
//
// Exits 1 when a run fails, when a warm run compiled anything or missed the cache, when a cold run
// hit it, when final_loss differs between runs (a loaded executable must compute exactly what the
// compiled one did), or when the warm first step's load takes more than X times the cold one's lowering
// and compiling (medians).
//
// The threshold is on what the cache replaces, not on the whole first step: the first step's execution
// is the same work either way, and it writes memory the process has not touched before, whose first
// touch costs what the machine makes it. On a Firecracker VM (2026-12-02) a huge page the guest had not
// backed yet took ~1.8 ms a MiB to fault in, one already backed 0.04: the MLP's warm first step then ran
// 8-48 ms from one process to the next around a compile of 30-40 ms, and a 2x guard on the totals failed
// in 2 of 5 runs while the load took 1.2-1.5 ms (benchmarks/RESULTS.md, session 51). The totals are shown.
//
// Compile and load times come from each run's report (LAZYRT_REPORT): the sum of lower + compile
// time (cold) and of load time (warm) over the first step's syncs, and over all syncs. Asking for the report turns on
// the device's execution timing markers in the child, a few stream callbacks per sync, in both kinds of run alike.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Flags {
  std::string train_mlp;  // empty: next to this program in the build tree
  int runs = 3;
  int64_t steps = 30;
  int64_t epochs = 1;
  double max_load_over_compile = 0;  // 0: no threshold
  bool keep_dirs = false;
};

[[noreturn]] void Usage(const std::string& error) {
  std::fprintf(stderr,
               "cold_warm: %s\nusage: cold_warm [--train-mlp PATH] [--runs N] [--steps N] [--epochs N] "
               "[--max-load-over-compile X] [--keep-dirs]\n",
               error.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--keep-dirs") {
      f.keep_dirs = true;
      continue;
    }
    if (flag == "--help" || flag == "-h") Usage("cold vs warm start of train_mlp");
    if (i + 1 >= argc) Usage("missing value for " + flag);
    const std::string value = argv[++i];
    char* end = nullptr;
    auto integer = [&](long long min, long long max) {
      errno = 0;
      const long long v = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || errno != 0 || v < min || v > max)
        Usage(flag + " needs an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "], got '" + value +
              "'");
      return v;
    };
    if (flag == "--train-mlp") {
      f.train_mlp = value;
    } else if (flag == "--runs") {
      f.runs = static_cast<int>(integer(1, 100));
    } else if (flag == "--steps") {
      f.steps = integer(1, 1000000);
    } else if (flag == "--epochs") {
      f.epochs = integer(1, 1000);
    } else if (flag == "--max-load-over-compile") {
      f.max_load_over_compile = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(f.max_load_over_compile > 0) || !std::isfinite(f.max_load_over_compile))
        Usage("--max-load-over-compile needs a positive number, got '" + value + "'");
    } else {
      Usage("unknown flag " + flag);
    }
  }
  return f;
}

// benchmarks/cold_warm and examples/train_mlp sit side by side in the build tree.
std::string DefaultTrainMlp() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return (self.parent_path().parent_path() / "examples" / "train_mlp").string();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

struct Run {
  bool ok = false;
  std::string error;
  double first_step_ms = 0, startup_ms = 0, steady_step_ms = 0, final_loss = 0;
  std::string final_loss_text;  // as printed, for an exact comparison and the message
  int64_t graphs_compiled = 0, cache_hits = 0, cache_misses = 0;
  // Lower + compile and persistent-cache load, summed over the first step's syncs (step 0: before
  // the first mark_step) and over all of the run's syncs (the evaluation graph too).
  double first_compile_ms = 0, first_load_ms = 0;
  double compile_ms = 0, load_ms = 0;
};

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs train_mlp once with `cache_dir`; its stdout and stderr go to files in `scratch`.
Run RunOnce(const Flags& flags, const std::string& train_mlp, const fs::path& cache_dir, const fs::path& scratch) {
  Run run;
  const fs::path out = scratch / "stdout", err = scratch / "stderr", report = scratch / "report.json";
  fs::remove(report);
  std::vector<std::string> args = {
      train_mlp,     "--steps",         std::to_string(flags.steps), "--epochs", std::to_string(flags.epochs),
      "--cache-dir", cache_dir.string()};
  // The caller's environment, less any LAZYRT_REPORT of its own: this run's report is ours.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "LAZYRT_REPORT=", 14) != 0) env.emplace_back(*e);
  }
  env.push_back("LAZYRT_REPORT=" + report.string());
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int spawn_error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawn_error != 0) {
    run.error = "cannot start " + train_mlp + ": " + std::strerror(spawn_error);
    return run;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    run.error = "train_mlp failed (" +
                (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                   : "signal " + std::to_string(WTERMSIG(status))) +
                "): " + ReadFile(err);
    return run;
  }
  // The last line of stdout is the result object.
  std::string text = ReadFile(out), last;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) last = line;
  }
  try {
    const json result = json::parse(last);
    run.first_step_ms = result.at("first_step_ms").get<double>();
    run.startup_ms = result.at("startup_ms").get<double>();
    run.steady_step_ms = result.at("steady_step_ms").get<double>();
    run.final_loss = result.at("final_loss").get<double>();
    run.graphs_compiled = result.at("graphs_compiled").get<int64_t>();
    run.cache_hits = result.at("persistent_cache_hits").get<int64_t>();
    run.cache_misses = result.at("persistent_cache_misses").get<int64_t>();
    // The loss exactly as printed (%.9g round-trips an f32): equal text iff equal value.
    const size_t at = last.find("\"final_loss\":");
    const size_t begin = last.find_first_not_of(' ', at + 13), end = last.find_first_of(",}", begin);
    run.final_loss_text = last.substr(begin, end - begin);

    const json events = json::parse(ReadFile(report)).at("sync_events");
    for (const json& e : events) {
      const double compile = e.at("lower_ms").get<double>() + e.at("compile_ms").get<double>();
      const double load = e.at("load_ms").get<double>();
      run.compile_ms += compile;
      run.load_ms += load;
      if (e.at("step").get<int64_t>() == 0) {
        run.first_compile_ms += compile;
        run.first_load_ms += load;
      }
    }
  } catch (const std::exception& e) {
    run.error = std::string("cannot read train_mlp's result or report: ") + e.what() + "\nlast line: " + last;
    return run;
  }
  run.ok = true;
  return run;
}

std::vector<double> Field(const std::vector<Run>& runs, double Run::*field) {
  std::vector<double> v;
  for (const Run& r : runs) v.push_back(r.*field);
  return v;
}
std::vector<double> Field(const std::vector<Run>& runs, int64_t Run::*field) {
  std::vector<double> v;
  for (const Run& r : runs) v.push_back(static_cast<double>(r.*field));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  const std::string train_mlp = flags.train_mlp.empty() ? DefaultTrainMlp() : flags.train_mlp;
  if (train_mlp.empty() || access(train_mlp.c_str(), X_OK) != 0) {
    Usage("no train_mlp at '" + train_mlp + "' (build target train_mlp, or pass --train-mlp PATH)");
  }
  std::string pattern = (fs::temp_directory_path() / "lazyrt-cold-warm-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    std::fprintf(stderr, "cold_warm: cannot create a scratch directory: %s\n", std::strerror(errno));
    return 1;
  }
  const fs::path work = pattern;

  std::vector<Run> cold, warm;
  std::vector<std::string> failures;
  fs::path warm_dir;
  for (int i = 0; i < flags.runs; ++i) {
    const fs::path dir = work / ("cold-" + std::to_string(i));
    fs::create_directories(dir);  // empty: nothing in it to hit
    cold.push_back(RunOnce(flags, train_mlp, dir, work));
    std::fprintf(stderr, "cold run %d: %s\n", i + 1, cold.back().ok ? "done" : cold.back().error.c_str());
    warm_dir = dir;  // the last cold run's entries serve every warm run
  }
  for (int i = 0; i < flags.runs; ++i) {
    warm.push_back(RunOnce(flags, train_mlp, warm_dir, work));
    std::fprintf(stderr, "warm run %d: %s\n", i + 1, warm.back().ok ? "done" : warm.back().error.c_str());
  }
  if (!flags.keep_dirs) {
    std::error_code ec;
    fs::remove_all(work, ec);
  } else {
    std::fprintf(stderr, "cold_warm: kept %s\n", work.c_str());
  }

  for (const Run& r : cold) {
    if (!r.ok)
      failures.push_back("a cold run failed: " + r.error);
    else if (r.cache_hits != 0)
      failures.push_back("a cold run hit the persistent cache, which was empty");
  }
  for (const Run& r : warm) {
    if (!r.ok)
      failures.push_back("a warm run failed: " + r.error);
    else if (r.graphs_compiled != 0)
      failures.push_back("a warm run compiled " + std::to_string(r.graphs_compiled) + " graph(s)");
    else if (r.cache_misses != 0)
      failures.push_back("a warm run missed the persistent cache " + std::to_string(r.cache_misses) + " time(s)");
  }
  std::vector<Run> cold_ok, warm_ok;
  std::copy_if(cold.begin(), cold.end(), std::back_inserter(cold_ok), [](const Run& r) { return r.ok; });
  std::copy_if(warm.begin(), warm.end(), std::back_inserter(warm_ok), [](const Run& r) { return r.ok; });
  if (cold_ok.empty() || warm_ok.empty()) {
    for (const std::string& f : failures) std::fprintf(stderr, "cold_warm: FAIL: %s\n", f.c_str());
    return 1;
  }
  // Every run trains the same seed on the same data: a loaded executable must give the very loss a
  // compiled one did.
  const std::string& reference_loss = cold_ok.front().final_loss_text;
  std::vector<Run> all_ok = cold_ok;
  all_ok.insert(all_ok.end(), warm_ok.begin(), warm_ok.end());
  const bool same_loss =
      std::all_of(all_ok.begin(), all_ok.end(), [&](const Run& r) { return r.final_loss_text == reference_loss; });
  if (!same_loss) {
    std::string losses;
    for (const Run& r : all_ok) losses += " " + r.final_loss_text;
    failures.push_back("final_loss differs between runs (cold runs first):" + losses);
  }

  const double cold_first = Median(Field(cold_ok, &Run::first_step_ms)),
               warm_first = Median(Field(warm_ok, &Run::first_step_ms));
  const double cold_compile = Median(Field(cold_ok, &Run::first_compile_ms));
  const double warm_load = Median(Field(warm_ok, &Run::first_load_ms));
  const double warm_over_cold = warm_first / cold_first;
  const double load_over_compile = cold_compile > 0 ? warm_load / cold_compile : 0;
  if (flags.max_load_over_compile > 0 && !(cold_compile > 0)) {
    failures.push_back("the cold runs' first step compiled nothing: nothing to compare the load with");
  } else if (flags.max_load_over_compile > 0 && load_over_compile > flags.max_load_over_compile) {
    char text[200];
    std::snprintf(text, sizeof text,
                  "the warm first step's load (%.2f ms) over the cold one's compile (%.2f ms), %.3f, exceeds the "
                  "threshold %.3f",
                  warm_load, cold_compile, load_over_compile, flags.max_load_over_compile);
    failures.push_back(text);
  }

  std::printf("train_mlp --steps %lld --epochs %lld, %zu cold and %zu warm processes (medians)\n",
              static_cast<long long>(flags.steps), static_cast<long long>(flags.epochs), cold_ok.size(),
              warm_ok.size());
  std::printf("%-30s %12s %12s %10s\n", "", "cold", "warm", "warm/cold");
  auto row = [](const char* name, double c, double w, bool ratio) {
    if (ratio && c > 0)
      std::printf("%-30s %12.2f %12.2f %10.3f\n", name, c, w, w / c);
    else
      std::printf("%-30s %12.2f %12.2f %10s\n", name, c, w, "");
  };
  row("first step (ms)", cold_first, warm_first, true);
  row("first step: compile / load", cold_compile, warm_load, true);
  row("all syncs: compile / load", Median(Field(cold_ok, &Run::compile_ms)), Median(Field(warm_ok, &Run::load_ms)),
      true);
  row("graphs compiled", Median(Field(cold_ok, &Run::graphs_compiled)), Median(Field(warm_ok, &Run::graphs_compiled)),
      false);
  row("persistent cache hits", Median(Field(cold_ok, &Run::cache_hits)), Median(Field(warm_ok, &Run::cache_hits)),
      false);
  row("startup to first step (ms)", Median(Field(cold_ok, &Run::startup_ms)), Median(Field(warm_ok, &Run::startup_ms)),
      true);
  row("steady step (ms)", Median(Field(cold_ok, &Run::steady_step_ms)), Median(Field(warm_ok, &Run::steady_step_ms)),
      true);
  std::printf("final_loss %s, the same in every run: %s\n", reference_loss.c_str(), same_loss ? "yes" : "NO");
  for (const std::string& f : failures) std::printf("FAIL: %s\n", f.c_str());

  const json summary = {
      {"runs", flags.runs},
      {"steps", flags.steps},
      {"cold_first_step_ms", cold_first},
      {"warm_first_step_ms", warm_first},
      {"warm_over_cold", warm_over_cold},
      {"cold_first_step_compile_ms", cold_compile},
      {"warm_first_step_load_ms", warm_load},
      {"cold_total_compile_ms", Median(Field(cold_ok, &Run::compile_ms))},
      {"warm_total_load_ms", Median(Field(warm_ok, &Run::load_ms))},
      {"load_over_compile", load_over_compile},
      {"cold_graphs_compiled", Median(Field(cold_ok, &Run::graphs_compiled))},
      {"warm_graphs_compiled", Median(Field(warm_ok, &Run::graphs_compiled))},
      {"cold_steady_step_ms", Median(Field(cold_ok, &Run::steady_step_ms))},
      {"warm_steady_step_ms", Median(Field(warm_ok, &Run::steady_step_ms))},
      {"final_loss", cold_ok.front().final_loss},
      {"max_load_over_compile", flags.max_load_over_compile},
      {"pass", failures.empty()},
  };
  std::printf("%s\n", summary.dump().c_str());
  return failures.empty() ? 0 : 1;
}
