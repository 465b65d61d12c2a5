// Writes real inputs for the fuzzers' seed corpora (used by make_seed_corpus.sh):
//
//   seed_corpus_tool payloads CACHE_DIR OUT_DIR
//       the payload (a serialized executable) of every sound entry in a persistent cache directory,
//       one file per entry
//   seed_corpus_tool graphs MODULE_OUT_DIR EXECUTABLE_OUT_DIR
//       a few small graphs built with the lazy API, covering every device opcode: each lowered
//       (lowering::LowerGraph) and written as a serialized proto::Module, and compiled and written as
//       a serialized executable
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "cache/store.h"
#include "ir/post_order.h"
#include "lazy/nn.h"
#include "lazy/options.h"
#include "lazy/runtime.h"
#include "lazy/tensor.h"
#include "lowering/lower.h"
#include "pjrt_sim/compiler.h"

namespace {

using lazyrt::Tensor;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "seed_corpus_tool: %s\n", what.c_str());
  std::exit(1);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) Fail("cannot write " + path);
}

int Payloads(const std::string& cache_dir, const std::string& out_dir) {
  absl::StatusOr<std::unique_ptr<lazyrt::cache::Store>> lister =
      lazyrt::cache::Store::Open({.dir = cache_dir, .producer_version = "any", .read_only = true});
  if (!lister.ok()) Fail(std::string(lister.status().message()));
  absl::StatusOr<std::vector<lazyrt::cache::ListedEntry>> listed = (*lister)->List();
  if (!listed.ok()) Fail(std::string(listed.status().message()));
  int written = 0;
  for (const lazyrt::cache::ListedEntry& e : *listed) {
    const auto* header = std::get_if<lazyrt::cache::EntryHeader>(&e.header);
    if (header == nullptr) continue;
    absl::StatusOr<std::unique_ptr<lazyrt::cache::Store>> store = lazyrt::cache::Store::Open(
        {.dir = cache_dir, .producer_version = header->producer_version, .read_only = true});
    if (!store.ok()) Fail(std::string(store.status().message()));
    lazyrt::cache::LookupResult found = (*store)->Lookup(e.key);
    if (const auto* entry = std::get_if<lazyrt::cache::Entry>(&found)) {
      WriteFile(out_dir + "/" + e.key + ".exe", entry->payload);
      ++written;
    }
  }
  std::printf("seed_corpus_tool: %d payloads from %s\n", written, cache_dir.c_str());
  return written > 0 ? 0 : 1;
}

Tensor Range(std::vector<int64_t> dims, float scale = 0.25f) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(static_cast<int64_t>(i % 7) - 3);
  return Tensor::FromData(v, dims);
}

Tensor Indices(std::vector<int64_t> values, std::vector<int64_t> dims) {
  return Tensor::FromData(std::span<const int64_t>(values), dims);
}

