// Writes real inputs for the fuzzers' seed corpora (used by make_seed_corpus.sh):
//
//   seed_corpus_tool payloads CACHE_DIR OUT_DIR [SIGNATURE_OUT_DIR]
//       the payload (a serialized executable) of every sound entry in a persistent cache directory,
//       one file per entry; and in SIGNATURE_OUT_DIR, entry_signature_fuzzer's inputs: each entry's
//       metadata framed with its own payload, and with the next entry's
//   seed_corpus_tool idx OUT_DIR
//       idx_fuzzer's inputs: the first items of Fashion-MNIST's test split, and tiny made-up files
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
#include "lazy/idx_dataset.h"
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

// entry_signature_fuzzer's framing: the metadata's length (u32 little-endian), the metadata, the payload.
std::string FrameSignatureInput(const std::string& metadata, const std::string& payload) {
  std::string out(4, '\0');
  const uint32_t length = static_cast<uint32_t>(metadata.size());
  for (int i = 0; i < 4; ++i) out[static_cast<size_t>(i)] = static_cast<char>((length >> (8 * i)) & 0xff);
  return out + metadata + payload;
}

int Payloads(const std::string& cache_dir, const std::string& out_dir, const std::string& signature_dir) {
  absl::StatusOr<std::unique_ptr<lazyrt::cache::Store>> lister =
      lazyrt::cache::Store::Open({.dir = cache_dir, .producer_version = "any", .read_only = true});
  if (!lister.ok()) Fail(std::string(lister.status().message()));
  absl::StatusOr<std::vector<lazyrt::cache::ListedEntry>> listed = (*lister)->List();
  if (!listed.ok()) Fail(std::string(listed.status().message()));
  std::vector<std::pair<std::string, std::string>> metadata_and_payloads;
  int written = 0;
  for (const lazyrt::cache::ListedEntry& e : *listed) {
    const auto* header = std::get_if<lazyrt::cache::EntryHeader>(&e.header);
    if (header == nullptr) continue;
    absl::StatusOr<std::unique_ptr<lazyrt::cache::Store>> store =
        lazyrt::cache::Store::Open({.dir = cache_dir, .producer_version = header->producer_version, .read_only = true});
    if (!store.ok()) Fail(std::string(store.status().message()));
    lazyrt::cache::LookupResult found = (*store)->Lookup(e.key);
    if (const auto* entry = std::get_if<lazyrt::cache::Entry>(&found)) {
      WriteFile(out_dir + "/" + e.key + ".exe", entry->payload);
      metadata_and_payloads.emplace_back(entry->header.metadata, entry->payload);
      ++written;
    }
  }
  if (!signature_dir.empty()) {
    const size_t n = metadata_and_payloads.size();
    for (size_t i = 0; i < n; ++i) {
      const auto& [metadata, payload] = metadata_and_payloads[i];
      WriteFile(signature_dir + "/own" + std::to_string(i), FrameSignatureInput(metadata, payload));
      WriteFile(signature_dir + "/other" + std::to_string(i),
                FrameSignatureInput(metadata, metadata_and_payloads[(i + 1) % n].second));
    }
  }
  std::printf("seed_corpus_tool: %d payloads from %s\n", written, cache_dir.c_str());
  return written > 0 ? 0 : 1;
}

void AppendBigEndian32(std::string& out, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((value >> shift) & 0xff));
}

// idx_fuzzer's framing: the image file's length (u32 little-endian), the image file, the label file.
void WriteIdxSeed(const std::string& path, uint32_t count, uint32_t rows, uint32_t cols, const std::string& pixels,
                  const std::string& label_bytes) {
  std::string images;
  AppendBigEndian32(images, 0x803);
  AppendBigEndian32(images, count);
  AppendBigEndian32(images, rows);
  AppendBigEndian32(images, cols);
  images += pixels;
  std::string labels;
  AppendBigEndian32(labels, 0x801);
  AppendBigEndian32(labels, count);
  labels += label_bytes;
  std::string framed(4, '\0');
  const uint32_t length = static_cast<uint32_t>(images.size());
  for (int i = 0; i < 4; ++i) framed[static_cast<size_t>(i)] = static_cast<char>((length >> (8 * i)) & 0xff);
  WriteFile(path, framed + images + labels);
}

