// A training loop with the three classic lazy-tensor traps, for the diagnostics to find:
//   1. an item() inside the step, before its mark_step() (a host sync: the host waits for the device
//      every step instead of tracing the next one while it runs),
//   2. a host scalar marked static that changes every step (a new constant, so a new graph, each step),
//   3. a batch whose size changes (a new input shape, so a new graph).
// With --fixed, the same loop without them: the loss is read after the step's barrier, the changing
// scalar is a device parameter, and every batch has the same size.
//
//   fragmented_step [--fixed] [--steps N] [--report FILE] [--cache-dir DIR] [--data DIR]
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "lazy/diagnostics.h"
#include "lazy/idx_dataset.h"
#include "lazy/nn.h"
#include "lazy/options.h"
#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace {

struct Flags {
  bool fixed = false;
  int64_t steps = 12;
  std::string report, cache_dir, data = lazyrt::data::kFashionMnistDir;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fragmented_step: %s needs a value\n", flag.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (flag == "--fixed") {
      f.fixed = true;
    } else if (flag == "--steps") {
      f.steps = std::atoll(value().c_str());
    } else if (flag == "--report") {
      f.report = value();
    } else if (flag == "--cache-dir") {
      f.cache_dir = value();
    } else if (flag == "--data") {
      f.data = value();
    } else {
      std::fprintf(stderr,
                   "usage: fragmented_step [--fixed] [--steps N] [--report FILE] [--cache-dir DIR] [--data DIR]\n");
      std::exit(2);
    }
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  absl::StatusOr<lazyrt::Options> options = lazyrt::Options::FromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "fragmented_step: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (!flags.report.empty()) options->report = flags.report;
  if (!flags.cache_dir.empty()) options->cache_dir = flags.cache_dir;
  try {
    lazyrt::configure(*options);
    absl::StatusOr<lazyrt::data::Dataset> train = lazyrt::data::LoadFashionMnist(flags.data, "train");
    if (!train.ok()) {
      std::fprintf(stderr, "fragmented_step: %s\n", std::string(train.status().message()).c_str());
      return 1;
    }
    std::mt19937_64 rng(0);
    lazyrt::nn::MLP model({train->features, 64, 10}, rng);
    std::vector<float> images;
    std::vector<int64_t> labels;
    double loss_sum = 0;
    for (int64_t step = 0; step < flags.steps; ++step) {
      // Trap 3: every fourth batch is smaller.
      const int64_t batch = flags.fixed || step % 4 != 3 ? 64 : 48;
      images.assign(train->images.begin() + step * 64 * train->features,
                    train->images.begin() + (step * 64 + batch) * train->features);
      labels.assign(train->labels.begin() + step * 64, train->labels.begin() + step * 64 + batch);
      lazyrt::Tensor x = lazyrt::Tensor::FromData(images, {batch, train->features});
      lazyrt::Tensor y = lazyrt::Tensor::FromData(std::span<const int64_t>(labels), {batch});  // TRAP: batch shape
      lazyrt::Tensor loss = lazyrt::nn::cross_entropy(model(x), y);
      loss.backward();
      // A learning-rate warmup. Trap 2: marked static, so every new value is a new graph.
      const double lr = 0.05 * std::min(1.0, static_cast<double>(step + 1) / 10);
      const lazyrt::Scalar rate = flags.fixed ? lazyrt::Scalar(lr) : lazyrt::Scalar::Static(lr);
      {
        lazyrt::NoGradGuard no_grad;
        for (lazyrt::Tensor& p : model.parameters()) {
          p.assign(p - p.grad() * rate);  // TRAP: static scalar
          p.set_grad(lazyrt::Tensor());
        }
      }
      if (!flags.fixed) {
        loss_sum += loss.item();  // TRAP: item inside the step
      }
      lazyrt::mark_step();
      if (flags.fixed) {
        // After the barrier the loss is computed: reading it syncs nothing.
        loss_sum += loss.item();
      }
    }
    std::printf("mean loss %.4f over %lld steps\n%s", loss_sum / static_cast<double>(flags.steps),
                static_cast<long long>(flags.steps), lazyrt::diagnostics_summary().c_str());
  } catch (const lazyrt::Error& e) {
    std::fprintf(stderr, "fragmented_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
