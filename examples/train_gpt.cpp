// Trains a character-level GPT on plain text (Debian's fortunes by default) with AdamW, a warmup and
// cosine learning-rate schedule and gradient clipping by global norm, one sync per step: forward,
// backward, clipping and the update are one graph that compiles once. Every --eval-every steps and at
// the end it computes the validation loss; then it generates a sample from --prompt.
//
// Generation is a lazy program too: the model always reads a fixed window of --context tokens (the
// text so far, left-aligned, the rest padding) and the logits are read at the last real position, a
// device index. Causal attention makes the padding invisible to that position, so every length runs
// the same graph: one compile for the whole sample, not one per length.
//
// The last line of stdout is one JSON object with the run's results and timings.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "examples/flags.h"
#include "examples/gpt.h"
#include "examples/lr_schedule.h"
#include "lazy/devices.h"
#include "lazy/distributed.h"
#include "lazy/metrics.h"
#include "lazy/nn.h"
#include "lazy/optim.h"
#include "lazy/sharding.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"
#include "lazy/text_dataset.h"
#include "nlohmann/json.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using lazyrt::Tensor;

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Flags {
  int64_t steps = 300;
  lazyrt::examples::GptConfig model;
  int64_t batch = 32;
  double lr = 2e-3;
  double weight_decay = 0.1;
  double clip = 1.0;
  uint64_t seed = 0;
  std::string data = lazyrt::data::kFortunesDir;
  int64_t accum = 1;
  bool accum_sync_micro = false;  // --accum-sync micro: a barrier after every micro-batch
  std::string mode = "whole";
  int64_t barrier_every = 0;
  int64_t eval_every = 100;
  int64_t eval_batches = 4;
  int64_t sample_tokens = 200;
  std::string prompt = "The ";
  std::string cache_dir;  // empty: the runtime's default (LAZYRT_CACHE_DIR, ~/.cache/lazyrt)
  std::string report;     // empty: LAZYRT_REPORT, if set
  // --mesh data=D[,model=M]: the axes of a device mesh in order, by name (empty: one device). The batch is
  // split over "data", the blocks' projections over "model" (Megatron tensor parallelism).
  std::vector<std::pair<std::string, int64_t>> mesh;
  int64_t MeshSize() const {
    int64_t n = 1;
    for (const auto& [axis, size] : mesh) n *= size;
    return n;
  }
  int64_t AxisSize(const std::string& name) const {
    for (const auto& [axis, size] : mesh) {
      if (axis == name) return size;
    }
    return 1;
  }
  // --diverge-rank R (for the tests of mismatched ranks): rank R traces a different step graph.
  int64_t diverge_rank = -1;
};

constexpr char kUsage[] =
    "usage: train_gpt [--steps N] [--layers N] [--heads N] [--width N] [--context N] [--batch N] [--lr X]\n"
    "                 [--weight-decay X] [--clip X] [--seed N] [--data FILE|DIR] [--accum N]\n"
    "                 [--accum-sync step|micro] [--mode whole|split] [--barrier-every N] [--dtype f32|bf16]\n"
    "                 [--eval-every N] [--eval-batches N] [--sample-tokens N] [--prompt TEXT]\n"
    "                 [--cache-dir DIR] [--report FILE] [--mesh data=D[,model=M]] [--diverge-rank R]\n"
    "Across processes (tools/run_distributed.sh N ...): --mesh is the global mesh (default data=N), its devices\n"
    "split evenly over the processes; each rank feeds its rows of the global batch.\n";

const lazyrt::examples::FlagParser kFlags("train_gpt", kUsage);
[[noreturn]] void Usage(const std::string& error) { kFlags.Fail(error); }

