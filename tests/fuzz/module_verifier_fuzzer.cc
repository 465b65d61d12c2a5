// Fuzzes the device's front door: bytes parsed as a proto::Module go through pjrt::VerifyModule, and
// a module the verifier accepts is compiled (no autotuning) and executed on a small device with
// arguments of two byte patterns. Whatever the verifier lets through must never crash, hang or read
// out of bounds in the compiler passes, fusion, buffer assignment, the loader or the kernels.
//
// Also checked, for every module that compiles:
//   - the executable the compiler emits serializes, parses and loads (a cache round trip);
//   - the reloaded executable computes the same bytes as the compiled one (or fails the same way).
// A custom mutator changes the parsed module through the protobuf API (tests/fuzz/proto_mutator.h).
#include <cstdint>
#include <cstring>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "absl/status/statusor.h"
#include "pjrt_sim/compiler.h"
#include "pjrt_sim/executable.h"
#include "pjrt_sim/module.pb.h"
#include "pjrt_sim/module_verifier.h"
#include "tests/fuzz/fuzz_execution.h"
#include "tests/fuzz/proto_mutator.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace lazyrt::fuzz {
namespace {

constexpr const char* kName = "module_verifier_fuzzer";
// Verified modules are compiled and run only below these bounds, so a valid but huge program does
// not turn into a timeout.
constexpr int kMaxInstructions = 512;
constexpr int64_t kMaxCost = int64_t{1} << 22;

// An upper estimate of the elements a module computes (a dot counts its multiply-adds).
int64_t ModuleCost(const pjrt::proto::Module& module) {
  int64_t cost = 0;
  for (const pjrt::proto::Instruction& inst : module.instructions()) {
    int64_t work = CappedNumel(inst.shape(), kMaxCost);
    if (inst.opcode() == static_cast<int32_t>(pjrt::Opcode::kDot) && inst.operands_size() == 2) {
      const pjrt::proto::Shape& lhs = module.instructions(static_cast<int>(inst.operands(0))).shape();
      int64_t k = 1;
      for (int64_t d : lhs.dims()) k = std::max(k, d);
      work = CappedProduct(work, k, kMaxCost);
    } else if ((inst.opcode() == static_cast<int32_t>(pjrt::Opcode::kAttention) ||
                inst.opcode() == static_cast<int32_t>(pjrt::Opcode::kAttentionGrad)) &&
               inst.operands_size() >= 3) {
      // Every query meets every key: (q's elements + the result's) times S, k's largest dim bounding S.
      const pjrt::proto::Shape& q = module.instructions(static_cast<int>(inst.operands(0))).shape();
      const pjrt::proto::Shape& k = module.instructions(static_cast<int>(inst.operands(1))).shape();
      int64_t s = 1;
      for (int64_t d : k.dims()) s = std::max(s, d);
      work = CappedProduct(std::min(kMaxCost, work + CappedNumel(q, kMaxCost)), s, kMaxCost);
    } else if (inst.operands_size() > 0) {
      // Reductions and gathers touch their operands' elements.
      for (int64_t op : inst.operands()) {
        work = std::min(kMaxCost, work + CappedNumel(module.instructions(static_cast<int>(op)).shape(), kMaxCost));
      }
    }
    cost = std::min(kMaxCost, cost + work);
  }
  return cost;
}

FuzzStats& Stats() {
  static FuzzStats* stats = new FuzzStats(kName, {"parsed", "verified", "compiled", "ran without error"});
  return *stats;
}

std::string Describe(const absl::StatusOr<std::vector<std::string>>& r) {
  return r.ok() ? "ok" : std::string(r.status().message());
}

void CompileAndRun(const pjrt::proto::Module& module) {
  pjrt::Device* device = SmallClient().devices()[0];
  absl::StatusOr<std::shared_ptr<pjrt::Executable>> compiled =
      pjrt::Compile(module, pjrt::CompileOptions{.autotune = false}, device);
  if (!compiled.ok()) return;
  Stats().Count(2);
  absl::StatusOr<std::shared_ptr<pjrt::Executable>> reloaded =
      SmallClient().LoadSerializedExecutable((*compiled)->Serialize());
  if (!reloaded.ok()) {
    Violation(kName,
              "the compiler emitted an executable the loader refuses: " + std::string(reloaded.status().message()));
  }
  for (unsigned char fill : {0x00, 0xff}) {
    absl::StatusOr<std::vector<std::string>> first = RunWithFill(**compiled, fill);
    absl::StatusOr<std::vector<std::string>> second = RunWithFill(**reloaded, fill);
    if (first.ok()) Stats().Count(3);
    if (first.ok() != second.ok() || (first.ok() && *first != *second)) {
      Violation(kName,
                "the compiled and the reloaded executable differ: " + Describe(first) + " vs " + Describe(second));
    }
  }
}

}  // namespace
}  // namespace lazyrt::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Mutated strings are often invalid UTF-8, which protobuf logs on every parse: noise, not news.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lazyrt;
  pjrt::proto::Module module;
  if (!module.ParseFromArray(data, static_cast<int>(size))) return 0;
  fuzz::Stats().Count(0);
  if (!pjrt::VerifyModule(module).ok()) return 0;
  fuzz::Stats().Count(1);
  if (module.instructions_size() > fuzz::kMaxInstructions || fuzz::ModuleCost(module) >= fuzz::kMaxCost) return 0;
  fuzz::CompileAndRun(module);
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  using namespace lazyrt;
  if (seed % 2 == 0) return LLVMFuzzerMutate(data, size, max_size);
  pjrt::proto::Module module;
  if (!module.ParseFromArray(data, static_cast<int>(size))) return LLVMFuzzerMutate(data, size, max_size);
  fuzz::ProtoMutator(seed).Mutate(module);
  const std::string bytes = module.SerializeAsString();
  if (bytes.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, bytes.data(), bytes.size());
  return bytes.size();
}
