// Trains a 784-256-128-10 MLP on Fashion-MNIST with AdamW, one sync per step: forward, backward and
// the optimizer update are traced into one graph that compiles once and then runs from the cache.
//
//   train_mlp [--epochs N] [--steps N] [--batch N] [--lr X] [--seed N] [--data DIR]
//             [--mode whole|split] [--barrier-every N] [--cache-dir DIR] [--report FILE] [--mesh data=N]
//
// The last line of stdout is one JSON object with the run's results and timings.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "examples/flags.h"
#include "lazy/distributed.h"
#include "lazy/idx_dataset.h"
#include "lazy/metrics.h"
#include "lazy/nn.h"
#include "lazy/optim.h"
#include "lazy/sharding.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point g_process_start = Clock::now();  // initialized before main runs

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Flags {
  int64_t epochs = 3;
  int64_t steps = -1;  // no cap
  int64_t batch = 128;
  double lr = 1e-3;
  uint64_t seed = 0;
  std::string data = lazyrt::data::kFashionMnistDir;
  std::string mode = "whole";
  int64_t barrier_every = 0;
  std::string cache_dir;  // empty: the runtime's default (LAZYRT_CACHE_DIR, ~/.cache/lazyrt)
  std::string report;     // empty: LAZYRT_REPORT, if set
  // --mesh data=N: data parallel over N devices (the global mesh across processes under
  // tools/run_distributed.sh; 0: one device, or one per process).
  int64_t data_parallel = 0;
};

constexpr char kUsage[] =
    "usage: train_mlp [--epochs N] [--steps N] [--batch N] [--lr X] [--seed N] [--data DIR]\n"
    "                 [--mode whole|split] [--barrier-every N] [--cache-dir DIR] [--report FILE]\n"
    "                 [--mesh data=N]   (across processes: tools/run_distributed.sh N train_mlp ...)\n";

const lazyrt::examples::FlagParser kFlags("train_mlp", kUsage);
[[noreturn]] void Usage(const std::string& error) { kFlags.Fail(error); }

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "train_mlp: trains a 784-256-128-10 MLP on Fashion-MNIST with AdamW, one sync per step\n%s"
          "The last line of stdout is one JSON object with the run's results and timings.\n",
          kUsage);
      std::exit(0);
    }
    if (i + 1 >= argc) Usage("missing value for " + flag);
    const std::string value = argv[++i];
    // Bounded so that no product of flags (epochs x steps per epoch, batch x features) overflows.
    auto integer = [&](int64_t min, int64_t max = int64_t{1} << 40) { return kFlags.Integer(flag, value, min, max); };
    if (flag == "--epochs") {
      f.epochs = integer(1, 1 << 20);
    } else if (flag == "--steps") {
      f.steps = integer(1);
    } else if (flag == "--batch") {
      f.batch = integer(1, 1 << 20);
    } else if (flag == "--lr") {
      f.lr = kFlags.Real(flag, value, 1e-12, 1e6);
    } else if (flag == "--seed") {
      f.seed = static_cast<uint64_t>(integer(0, std::numeric_limits<int64_t>::max()));
    } else if (flag == "--data") {
      f.data = value;
    } else if (flag == "--mode") {
      f.mode = kFlags.Choice(flag, value, {"whole", "split"});
    } else if (flag == "--barrier-every") {
      f.barrier_every = integer(0);
    } else if (flag == "--cache-dir") {
      f.cache_dir = value;
    } else if (flag == "--report") {
      f.report = value;
    } else if (flag == "--mesh") {
      if (value.rfind("data=", 0) != 0) Usage("--mesh: expected data=N (data parallel), got '" + value + "'");
      f.data_parallel = kFlags.Integer(flag, value.substr(5), 1, 64);
    } else {
      Usage("unknown flag " + flag);
    }
  }
  return f;
}

lazyrt::Tensor Upload(const std::vector<float>& v, std::vector<int64_t> dims) {
  return lazyrt::Tensor::FromData(v, dims);
}
lazyrt::Tensor Upload(const std::vector<int64_t>& v, std::vector<int64_t> dims) {
  return lazyrt::Tensor::FromData(std::span<const int64_t>(v), dims);
}