// --mesh data=D[,model=M]: "data" (the batch split D ways) and "model" (Megatron tensor parallelism over M
// devices), each at most once and in that order, at most 64 devices in all.
std::vector<std::pair<std::string, int64_t>> ParseMesh(const std::string& value) {
  constexpr int64_t kMaxDevices = 64;
  const std::vector<std::string> known = {"data", "model"};
  std::vector<std::pair<std::string, int64_t>> mesh;
  int64_t devices = 1;
  size_t next_known = 0;  // the axes come in known's order
  for (size_t start = 0; start <= value.size();) {
    const size_t comma = std::min(value.find(',', start), value.size());
    const std::string item = value.substr(start, comma - start);
    const size_t equals = item.find('=');
    if (equals == std::string::npos) Usage("--mesh: expected data=D or data=D,model=M, got '" + value + "'");
    const std::string axis = item.substr(0, equals);
    const auto at = std::find(known.begin() + static_cast<ptrdiff_t>(next_known), known.end(), axis);
    if (at == known.end()) {
      Usage("--mesh: unknown or misplaced axis '" + axis + "' in '" + value +
            "' (the axes are data, then model, each at most once)");
    }
    next_known = static_cast<size_t>(at - known.begin()) + 1;
    const int64_t size = kFlags.Integer("--mesh " + axis, item.substr(equals + 1), 1, kMaxDevices);
    devices *= size;
    if (devices > kMaxDevices) {
      Usage("--mesh " + value + " needs more than " + std::to_string(kMaxDevices) + " devices (at most " +
            std::to_string(kMaxDevices) + ")");
    }
    mesh.emplace_back(axis, size);
    start = comma + 1;
  }
  return mesh;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  f.model.vocab = 0;  // from the corpus
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "train_gpt: trains a character-level GPT on plain text with AdamW, one sync per step\n%s"
          "Defaults: 300 steps, 4 layers, 4 heads, width 128, context 128, batch 32, lr 2e-3 (warmup and\n"
          "cosine decay), --data %s (Debian's fortunes, split 90/10 by fortune).\n"
          "The last line of stdout is one JSON object with the run's results and timings.\n",
          kUsage, lazyrt::data::kFortunesDir);
      std::exit(0);
    }
    if (i + 1 >= argc) Usage("missing value for " + flag);
    const std::string value = argv[++i];
    // Bounded so that no product of flags (batch x context x width, steps x accum) overflows.
    auto integer = [&](int64_t min, int64_t max) { return kFlags.Integer(flag, value, min, max); };
    auto real = [&](double min, double max) { return kFlags.Real(flag, value, min, max); };
    if (flag == "--steps") {
      f.steps = integer(1, 1 << 24);
    } else if (flag == "--layers") {
      f.model.layers = integer(1, 64);
    } else if (flag == "--heads") {
      f.model.heads = integer(1, 256);
    } else if (flag == "--width") {
      f.model.width = integer(1, 8192);
    } else if (flag == "--context") {
      f.model.context = integer(1, 4096);
    } else if (flag == "--batch") {
      f.batch = integer(1, 4096);
    } else if (flag == "--lr") {
      f.lr = real(1e-8, 10);
    } else if (flag == "--weight-decay") {
      f.weight_decay = real(0, 10);
    } else if (flag == "--clip") {
      f.clip = real(1e-6, 1e6);
    } else if (flag == "--seed") {
      f.seed = static_cast<uint64_t>(integer(0, int64_t{1} << 40));
    } else if (flag == "--data") {
      f.data = value;
    } else if (flag == "--accum") {
      f.accum = integer(1, 64);
    } else if (flag == "--accum-sync") {
      f.accum_sync_micro = kFlags.Choice(flag, value, {"step", "micro"}) == "micro";
    } else if (flag == "--mode") {
      f.mode = kFlags.Choice(flag, value, {"whole", "split"});
    } else if (flag == "--barrier-every") {
      f.barrier_every = integer(0, 64);
    } else if (flag == "--dtype") {
      f.model.matmul_dtype =
          kFlags.Choice(flag, value, {"f32", "bf16"}) == "f32" ? lazyrt::DType::kF32 : lazyrt::DType::kBF16;
    } else if (flag == "--eval-every") {
      f.eval_every = integer(0, 1 << 24);
    } else if (flag == "--eval-batches") {
      f.eval_batches = integer(1, 1024);
    } else if (flag == "--sample-tokens") {
      f.sample_tokens = integer(0, 1 << 16);
    } else if (flag == "--prompt") {
      if (value.empty()) Usage("--prompt needs at least one character");
      f.prompt = value;
    } else if (flag == "--cache-dir") {
      f.cache_dir = value;
    } else if (flag == "--mesh") {
      f.mesh = ParseMesh(value);
    } else if (flag == "--diverge-rank") {
      f.diverge_rank = integer(0, 1 << 12);
    } else if (flag == "--report") {
      f.report = value;
    } else {
      Usage("unknown flag " + flag);
    }
  }
  if (f.model.width % f.model.heads != 0) {
    Usage("--heads (" + std::to_string(f.model.heads) + ") must divide --width (" + std::to_string(f.model.width) +
          ")");
  }
  if (f.batch % f.AxisSize("data") != 0) {
    Usage("--batch (" + std::to_string(f.batch) + ") must be divisible by the mesh's data axis (" +
          std::to_string(f.AxisSize("data")) + ")");
  }
  f.model.model_parallel = f.AxisSize("model");
  if (f.model.heads % f.model.model_parallel != 0) {
    Usage("--heads (" + std::to_string(f.model.heads) + ") must be divisible by the mesh's model axis (" +
          std::to_string(f.model.model_parallel) + "): each device computes whole heads");
  }
  if (static_cast<int64_t>(f.prompt.size()) > f.model.context) {
    Usage("--prompt has " + std::to_string(f.prompt.size()) + " characters, more than --context (" +
          std::to_string(f.model.context) + ")");
  }
  return f;
}