// Small graphs that between them use every op the lowering emits.
std::vector<std::pair<std::string, std::vector<Tensor>>> Graphs() {
  using namespace lazyrt;
  std::vector<std::pair<std::string, std::vector<Tensor>>> graphs;
  {
    Tensor x = Range({4, 8}), w1 = Range({8, 6}), b1 = Range({6}), w2 = Range({6, 3});
    w1.requires_grad_();
    w2.requires_grad_();
    Tensor logits = matmul(relu(matmul(x, w1) + b1), w2);
    Tensor loss = mean(neg(sum(log_softmax(logits, 1) * one_hot(Indices({0, 2, 1, 2}, {4}), 3), {1})));
    loss.backward();
    graphs.push_back({"mlp_train_step", {loss, w1.grad(), w2.grad()}});
  }
  {
    Tensor x = Range({3, 5});
    graphs.push_back({"reductions", {sum(x, {1}), mean(x, {0}, true), max(x, {1}), argmax(x, 1), softmax(x, 0)}});
  }
  {
    Tensor x = Range({4, 3});
    graphs.push_back({"indexing", {index_select(x, 0, Indices({3, 0, 1}, {3})),
                                   gather(x, 1, Indices({0, 2, 1, 1, 0, 2, 2, 2, 0, 1, 1, 0}, {4, 3}))}});
  }
  {
    Tensor x = Range({2, 3, 4});
    graphs.push_back({"movement", {permute(x, {2, 0, 1}), transpose(x, 0, 2), reshape(x, {6, 4}),
                                   slice(x, 2, 1, 4, 2), cat({x, x * 2.0}, 1), expand(Range({1, 3, 1}), {2, 3, 4})}});
  }
  {
    Tensor a = Range({6}), b = Range({6}, -0.5f);
    Tensor m = logical_and(gt(a, b), logical_not(eq(a, b)));
    graphs.push_back({"logic", {where(logical_or(m, lt(a, 0.0)), a, b), ne(a, b), le(a, b), ge(a, b),
                                minimum(a, b), maximum(a, b)}});
  }
  {
    Tensor x = Range({5});
    graphs.push_back({"unary", {exp(x), log(abs(x) + 1.0), sqrt(abs(x)), rsqrt(abs(x) + 1.0), tanh(x),
                                sigmoid(x), gelu(x), sign(x), pow(abs(x), 1.5), x / (x * x + 1.0)}});
  }
  {
    Tensor x = Range({2, 4});
    graphs.push_back({"dtypes", {cast(x, DType::kF64) * 2.0, cast(x, DType::kBF16) + cast(x, DType::kBF16),
                                 cast(x, DType::kF16) * cast(x, DType::kF16), cast(x, DType::kI32) + cast(x, DType::kI32),
                                 arange(0, 8, 2), cast(arange(0, 8, 1), DType::kF32)}});
  }
  {
    graphs.push_back({"random", {rand({3, 4}), randn({4}, 1.0, 2.0), full({2, 2}, 3.5)}});
  }
  {
    Tensor a = Range({2, 3, 4}), b = Range({2, 4, 5}), v = Range({4});
    graphs.push_back({"batched_matmul", {matmul(a, b), matmul(a, v), matmul(transpose(Range({4, 3}), 0, 1), Range({4, 2}))}});
  }
  return graphs;
}

int GraphsCommand(const std::string& module_dir, const std::string& executable_dir) {
  lazyrt::Options options;
  options.persistent_cache = false;
  lazyrt::configure(options);
  lazyrt::pjrt::Client& client = lazyrt::detail::Runtime::Get().client();
  const std::vector<std::pair<std::string, std::vector<Tensor>>> graphs = Graphs();
  for (const auto& [name, tensors] : graphs) {
    std::vector<lazyrt::ir::Value> roots;
    for (const Tensor& t : tensors) roots.push_back(t.ir_value());
    lazyrt::ir::PostOrder order(roots);
    absl::StatusOr<lazyrt::pjrt::proto::Module> module = lazyrt::lowering::LowerGraph(order, name);
    if (!module.ok()) Fail(name + ": " + std::string(module.status().message()));
    WriteFile(module_dir + "/" + name + ".pb", module->SerializeAsString());
    absl::StatusOr<std::shared_ptr<lazyrt::pjrt::Executable>> exe =
        client.Compile(*module, lazyrt::pjrt::CompileOptions{.autotune = false});
    if (!exe.ok()) Fail(name + ": " + std::string(exe.status().message()));
    WriteFile(executable_dir + "/" + name + ".exe", (*exe)->Serialize());
  }
  std::printf("seed_corpus_tool: %zu graphs\n", graphs.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 3 && args[0] == "payloads") return Payloads(args[1], args[2]);
    if (args.size() == 3 && args[0] == "graphs") return GraphsCommand(args[1], args[2]);
  } catch (const std::exception& e) {
    Fail(e.what());
  }
  std::fprintf(stderr, "usage: seed_corpus_tool payloads CACHE_DIR OUT_DIR | graphs MODULE_DIR EXECUTABLE_DIR\n");
  return 2;
}