// A JSON number, or null for a value JSON cannot hold (a loss that diverged to NaN or infinity).
std::string JsonNumber(const char* format, double value) {
  if (!std::isfinite(value)) return "null";
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// Fraction of `test` the model classifies right; batches of up to 500, one graph for all of them.
double Evaluate(const lazyrt::nn::MLP& model, const lazyrt::data::Dataset& test) {
  lazyrt::NoGradGuard no_grad;
  const int64_t batch = std::min<int64_t>(500, test.count);
  lazyrt::Tensor correct = Upload(std::vector<int64_t>{0}, {});  // device data: every batch runs one graph
  std::vector<float> images;
  std::vector<int64_t> labels;
  for (int64_t start = 0; start + batch <= test.count; start += batch) {
    images.assign(test.images.begin() + start * test.features, test.images.begin() + (start + batch) * test.features);
    labels.assign(test.labels.begin() + start, test.labels.begin() + start + batch);
    lazyrt::Tensor logits = model(Upload(images, {batch, test.features}));
    correct = correct + lazyrt::sum(lazyrt::eq(lazyrt::argmax(logits, 1), Upload(labels, {batch})));
    lazyrt::sync();
  }
  return correct.item() / static_cast<double>(test.count / batch * batch);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = ParseFlags(argc, argv);
  try {
    // Across processes (tools/run_distributed.sh): the mesh is global, each process holds its share.
    lazyrt::distributed::initialize();
    const int64_t ranks = lazyrt::distributed::world_size(), rank = lazyrt::distributed::rank();
    if (ranks > 1 && flags.data_parallel == 0) flags.data_parallel = ranks;
    if (flags.data_parallel % ranks != 0 || flags.batch % std::max<int64_t>(flags.data_parallel, 1) != 0) {
      Usage("--mesh data=" + std::to_string(flags.data_parallel) + " must be a multiple of the " +
            std::to_string(ranks) + " processes and divide --batch (" + std::to_string(flags.batch) + ")");
    }
    if (!lazyrt::examples::ConfigureRuntime("train_mlp", flags.cache_dir, flags.report,
                                            static_cast<int>(flags.data_parallel / ranks))) {
      return 2;
    }

    absl::StatusOr<lazyrt::data::Dataset> train = lazyrt::data::LoadFashionMnist(flags.data, "train");
    absl::StatusOr<lazyrt::data::Dataset> test = lazyrt::data::LoadFashionMnist(flags.data, "t10k");
    for (const auto* d : {&train, &test}) {
      if (!d->ok()) {
        std::fprintf(stderr, "train_mlp: %s\n", std::string(d->status().message()).c_str());
        return 1;
      }
    }
    if (test->features != train->features) {
      std::fprintf(stderr, "train_mlp: the training images have %lld pixels, the test images %lld\n",
                   static_cast<long long>(train->features), static_cast<long long>(test->features));
      return 1;
    }
    // Standardize pixels with the training set's own mean and deviation (torchvision's Normalize).
    double mean = 0, sq = 0;
    for (float v : train->images) {
      mean += v;
      sq += static_cast<double>(v) * v;
    }
    mean /= static_cast<double>(train->images.size());
    // Images of one uniform colour have no deviation: they are only centred then.
    const double variance = sq / static_cast<double>(train->images.size()) - mean * mean;
    const double stddev = variance > 0 ? std::sqrt(variance) : 1.0;
    for (auto* d : {&*train, &*test}) {
      for (float& v : d->images) v = static_cast<float>((v - mean) / stddev);
    }

    std::mt19937_64 init_rng(flags.seed);
    lazyrt::nn::MLP model({train->features, 256, 128, 10}, init_rng);
    // Data parallel: every device holds the parameters and a slice of the batch; the SPMD partitioner
    // all-reduces the gradients inside the step.
    std::optional<lazyrt::Mesh> mesh;
    if (flags.data_parallel > 0) {
      mesh.emplace(std::vector<int64_t>{flags.data_parallel}, std::vector<std::string>{"data"});
      for (const lazyrt::Tensor& p : model.parameters()) lazyrt::mark_sharding(p, *mesh, {});
    }
    // Each rank feeds its rows of the global batch (all of them in one process).
    auto rows_of = [&](const auto& values, std::vector<int64_t> dims) {
      if (!mesh) return Upload(values, dims);
      const int64_t rows = dims[0] / ranks, row = static_cast<int64_t>(values.size()) / dims[0];
      dims[0] = rows;
      using Values = std::remove_cvref_t<decltype(values)>;
      lazyrt::Tensor mine =
          Upload(Values(values.begin() + rank * rows * row, values.begin() + (rank + 1) * rows * row), dims);
      lazyrt::PartitionSpec spec(dims.size());
      spec[0] = "data";
      return lazyrt::distributed::make_array_from_process_local_data(mine, *mesh, spec);
    };
    lazyrt::AdamW optimizer(model.parameters(), flags.lr);
    absl::StatusOr<lazyrt::data::Batches> made = lazyrt::data::Batches::Create(*train, flags.batch, flags.seed + 1);
    if (!made.ok()) {
      std::fprintf(stderr, "train_mlp: --batch: %s\n", std::string(made.status().message()).c_str());
      return 2;
    }
    lazyrt::data::Batches& batches = *made;
    const int64_t total_steps = flags.steps > 0 ? std::min(flags.steps, flags.epochs * batches.per_epoch())
                                                : flags.epochs * batches.per_epoch();
    const int64_t epochs = (total_steps + batches.per_epoch() - 1) / batches.per_epoch();
    const bool live = isatty(STDOUT_FILENO);

    std::vector<float> images;
    std::vector<int64_t> labels;
    lazyrt::Tensor loss;
    int64_t step = 0;
    double startup_ms = 0, first_step_ms = 0, test_accuracy = 0;
    // Steady steps: every training step but the first, timed without the evaluations between epochs.
    Clock::time_point steady_start;
    double steady_total_ms = 0;
    int64_t steady_steps = 0;
    for (int64_t epoch = 1; epoch <= epochs && step < total_steps; ++epoch) {
      const Clock::time_point epoch_start = Clock::now();
      lazyrt::Tensor loss_sum = Upload(std::vector<float>{0.0f}, {});
      int64_t epoch_steps = 0;
      for (int64_t b = 0; b < batches.per_epoch() && step < total_steps; ++b, ++step, ++epoch_steps) {
        const Clock::time_point step_start = Clock::now();
        if (step == 0) startup_ms = MsBetween(g_process_start, step_start);
        if (step == 1 || (b == 0 && step > 0)) steady_start = step_start;
        batches.Get(b, images, labels);
        lazyrt::Tensor x = rows_of(images, {flags.batch, train->features});
        lazyrt::Tensor y = rows_of(labels, {flags.batch});
        auto barrier = [&](int layer) {
          if (flags.barrier_every > 0 && layer % flags.barrier_every == 0) lazyrt::barrier();
        };
        loss = lazyrt::nn::cross_entropy(model(x, barrier), y);
        loss.backward();
        if (flags.mode == "split") lazyrt::barrier();  // forward+backward, then the update as a second graph
        optimizer.step();
        optimizer.zero_grad();
        {
          lazyrt::NoGradGuard no_grad;
          loss_sum = loss_sum + loss.detach();
        }
        lazyrt::sync();
        if (step == 0) {
          loss.item();  // the first step's result is ready
          first_step_ms = MsBetween(step_start, Clock::now());
        }
        if (live && step % 50 == 0) {
          std::printf("\r  epoch %lld  step %lld/%lld  loss %.4f ", static_cast<long long>(epoch),
                      static_cast<long long>(step + 1), static_cast<long long>(total_steps), loss.item());
          std::fflush(stdout);
        }
      }
      const double epoch_loss = loss_sum.item() / static_cast<double>(epoch_steps);  // waits for the epoch's steps
      const double epoch_s = MsBetween(epoch_start, Clock::now()) / 1000;
      const int64_t epoch_steady_steps = epoch == 1 ? epoch_steps - 1 : epoch_steps;
      if (epoch_steady_steps > 0) {
        steady_total_ms += MsBetween(steady_start, Clock::now());
        steady_steps += epoch_steady_steps;
      }
      test_accuracy = Evaluate(model, *test);
      std::printf("%sepoch %lld/%lld  loss %.4f  test_accuracy %.4f  %.1f steps/s\n", live ? "\r" : "",
                  static_cast<long long>(epoch), static_cast<long long>(epochs), epoch_loss, test_accuracy,
                  static_cast<double>(epoch_steps) / epoch_s);
      batches.NextEpoch();
    }
    std::printf(
        "{\"test_accuracy\": %s, \"final_loss\": %s, \"steps\": %lld, \"startup_ms\": %.1f, "
        "\"first_step_ms\": %.2f, \"steady_step_ms\": %.3f, \"graphs_compiled\": %lld, "
        "\"persistent_cache_hits\": %lld, \"persistent_cache_misses\": %lld, \"mode\": \"%s\", \"devices\": %lld, "
        "\"ranks\": %lld, \"collectives\": %lld, \"collective_bytes\": %lld}\n",
        JsonNumber("%.4f", test_accuracy).c_str(), JsonNumber("%.9g", loss.item()).c_str(),
        static_cast<long long>(step), startup_ms, first_step_ms,
        steady_steps > 0 ? steady_total_ms / static_cast<double>(steady_steps) : 0.0,
        static_cast<long long>(lazyrt::CounterValue(lazyrt::counters::kGraphsCompiled)),
        static_cast<long long>(lazyrt::CounterValue(lazyrt::counters::kPersistentCacheHit)),
        static_cast<long long>(lazyrt::CounterValue(lazyrt::counters::kPersistentCacheMiss)), flags.mode.c_str(),
        static_cast<long long>(mesh ? mesh->size() : 1), static_cast<long long>(ranks),
        static_cast<long long>(lazyrt::distributed::collective_stats().calls),
        static_cast<long long>(lazyrt::distributed::collective_stats().bytes_received));
  } catch (const lazyrt::Error& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 1;
  }
  return 0;
}