Tensor Upload(const std::vector<int64_t>& v, std::vector<int64_t> dims) {
  return Tensor::FromData(std::span<const int64_t>(v), dims);
}

// The time this process's devices of the mesh spent in collectives so far, and waiting in them for each
// other, averaged over them (0 without a mesh).
lazyrt::CollectiveInfo MeshCollectives(const std::optional<lazyrt::Mesh>& mesh) {
  lazyrt::CollectiveInfo mean;
  if (!mesh) return mean;
  const std::vector<lazyrt::CollectiveInfo> infos = lazyrt::collective_info(*mesh);
  for (const lazyrt::CollectiveInfo& c : infos) {
    mean.ms += c.ms / static_cast<double>(infos.size());
    mean.wait_ms += c.wait_ms / static_cast<double>(infos.size());
  }
  return mean;
}

// Mean next-token cross-entropy of logits [batch, time, vocab] against targets [batch, time].
Tensor LanguageModelLoss(const Tensor& logits, const Tensor& targets) {
  return lazyrt::nn::cross_entropy(lazyrt::reshape(logits, {-1, logits.dim(2)}), lazyrt::reshape(targets, {-1}));
}

// Scales every gradient so that their global L2 norm is at most `max_norm` (torch's
// clip_grad_norm_), on the device: no value is read back.
void ClipGradNorm(const std::vector<Tensor>& params, double max_norm) {
  lazyrt::NoGradGuard no_grad;
  Tensor squares;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    Tensor s = lazyrt::sum(g * g);
    squares = squares.defined() ? squares + s : s;
  }
  // torch: clip_coef = max_norm / (norm + 1e-6), applied when below 1.
  Tensor coef = lazyrt::minimum(lazyrt::static_scalar(max_norm) / (lazyrt::sqrt(squares) + lazyrt::static_scalar(1e-6)),
                                lazyrt::ones({}));
  for (Tensor p : params) p.set_grad(p.grad() * coef);  // a handle shares its tensor with every copy
}

double ValidationLoss(const lazyrt::examples::Gpt& model, const lazyrt::data::TextCorpus& corpus, const Flags& f) {
  lazyrt::NoGradGuard no_grad;
  const int64_t context = f.model.context;
  // Device data, not a constant: every batch then runs the same graph.
  Tensor total = Tensor::FromData(std::vector<float>{0.0f}, {});
  std::vector<int64_t> inputs, targets;
  for (int64_t b = 0; b < f.eval_batches; ++b) {
    lazyrt::data::ValidationWindows(corpus.val, f.batch, context, f.batch * f.eval_batches, b, inputs, targets);
    total = total + LanguageModelLoss(model(Upload(inputs, {f.batch, context})), Upload(targets, {f.batch, context}));
    lazyrt::sync();
  }
  return total.item() / static_cast<double>(f.eval_batches);
}

