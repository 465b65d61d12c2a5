// examples/train_gpt's character-level GPT in libtorch's C++ eager mode: the same corpus, windows
// (lazy/text_dataset.h), splitmix initial weights in the same order (examples/gpt.cc), schedule
// (examples/lr_schedule.h), clipping and AdamW. Built only when CMake finds Torch (Debian's
// libtorch-dev); lazyrt's runtime is not linked. The last stdout line is one JSON object with the keys
// of benchmarks/peers/torch_gpt.py's.
//
//   peer_libtorch_gpt [--steps N] [--warmup N] [--layers N] [--heads N] [--width N] [--context N]
//                     [--batch N] [--lr X] [--seed N] [--threads N] [--data FILE|DIR] [--dtype f32|bf16]
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "examples/lr_schedule.h"
#include "lazy/splitmix.h"
#include "lazy/text_dataset.h"

namespace {

struct Flags {
  int64_t steps = 100, warmup = 5, layers = 4, heads = 4, width = 128, context = 128, batch = 32, seed = 0;
  int threads = 2;
  double lr = 2e-3, weight_decay = 0.1, clip = 1.0;
  std::string data = lazyrt::data::kFortunesDir, dtype = "f32";
};

[[noreturn]] void Usage(const std::string& error) {
  std::fprintf(stderr,
               "peer_libtorch_gpt: %s\nusage: peer_libtorch_gpt [--steps N] [--warmup N] [--layers N] [--heads N] "
               "[--width N] [--context N] [--batch N] [--lr X] [--seed N] [--threads N] [--data FILE|DIR] "
               "[--dtype f32|bf16]\n",
               error.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage("missing value for " + flag);
    const std::string value = argv[i + 1];
    char* end = nullptr;
    auto integer = [&](int64_t min, int64_t max) {
      const long long v = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v < min || v > max) {
        Usage(flag + " needs an integer from " + std::to_string(min) + " to " + std::to_string(max));
      }
      return static_cast<int64_t>(v);
    };
    if (flag == "--steps")
      f.steps = integer(2, 1 << 24);
    else if (flag == "--warmup")
      f.warmup = integer(0, 1 << 24);
    else if (flag == "--layers")
      f.layers = integer(1, 64);
    else if (flag == "--heads")
      f.heads = integer(1, 256);
    else if (flag == "--width")
      f.width = integer(1, 8192);
    else if (flag == "--context")
      f.context = integer(1, 4096);
    else if (flag == "--batch")
      f.batch = integer(1, 4096);
    else if (flag == "--seed")
      f.seed = integer(0, int64_t{1} << 40);
    else if (flag == "--threads")
      f.threads = static_cast<int>(integer(1, 256));
    else if (flag == "--lr") {
      f.lr = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(f.lr > 0 && f.lr <= 10)) Usage("--lr needs a number in (0, 10]");
    } else if (flag == "--data")
      f.data = value;
    else if (flag == "--dtype") {
      if (value != "f32" && value != "bf16") Usage("--dtype is f32 or bf16");
      f.dtype = value;
    } else
      Usage("unknown flag " + flag);
  }
  if (f.width % f.heads != 0) Usage("--heads must divide --width");
  if (f.warmup + 1 >= f.steps) Usage("--steps must exceed --warmup + 1");
  return f;
}

namespace F = torch::nn::functional;

// examples/gpt.cc's model: parameters created (and drawn) in its order.
class Gpt {
 public:
  Gpt(const Flags& f, int64_t vocab) : f_(f), seed_(static_cast<uint64_t>(f.seed)) {
    const int64_t c = f.width;
    const double stddev = 0.02, residual = 0.02 / std::sqrt(2.0 * static_cast<double>(f.layers));
    tok_emb_ = Add({vocab, c}, stddev);
    pos_emb_ = Add({f.context, c}, stddev);
    for (int64_t l = 0; l < f.layers; ++l) {
      Block b;
      b.ln1_w = Add({c}, 0, 1);
      b.ln1_b = Add({c}, 0, 0);
      b.qkv_w = Add({3 * c, c}, stddev);
      b.qkv_b = Add({3 * c}, 0, 0);
      b.proj_w = Add({c, c}, residual);
      b.proj_b = Add({c}, 0, 0);
      b.ln2_w = Add({c}, 0, 1);
      b.ln2_b = Add({c}, 0, 0);
      b.fc_w = Add({4 * c, c}, stddev);
      b.fc_b = Add({4 * c}, 0, 0);
      b.fc_proj_w = Add({c, 4 * c}, residual);
      b.fc_proj_b = Add({c}, 0, 0);
      blocks_.push_back(b);
    }
    lnf_w_ = Add({c}, 0, 1);
    lnf_b_ = Add({c}, 0, 0);
    head_w_ = Add({vocab, c}, stddev);
  }