int IdxCommand(const std::string& out_dir) {
  WriteIdxSeed(out_dir + "/tiny", 2, 1, 3, std::string("\x00\x80\xff\x01\x02\x03", 6), std::string("\x00\x09", 2));
  WriteIdxSeed(out_dir + "/one", 1, 1, 1, std::string(1, '\x7f'), std::string(1, '\x05'));
  absl::StatusOr<lazyrt::data::Dataset> test = lazyrt::data::LoadFashionMnist(lazyrt::data::kFashionMnistDir, "t10k");
  if (!test.ok()) Fail(std::string(test.status().message()));
  constexpr uint32_t kItems = 16;
  std::string pixels, labels;
  for (size_t i = 0; i < kItems * static_cast<size_t>(test->features); ++i) {
    pixels.push_back(static_cast<char>(static_cast<int>(test->images[i] * 255.0f + 0.5f)));
  }
  for (size_t i = 0; i < kItems; ++i) labels.push_back(static_cast<char>(test->labels[i]));
  WriteIdxSeed(out_dir + "/fashion_mnist_t10k_16", kItems, 28, 28, pixels, labels);
  std::printf("seed_corpus_tool: 3 IDX seeds in %s\n", out_dir.c_str());
  return 0;
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
    graphs.push_back({"indexing",
                      {index_select(x, 0, Indices({3, 0, 1}, {3})),
                       gather(x, 1, Indices({0, 2, 1, 1, 0, 2, 2, 2, 0, 1, 1, 0}, {4, 3}))}});
  }
  {
    Tensor x = Range({2, 3, 4});
    graphs.push_back({"movement",
                      {permute(x, {2, 0, 1}), transpose(x, 0, 2), reshape(x, {6, 4}), slice(x, 2, 1, 4, 2),
                       cat({x, x * 2.0}, 1), expand(Range({1, 3, 1}), {2, 3, 4})}});
  }
  {
    Tensor a = Range({6}), b = Range({6}, -0.5f);
    Tensor m = logical_and(gt(a, b), logical_not(eq(a, b)));
    graphs.push_back(
        {"logic",
         {where(logical_or(m, lt(a, 0.0)), a, b), ne(a, b), le(a, b), ge(a, b), minimum(a, b), maximum(a, b)}});
  }
  {
    Tensor x = Range({5});
    graphs.push_back({"unary",
                      {exp(x), log(abs(x) + 1.0), sqrt(abs(x)), rsqrt(abs(x) + 1.0), tanh(x), sigmoid(x), gelu(x),
                       sign(x), pow(abs(x), 1.5), x / (x * x + 1.0)}});
  }
  {
    Tensor x = Range({2, 4});
    graphs.push_back({"dtypes",
                      {cast(x, DType::kF64) * 2.0, cast(x, DType::kBF16) + cast(x, DType::kBF16),
                       cast(x, DType::kF16) * cast(x, DType::kF16), cast(x, DType::kI32) + cast(x, DType::kI32),
                       arange(0, 8, 2), cast(arange(0, 8, 1), DType::kF32)}});
  }
  { graphs.push_back({"random", {rand({3, 4}), randn({4}, 1.0, 2.0), full({2, 2}, 3.5)}}); }
  {
    Tensor x = Range({3, 5});
    graphs.push_back(
        {"scan_and_sort",
         {cumsum(x, 1), cumsum(cast(x, DType::kI32), 0), argsort(x, 0, true), topk(x, 2).first, sort(x, -1).second}});
  }
  {
    Tensor a = Range({2, 3, 4}), b = Range({2, 4, 5}), v = Range({4});
    graphs.push_back(
        {"batched_matmul", {matmul(a, b), matmul(a, v), matmul(transpose(Range({4, 3}), 0, 1), Range({4, 2}))}});
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
    if (args.size() == 3 && args[0] == "payloads") return Payloads(args[1], args[2], "");
    if (args.size() == 4 && args[0] == "payloads") return Payloads(args[1], args[2], args[3]);
    if (args.size() == 2 && args[0] == "idx") return IdxCommand(args[1]);
    if (args.size() == 3 && args[0] == "graphs") return GraphsCommand(args[1], args[2]);
  } catch (const std::exception& e) {
    Fail(e.what());
  }
  std::fprintf(stderr,
               "usage: seed_corpus_tool payloads CACHE_DIR OUT_DIR [SIGNATURE_DIR] | graphs MODULE_DIR "
               "EXECUTABLE_DIR | idx OUT_DIR\n");
  return 2;
}