// Samples `count` tokens after `prompt` (temperature 0.8, Gumbel-max on the device RNG).
std::string Sample(const lazyrt::examples::Gpt& model, const lazyrt::data::TextCorpus& corpus, const Flags& f,
                   const std::vector<int32_t>& prompt) {
  lazyrt::NoGradGuard no_grad;
  const int64_t context = f.model.context, vocab = corpus.vocab_size();
  std::vector<int32_t> text = prompt;
  std::vector<int64_t> window(static_cast<size_t>(context), 0);
  for (int64_t n = 0; n < f.sample_tokens; ++n) {
    const int64_t length = std::min<int64_t>(static_cast<int64_t>(text.size()), context);
    std::copy(text.end() - length, text.end(), window.begin());
    Tensor logits = lazyrt::reshape(model(Upload(window, {1, context})), {context, vocab});
    Tensor last = lazyrt::index_select(logits, 0, Upload({length - 1}, {1}));  // [1, vocab]
    Tensor gumbel = -lazyrt::log(-lazyrt::log(lazyrt::rand({1, vocab}, lazyrt::static_scalar(1e-20))));
    Tensor next = lazyrt::argmax(last * lazyrt::static_scalar(1 / 0.8) + gumbel, 1);
    lazyrt::sync();
    text.push_back(static_cast<int32_t>(next.item()));
  }
  return corpus.Decode(text);
}

}  // namespace

// The mesh sets each process's device count (its devices split evenly over the processes); an environment
// that asks for fewer devices is a mistake to report.
void CheckDeviceCount(const Flags& f, int64_t ranks) {
  const char* devices = std::getenv("LAZYRT_DEVICES");
  if (devices == nullptr || *devices == '\0' || f.mesh.empty()) return;
  const int64_t needed = f.MeshSize() / ranks;
  const long long available = std::strtoll(devices, nullptr, 10);
  if (available > 0 && available < needed) {
    Usage("--mesh needs " + std::to_string(needed) + " devices but LAZYRT_DEVICES is " + devices +
          " (set it to at least " + std::to_string(needed) + ", or unset it)");
  }
}