  torch::Tensor Forward(const torch::Tensor& tokens) const {
    const int64_t batch = tokens.size(0), time = tokens.size(1), c = f_.width, h = f_.heads, d = c / h;
    const torch::Tensor causal = torch::ones({time, time}, torch::kBool).tril();
    auto ln = [&](const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
      return F::layer_norm(x, F::LayerNormFuncOptions({c}).weight(w).bias(b).eps(1e-5));
    };
    torch::Tensor x = F::embedding(tokens, tok_emb_) + pos_emb_.slice(0, 0, time);
    for (const Block& b : blocks_) {
      const torch::Tensor qkv = F::linear(ln(x, b.ln1_w, b.ln1_b), b.qkv_w, b.qkv_b);
      auto head_major = [&](int64_t part) {
        return qkv.slice(2, part * c, (part + 1) * c).reshape({batch, time, h, d}).permute({0, 2, 1, 3});
      };
      torch::Tensor scores =
          torch::matmul(head_major(0), head_major(1).transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(d)));
      scores = scores.masked_fill(causal.logical_not(), -std::numeric_limits<float>::infinity());
      const torch::Tensor y =
          torch::matmul(scores.softmax(-1), head_major(2)).permute({0, 2, 1, 3}).reshape({batch, time, c});
      x = x + F::linear(y, b.proj_w, b.proj_b);
      x = x + F::linear(F::gelu(F::linear(ln(x, b.ln2_w, b.ln2_b), b.fc_w, b.fc_b)), b.fc_proj_w, b.fc_proj_b);
    }
    return F::linear(ln(x, lnf_w_, lnf_b_), head_w_);
  }

  const std::vector<torch::Tensor>& parameters() const { return params_; }

 private:
  struct Block {
    torch::Tensor ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
  };

  torch::Tensor Add(std::vector<int64_t> dims, double stddev, float constant = 0) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    const std::vector<float> values =
        stddev > 0 ? lazyrt::splitmix::Uniform(n, stddev * std::sqrt(3.0), seed_ * 1000 + params_.size())
                   : std::vector<float>(static_cast<size_t>(n), constant);
    torch::Tensor t = torch::from_blob(const_cast<float*>(values.data()), dims).clone().requires_grad_();
    params_.push_back(t);
    return t;
  }

  Flags f_;
  uint64_t seed_;
  std::vector<torch::Tensor> params_;
  torch::Tensor tok_emb_, pos_emb_, lnf_w_, lnf_b_, head_w_;
  std::vector<Block> blocks_;
};

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  torch::set_num_threads(flags.threads);
  absl::StatusOr<lazyrt::data::TextCorpus> corpus = lazyrt::data::LoadCorpus(flags.data, flags.context + 1);
  if (!corpus.ok()) {
    std::fprintf(stderr, "peer_libtorch_gpt: %s\n", std::string(corpus.status().message()).c_str());
    return 1;
  }
  const int64_t vocab = corpus->vocab_size();
  Gpt model(flags, vocab);
  torch::optim::AdamW optimizer(
      model.parameters(),
      torch::optim::AdamWOptions(flags.lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(flags.weight_decay));
  using Clock = std::chrono::steady_clock;
  std::vector<double> step_ms;
  std::vector<torch::Tensor> losses;
  std::vector<int64_t> inputs, targets;
  for (int64_t step = 0; step < flags.steps; ++step) {
    const Clock::time_point start = Clock::now();
    for (auto& group : optimizer.param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options())
          .lr(lazyrt::examples::WarmupCosineLr(flags.lr, flags.steps, step));
    }
    lazyrt::data::TrainingWindows(corpus->train, flags.batch, flags.context, static_cast<uint64_t>(flags.seed), step,
                                  inputs, targets);
    const torch::Tensor x = torch::from_blob(inputs.data(), {flags.batch, flags.context}, torch::kInt64).clone();
    const torch::Tensor y = torch::from_blob(targets.data(), {flags.batch * flags.context}, torch::kInt64).clone();
    optimizer.zero_grad();
    torch::Tensor logits;
    if (flags.dtype == "bf16") {
      // torch.autocast("cpu", bfloat16) from C++: matmuls in bf16, the rest as autocast's op lists say.
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
      logits = model.Forward(x).to(torch::kFloat32);
      at::autocast::set_cpu_enabled(false);
      at::autocast::clear_cache();
    } else {
      logits = model.Forward(x);
    }
    const torch::Tensor loss = F::cross_entropy(logits.reshape({-1, vocab}), y);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model.parameters(), flags.clip);
    optimizer.step();
    losses.push_back(loss.detach());
    if (step == 0) losses[0].item<float>();  // the first step ends when its result is ready
    step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::vector<double> steady(step_ms.begin() + 1 + flags.warmup, step_ms.end());
  std::sort(steady.begin(), steady.end());
  const size_t m = steady.size() / 2;
  const double median = steady.size() % 2 == 1 ? steady[m] : (steady[m - 1] + steady[m]) / 2;
  std::string first10;
  for (size_t s = 0; s < std::min<size_t>(10, losses.size()); ++s) {
    char number[32];
    std::snprintf(number, sizeof number, "%s%.9g", s ? ", " : "", losses[s].item<double>());
    first10 += number;
  }
  std::printf(
      "{\"peer\": \"libtorch%s\", \"threads\": %d, \"steps\": %lld, \"first_step_ms\": %.3f, "
      "\"steady_step_ms\": %.4f, \"tokens_per_s\": %.0f, \"losses_first10\": [%s], \"final_loss\": %.9g",
      flags.dtype == "bf16" ? "-bf16" : "", torch::get_num_threads(), static_cast<long long>(flags.steps), step_ms[0],
      median, static_cast<double>(flags.batch * flags.context) / median * 1e3, first10.c_str(),
      losses.back().item<double>());
  for (int64_t s : {1, 10, 100}) {
    if (s <= flags.steps) {
      std::printf(", \"loss_step%lld\": %.9g", static_cast<long long>(s),
                  losses[static_cast<size_t>(s - 1)].item<double>());
    }
  }
  std::printf(", \"vocab\": %lld}\n", static_cast<long long>(vocab));
  return 0;
}
