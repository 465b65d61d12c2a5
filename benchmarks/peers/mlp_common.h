// What every C++ peer of the MLP step shares with benchmarks/peers/torch_mlp.py, so all of them train
// the same model on the same batches: the IDX reader, the normalization, the initial weights, the
// batch order, the flags and the JSON result line. Deliberately free of lazyrt and libtorch headers
// (libtorch and lazyrt are never linked into one binary), and of any third-party library but zlib.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "lazy/host_memory.h"
#include "lazy/splitmix.h"

namespace peers {

using Clock = std::chrono::steady_clock;
inline double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// 784-256-128-10, as examples/train_mlp.cpp.
inline const std::vector<int64_t> kLayerSizes = {784, 256, 128, 10};

struct Flags {
  std::string data = "/usr/share/datasets/fashion-mnist";
  int64_t steps = 200;
  int64_t warmup = 10;  // steps after the first that the steady median leaves out
  int64_t batch = 128;
  double lr = 1e-3;
  int threads = 2;
  int64_t op_iterations = 200000;  // iterations of the per-op cost loop
};

[[noreturn]] inline void Usage(const char* program, const std::string& error) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--data DIR] [--steps N] [--warmup N] [--batch N] [--lr X] [--threads N] "
               "[--op-iterations N]\n",
               program, error.c_str(), program);
  std::exit(2);
}

inline Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage(argv[0], "missing value for " + flag);
    const std::string value = argv[++i];
    char* end = nullptr;
    auto integer = [&](int64_t min) {
      const long long v = std::strtoll(value.c_str(), &end, 10);
      if (*end != '\0' || v < min) Usage(argv[0], flag + " needs an integer >= " + std::to_string(min));
      return static_cast<int64_t>(v);
    };
    if (flag == "--data") {
      f.data = value;
    } else if (flag == "--steps") {
      f.steps = integer(2);
    } else if (flag == "--warmup") {
      f.warmup = integer(0);
    } else if (flag == "--batch") {
      f.batch = integer(1);
    } else if (flag == "--lr") {
      f.lr = std::strtod(value.c_str(), &end);
      if (*end != '\0' || !(f.lr > 0)) Usage(argv[0], "--lr needs a positive number");
    } else if (flag == "--threads") {
      f.threads = static_cast<int>(integer(1));
    } else if (flag == "--op-iterations") {
      f.op_iterations = integer(1);
    } else {
      Usage(argv[0], "unknown flag " + flag);
    }
  }
  if (f.warmup + 1 >= f.steps) Usage(argv[0], "--steps must exceed --warmup + 1");
  return f;
}

inline std::string ReadGz(const std::string& path) {
  gzFile in = gzopen(path.c_str(), "rb");
  if (in == nullptr) throw std::runtime_error("cannot open " + path + " (Debian package dataset-fashion-mnist)");
  std::string bytes;
  char chunk[1 << 16];
  int n;
  while ((n = gzread(in, chunk, sizeof chunk)) > 0) bytes.append(chunk, static_cast<size_t>(n));
  const bool failed = n < 0;
  gzclose(in);
  if (failed) throw std::runtime_error("cannot decompress " + path);
  return bytes;
}

inline uint32_t BigEndian32(const std::string& b, size_t at) {
  return (uint32_t{static_cast<unsigned char>(b[at])} << 24) | (uint32_t{static_cast<unsigned char>(b[at + 1])} << 16) |
         (uint32_t{static_cast<unsigned char>(b[at + 2])} << 8) | uint32_t{static_cast<unsigned char>(b[at + 3])};
}

struct Dataset {
  int64_t count = 0, features = 0;
  lazyrt::HostVector<float> images;  // standardized; batches are read where they are (GetBatch)
  std::vector<int64_t> labels;
};