int main(int argc, char** argv) {
  const Clock::time_point process_start = Clock::now();
  Flags flags = ParseFlags(argc, argv);
  try {
    // Across processes: the mesh is global, each process holds its share of its devices.
    lazyrt::distributed::initialize();
    const int64_t ranks = lazyrt::distributed::world_size(), rank = lazyrt::distributed::rank();
    if (ranks > 1 && flags.mesh.empty()) flags.mesh = {{"data", ranks}};
    if (ranks > 1 && (flags.AxisSize("data") % ranks != 0 || flags.batch % flags.AxisSize("data") != 0)) {
      // Each rank feeds whole rows of the batch: the data axis (the mesh's outermost) is split over the ranks.
      Usage("--mesh data=" + std::to_string(flags.AxisSize("data")) + " must be a multiple of the " +
            std::to_string(ranks) + " processes and divide --batch (" + std::to_string(flags.batch) + ")");
    }
    CheckDeviceCount(flags, ranks);
    if (!lazyrt::examples::ConfigureRuntime("train_gpt", flags.cache_dir, flags.report,
                                            flags.mesh.empty() ? 0 : static_cast<int>(flags.MeshSize() / ranks))) {
      return 2;
    }

    absl::StatusOr<lazyrt::data::TextCorpus> corpus = lazyrt::data::LoadCorpus(flags.data, flags.model.context + 1);
    if (!corpus.ok()) {
      std::fprintf(stderr, "train_gpt: --data %s: %s\n", flags.data.c_str(),
                   std::string(corpus.status().message()).c_str());
      return 1;
    }
    absl::StatusOr<std::vector<int32_t>> prompt = corpus->Encode(flags.prompt);
    if (!prompt.ok()) Usage("--prompt: " + std::string(prompt.status().message()));
    flags.model.vocab = corpus->vocab_size();
    lazyrt::examples::Gpt model(flags.model, flags.seed);
    const std::vector<Tensor> params = model.parameters();
    int64_t param_count = 0;
    for (const Tensor& p : params) param_count += p.numel();
    // On a mesh: each device a slice of the batch over "data" (the SPMD partitioner all-reduces the
    // gradients), the blocks' projections split over "model" (Gpt::shard), the optimizer's moments laid out
    // as their parameters.
    std::optional<lazyrt::Mesh> mesh;
    if (!flags.mesh.empty()) {
      std::vector<int64_t> shape;
      std::vector<std::string> names;
      for (const auto& [axis, size] : flags.mesh) {
        names.push_back(axis);
        shape.push_back(size);
      }
      mesh.emplace(shape, names);
      model.shard(*mesh);
    }
    const bool split_batch = mesh && mesh->axis_index("data").has_value();
    // Across processes every rank draws the same global batch and feeds its rows of it: the same global
    // batch as one process on the whole mesh.
    auto batch_of = [&](const std::vector<int64_t>& tokens) {
      if (ranks == 1) {
        Tensor t = Upload(tokens, {flags.batch, flags.model.context});
        return split_batch ? lazyrt::mark_sharding(t, *mesh, {"data", {}}) : t;
      }
      const int64_t rows = flags.batch / ranks, row = flags.model.context;
      const std::vector<int64_t> mine(tokens.begin() + rank * rows * row, tokens.begin() + (rank + 1) * rows * row);
      return lazyrt::distributed::make_array_from_process_local_data(Upload(mine, {rows, row}), *mesh, {"data", {}});
    };
    lazyrt::AdamW optimizer(params, flags.lr, 0.9, 0.95, 1e-8, flags.weight_decay);
    const int64_t context = flags.model.context;
    const bool live = isatty(STDOUT_FILENO);

    std::vector<int64_t> inputs, targets;
    std::vector<Tensor> losses;  // every step's loss, read at the end (each step has synced it)
    double startup_ms = 0, first_step_ms = 0, val_loss = NAN;
    // Steps 2..N, from the start of each run of steps to its last result (the device runs behind the
    // host: sync() returns before the step's work ends), evaluations left out.
    double steady_ms = 0, steady_collective_ms = 0, steady_collective_wait_ms = 0;
    std::optional<Clock::time_point> steady_since;
    lazyrt::CollectiveInfo collectives_at_start;  // of the run of steps in progress
    Tensor loss;
    for (int64_t step = 0; step < flags.steps; ++step) {
      const Clock::time_point step_start = Clock::now();
      if (step == 0) startup_ms = MsBetween(process_start, step_start);
      if (step > 0 && !steady_since) {
        steady_since = step_start;
        collectives_at_start = MeshCollectives(mesh);
      }
      // A device value: changing it never recompiles.
      optimizer.set_lr(lazyrt::examples::WarmupCosineLr(flags.lr, flags.steps, step));
      Tensor step_loss;
      for (int64_t micro = 0; micro < flags.accum; ++micro) {
        lazyrt::data::TrainingWindows(corpus->train, flags.batch, context, flags.seed, step * flags.accum + micro,
                                      inputs, targets);
        auto barrier = [&](int layer) {
          if (flags.barrier_every > 0 && layer % flags.barrier_every == 0) lazyrt::barrier();
        };
        loss = LanguageModelLoss(model(batch_of(inputs), barrier), batch_of(targets));
        if (flags.accum > 1) loss = loss * lazyrt::static_scalar(1.0 / static_cast<double>(flags.accum));
        if (rank == flags.diverge_rank) loss = loss * lazyrt::static_scalar(0.5);
        loss.backward();
        // Syncing each micro-batch, as torch_xla users often do, makes the field report's graph variants:
        // the first micro-batch creates the gradients, the middle ones add to them, the last also updates.
        // By default the micro-batches are traced into the step's one graph.
        if (flags.accum_sync_micro && micro + 1 < flags.accum) lazyrt::barrier();
        lazyrt::NoGradGuard no_grad;
        step_loss = step_loss.defined() ? step_loss + loss.detach() : loss.detach();
      }
      if (flags.mode == "split") lazyrt::barrier();  // forward+backward, then clipping and the update
      ClipGradNorm(params, flags.clip);
      optimizer.step();
      optimizer.zero_grad();
      losses.push_back(step_loss);
      lazyrt::sync();
      if (step == 0) {
        step_loss.item();  // the first step's result is ready
        first_step_ms = MsBetween(step_start, Clock::now());
      }
      const bool last = step + 1 == flags.steps;
      if (last || (flags.eval_every > 0 && (step + 1) % flags.eval_every == 0)) {
        const double train_loss = step_loss.item();  // waits for the steps before it
        if (steady_since) {
          steady_ms += MsBetween(*std::exchange(steady_since, std::nullopt), Clock::now());
          const lazyrt::CollectiveInfo now = MeshCollectives(mesh);
          steady_collective_ms += now.ms - collectives_at_start.ms;
          steady_collective_wait_ms += now.wait_ms - collectives_at_start.wait_ms;
        }
        val_loss = ValidationLoss(model, *corpus, flags);
        std::printf("%sstep %lld/%lld  loss %.4f  val_loss %.4f\n", live ? "\r" : "", static_cast<long long>(step + 1),
                    static_cast<long long>(flags.steps), train_loss, val_loss);
        std::fflush(stdout);
      } else if (live && step % 10 == 0) {
        std::printf("\r  step %lld/%lld  loss %.4f ", static_cast<long long>(step + 1),
                    static_cast<long long>(flags.steps), step_loss.item());
        std::fflush(stdout);
      }
    }
    const std::string sample = Sample(model, *corpus, flags, *prompt);
    std::printf("--- sample ---\n%s\n--------------\n", sample.c_str());

    std::vector<double> loss_values;
    for (const Tensor& l : losses) loss_values.push_back(l.item());
    const double steady_step_ms = flags.steps > 1 ? steady_ms / static_cast<double>(flags.steps - 1) : first_step_ms;
    const auto json_number = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
    nlohmann::json out;
    out["val_loss"] = json_number(val_loss);
    out["final_loss"] = json_number(loss_values.back());
    for (int64_t s : {1, 10, 100}) {
      if (s <= flags.steps) out["loss_step" + std::to_string(s)] = json_number(loss_values[static_cast<size_t>(s - 1)]);
    }
    nlohmann::json first(nlohmann::json::array());
    for (size_t s = 0; s < std::min<size_t>(10, loss_values.size()); ++s) first.push_back(json_number(loss_values[s]));
    out["losses_first10"] = first;
    out["vocab"] = corpus->vocab_size();
    out["parameters"] = param_count;
    out["steps"] = flags.steps;
    out["startup_ms"] = std::round(startup_ms * 10) / 10;
    out["first_step_ms"] = std::round(first_step_ms * 100) / 100;
    out["steady_step_ms"] = std::round(steady_step_ms * 1000) / 1000;
    out["tokens_per_s"] = std::round(static_cast<double>(flags.batch * context * flags.accum) / steady_step_ms * 1000);
    out["graphs_compiled"] = lazyrt::CounterValue(lazyrt::counters::kGraphsCompiled);
    out["persistent_cache_hits"] = lazyrt::CounterValue(lazyrt::counters::kPersistentCacheHit);
    out["persistent_cache_misses"] = lazyrt::CounterValue(lazyrt::counters::kPersistentCacheMiss);
    out["devices"] = mesh ? mesh->size() : 1;
    out["ranks"] = ranks;
    // Cross-process collectives per step (this process's partitions; the whole run, evaluations too).
    const lazyrt::distributed::CollectiveStats collectives = lazyrt::distributed::collective_stats();
    const double per_step = 1.0 / static_cast<double>(flags.steps);
    out["collectives_per_step"] = std::round(static_cast<double>(collectives.calls) * per_step * 10) / 10;
    out["collective_bytes_per_step"] = std::round(static_cast<double>(collectives.bytes_received) * per_step);
    // Each device's peak over the run: its parameters and optimizer state (replicated, or its piece of the
    // weights split over "model"), the activations of its batch shard.
    std::vector<int64_t> peaks;
    for (const lazyrt::MemoryInfo& m : mesh ? lazyrt::memory_info(*mesh) : std::vector{lazyrt::memory_info()}) {
      peaks.push_back(m.peak_bytes);
    }
    out["peak_device_bytes"] = peaks;
    // The collective share of a steady step: the time a device spent in collectives per step (averaged over
    // the mesh's devices, which run in parallel; waiting at the rendezvous included) over the step's time.
    const double collective_ms_per_step =
        flags.steps > 1 ? steady_collective_ms / static_cast<double>(flags.steps - 1) : 0;
    out["collective_ms_per_step"] = std::round(collective_ms_per_step * 1000) / 1000;
    out["collective_share"] = std::round(collective_ms_per_step / steady_step_ms * 10000) / 10000;
    // Of which waiting at the rendezvous for the other partitions (devices sharing the cores take turns).
    out["collective_wait_ms_per_step"] =
        std::round((flags.steps > 1 ? steady_collective_wait_ms / static_cast<double>(flags.steps - 1) : 0) * 1000) /
        1000;
    out["spmd_replicated_fallbacks"] = lazyrt::CounterValue(lazyrt::counters::kSpmdReplicatedFallbacks);
    out["mode"] = flags.mode;
    out["accum"] = flags.accum;
    out["dtype"] = flags.model.matmul_dtype == lazyrt::DType::kF32 ? "f32" : "bf16";
    out["sample"] = sample;
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } catch (const lazyrt::Error& e) {
    std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
