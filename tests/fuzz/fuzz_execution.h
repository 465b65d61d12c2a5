// Running an executable that a fuzzer got loaded: a small client, arguments of a fixed byte pattern,
// and a bound on the work so that a valid but enormous program is skipped rather than timed out.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "pjrt_sim/client.h"
#include "pjrt_sim/executable.h"
#include "pjrt_sim/hlo.h"
#include "pjrt_sim/status_macros.h"

namespace lazyrt::fuzz {

// The property failed: print why and abort, so libFuzzer keeps the input as a crash.
[[noreturn]] inline void Violation(const char* fuzzer, const std::string& what) {
  std::fprintf(stderr, "%s: property violated: %s\n", fuzzer, what.c_str());
  std::abort();
}

// How far the inputs of a run got, printed at exit ("<fuzzer> reached: parsed 100, verified 40, ...")
// so that a run that never gets past the first check shows it.
class FuzzStats {
 public:
  FuzzStats(const char* fuzzer, std::vector<std::string> stages)
      : fuzzer_(fuzzer), stages_(std::move(stages)), counts_(stages_.size(), 0) {
    static FuzzStats* self = this;
    std::atexit([] { self->Print(); });
  }
  void Count(size_t stage) { ++counts_[stage]; }

 private:
  void Print() const {
    std::string line = std::string(fuzzer_) + " reached:";
    for (size_t i = 0; i < stages_.size(); ++i) {
      line += (i == 0 ? " " : ", ") + stages_[i] + " " + std::to_string(counts_[i]);
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }

  const char* fuzzer_;
  std::vector<std::string> stages_;
  std::vector<int64_t> counts_;
};

// One device with little memory: an allocation a crafted program asks for beyond it fails cleanly.
inline pjrt::Client& SmallClient() {
  static pjrt::Client* client = [] {
    absl::StatusOr<std::unique_ptr<pjrt::Client>> c =
        pjrt::Client::Create({.num_devices = 1, .device_memory_bytes = int64_t{256} << 20});
    if (!c.ok()) Violation("fuzz_execution", "cannot create the client");
    return c->release();
  }();
  return *client;
}

// a * b, saturating at `cap` (both >= 0).
inline int64_t CappedProduct(int64_t a, int64_t b, int64_t cap) {
  if (a <= 0 || b <= 0) return 0;
  if (a > cap / b) return cap;
  return std::min(cap, a * b);
}

inline int64_t CappedNumel(const pjrt::proto::Shape& shape, int64_t cap) {
  int64_t n = 1;
  for (int64_t d : shape.dims()) n = d < 0 ? cap : CappedProduct(n, std::max<int64_t>(d, 1), cap);
  return n;
}

// An upper estimate of the element operations and bytes running `exe` takes; capped at `cap`.
inline int64_t EstimatedCost(const pjrt::proto::Executable& exe, int64_t cap) {
  int64_t cost = std::max<int64_t>(exe.arena_bytes(), 0);
  for (const pjrt::proto::Shape& p : exe.parameters()) cost = std::min(cap, cost + CappedNumel(p, cap) * 8);
  for (const pjrt::proto::Slot& s : exe.slots()) cost = std::min(cap, cost + CappedNumel(s.shape(), cap) * 8);
  for (const pjrt::proto::Kernel& k : exe.kernels()) {
    int64_t work = CappedNumel(k.iteration_shape(), cap);
    work = std::max(work, CappedProduct(CappedProduct(std::max<int64_t>(k.batch(), 1), k.m(), cap),
                                        CappedProduct(k.n(), std::max<int64_t>(k.k(), 1), cap), cap));
    if (k.kind() == pjrt::proto::Kernel::ATTENTION || k.kind() == pjrt::proto::Kernel::ATTENTION_GRAD) {
      // Every query meets every key: at most the square of the elements it reads.
      int64_t read = 0;
      for (int64_t in : k.inputs()) {
        if (in >= 0 && in < exe.slots_size())
          read = std::min(cap, read + CappedNumel(exe.slots(static_cast<int>(in)).shape(), cap));
      }
      work = std::max(work, CappedProduct(read, read, cap));
    }
    cost = std::min(cap, cost + CappedProduct(work, std::max(1, k.program_size()), cap));
  }
  return cost;
}

// Runs `exe` on the small client's device with every argument byte set to `fill` (PRED arguments
// get 0 or 1, the only values a PRED buffer holds), and returns every result's bytes, or the error
// the launch or a kernel reported.
inline absl::StatusOr<std::vector<std::string>> RunWithFill(const pjrt::Executable& exe, unsigned char fill) {
  pjrt::Client& client = SmallClient();
  pjrt::Device* device = client.devices()[0];
  std::vector<std::shared_ptr<pjrt::Buffer>> args;
  for (const pjrt::proto::Shape& p : exe.proto().parameters()) {
    const pjrt::ArrayShape shape = pjrt::FromProto(p);
    const bool pred = shape.type == pjrt::PrimitiveType::kPred;
    std::string bytes(static_cast<size_t>(shape.byte_size()), static_cast<char>(pred ? (fill & 1) : fill));
    ASSIGN_OR_RETURN(std::shared_ptr<pjrt::Buffer> buffer, client.BufferFromHost(bytes.data(), shape, device));
    args.push_back(std::move(buffer));
  }
  ASSIGN_OR_RETURN(std::vector<std::shared_ptr<pjrt::Buffer>> results, exe.Execute(args, device));
  // Also an execution without results has ended before this input's turn does: a report from it would
  // otherwise be charged to a later input, whose artifact then reproduces nothing.
  device->stream().Synchronize();
  std::vector<std::string> out;
  absl::Status first_error;
  for (const std::shared_ptr<pjrt::Buffer>& r : results) {
    std::string bytes(static_cast<size_t>(r->shape().byte_size()), '\0');
    absl::Status status = r->ToHost(bytes.data(), bytes.size());
    if (!status.ok() && first_error.ok()) first_error = status;
    out.push_back(std::move(bytes));
  }
  if (!first_error.ok()) return first_error;
  return out;
}

}  // namespace lazyrt::fuzz