// The training split, pixels scaled to [0, 1] in f32 (as lazy/idx_dataset.cc does) and then
// standardized with the split's own mean and deviation, accumulated in double in file order (as
// examples/train_mlp.cpp does; torch_mlp.py reproduces it).
inline Dataset LoadTrain(const std::string& dir) {
  const std::string images = ReadGz(dir + "/train-images-idx3-ubyte.gz");
  const std::string labels = ReadGz(dir + "/train-labels-idx1-ubyte.gz");
  if (images.size() < 16 || BigEndian32(images, 0) != 0x803 || labels.size() < 8 || BigEndian32(labels, 0) != 0x801) {
    throw std::runtime_error("not IDX image/label files in " + dir);
  }
  Dataset d;
  d.count = BigEndian32(images, 4);
  d.features = int64_t{BigEndian32(images, 8)} * BigEndian32(images, 12);
  if (images.size() != 16 + static_cast<size_t>(d.count * d.features) ||
      labels.size() != 8 + static_cast<size_t>(d.count)) {
    throw std::runtime_error("truncated IDX files in " + dir);
  }
  d.images.resize(static_cast<size_t>(d.count * d.features));
  double sum = 0, sq = 0;
  for (size_t i = 0; i < d.images.size(); ++i) {
    const float v = static_cast<unsigned char>(images[16 + i]) / 255.0f;
    d.images[i] = v;
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(d.images.size());
  const double mean = sum / n, stddev = std::sqrt(sq / n - mean * mean);
  for (float& v : d.images) v = static_cast<float>((v - mean) / stddev);
  d.labels.resize(static_cast<size_t>(d.count));
  for (int64_t i = 0; i < d.count; ++i)
    d.labels[static_cast<size_t>(i)] = static_cast<unsigned char>(labels[8 + static_cast<size_t>(i)]);
  return d;
}

// Batch `step` in a fixed order: consecutive slices of the file, wrapping after the last full one.
// No shuffle, so every peer (C++ or Python) sees the very same rows without sharing an RNG. Its images are
// the dataset's rows where they are, which each peer's batch tensor reads in place (lazyrt's FromExternal,
// torch's from_blob and from_numpy); its labels as i64 in `labels`, which each peer copies.
inline std::span<const float> GetBatch(const Dataset& d, int64_t batch, int64_t step, std::vector<int64_t>& labels) {
  const int64_t first = (step % (d.count / batch)) * batch;
  labels.assign(d.labels.begin() + first, d.labels.begin() + first + batch);
  return std::span<const float>(d.images).subspan(static_cast<size_t>(first * d.features),
                                                  static_cast<size_t>(batch * d.features));
}

// Layer `l`'s weight [out, in] (splitmix stream 2l) and bias [out] (stream 2l+1): torch.nn.Linear's bounds
// (uniform in +-1/sqrt(in)), but the same numbers in every peer, so their losses can be compared.
struct LayerInit {
  int64_t in, out;
  std::vector<float> weight, bias;
};
inline std::vector<LayerInit> InitLayers() {
  std::vector<LayerInit> layers;
  for (size_t l = 0; l + 1 < kLayerSizes.size(); ++l) {
    const int64_t in = kLayerSizes[l], out = kLayerSizes[l + 1];
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    layers.push_back(
        {in, out, lazyrt::splitmix::Uniform(out * in, bound, 2 * l), lazyrt::splitmix::Uniform(out, bound, 2 * l + 1)});
  }
  return layers;
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Step times: [0] is the first step (trace + compile + run for a lazy peer). The steady figure is the
// median of the steps after the first `warmup` + 1, so one slow step (a page fault, a neighbour's
// build on the shared machine) cannot move it.
struct Result {
  std::string peer;
  int threads = 0;
  int64_t steps = 0, warmup = 0;
  std::vector<double> step_ms;
  double total_ms = 0;  // all steps, waiting for the last one to finish
  double first_loss = 0, last_loss = 0;
  double op_ns = -1;  // per elementwise op: trace cost for a lazy peer, dispatch + run for an eager one
  std::string op_kind;
  // The calling thread's CPU time per steady step, where the peer measures it (lazyrt: what tracing,
  // syncing and launching a step cost the host, which shares the machine's cores with the device, plus
  // any executable small enough to run inline on it; the MLP step has none).
  double host_cpu_us = -1;
};

// The calling thread's CPU time so far.
inline double ThreadCpuUs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

inline void PrintResult(const Result& r) {
  const std::vector<double> steady(r.step_ms.begin() + 1 + r.warmup, r.step_ms.end());
  std::printf(
      "{\"peer\": \"%s\", \"threads\": %d, \"steps\": %lld, \"warmup\": %lld, \"first_step_ms\": %.3f, "
      "\"steady_step_ms\": %.4f, \"mean_step_ms\": %.4f, \"first_loss\": %.7g, \"last_loss\": %.7g, "
      "\"op_ns\": %.1f, \"op_kind\": \"%s\"",
      r.peer.c_str(), r.threads, static_cast<long long>(r.steps), static_cast<long long>(r.warmup), r.step_ms[0],
      Median(steady), r.total_ms / static_cast<double>(r.steps), r.first_loss, r.last_loss, r.op_ns, r.op_kind.c_str());
  if (r.host_cpu_us >= 0) std::printf(", \"host_cpu_us\": %.1f", r.host_cpu_us);
  std::printf("}\n");
}

}  // namespace peers
