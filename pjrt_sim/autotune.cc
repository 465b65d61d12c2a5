#include "pjrt_sim/autotune.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "pjrt_sim/elapsed.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/executable.h"
#include "pjrt_sim/hlo.h"
#include "pjrt_sim/kernels/attention.h"
#include "pjrt_sim/kernels/fused_program.h"
#include "pjrt_sim/kernels/gemm.h"
#include "pjrt_sim/kernels/kernels.h"
#include "pjrt_sim/status_macros.h"
#include "pjrt_sim/thread_pool.h"

namespace lazyrt::pjrt {
namespace {

using Clock = std::chrono::steady_clock;

// Fills memory of `shape` with values typical of real data (small, finite; indices near 0).
void FillProbeData(const ArrayShape& shape, void* data, std::mt19937_64& rng) {
  const int64_t n = shape.numel();
  std::uniform_real_distribution<float> f(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    switch (shape.type) {
      case PrimitiveType::kF32: static_cast<float*>(data)[i] = f(rng); break;
      case PrimitiveType::kF64: static_cast<double*>(data)[i] = f(rng); break;
      case PrimitiveType::kS32: static_cast<int32_t*>(data)[i] = 0; break;
      case PrimitiveType::kS64: static_cast<int64_t*>(data)[i] = 0; break;
      case PrimitiveType::kPred: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(rng() & 1); break;
      // Varied values, as for f32: with all-equal ones every candidate's sums agree, and the check that
      // a candidate gives the reference's bits would pass candidates that round differently.
      case PrimitiveType::kBF16: static_cast<uint16_t*>(data)[i] = FloatToBf16(f(rng)); break;
      case PrimitiveType::kF16: static_cast<uint16_t*>(data)[i] = FloatToHalf(f(rng)); break;
    }
  }
}

// Dense random operands for DOT candidates, values in [-1, 1) of each float type from a generator cheap
// enough for a GEMM's millions of them (a Mersenne twister through a distribution took ~0.6 s of a GPT's
// compile), made once per operand position, type and size: layers repeat their shapes.
class DotOperands {
 public:
  const void* Get(const ArrayShape& shape, size_t position) {
    std::vector<uint64_t>& v = made_[{position, shape.type, shape.numel()}];
    if (v.empty() && shape.numel() > 0) {
      v.resize(static_cast<size_t>(shape.byte_size() + 7) / 8);
      Fill(shape.type, shape.numel(), v.data(), 0x9e3779b97f4a7c15ULL * (position + 1));
    }
    return v.data();
  }

 private:
  template <typename T, typename Make>
  static void FillWith(int64_t n, void* data, uint64_t state, Make make) {
    T* out = static_cast<T*>(data);
    for (int64_t i = 0; i < n; ++i) {
      state += 0x9e3779b97f4a7c15ULL;  // splitmix64
      uint64_t z = (state ^ (state >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      out[i] = make(static_cast<float>(static_cast<int32_t>(z >> 32)) * 0x1p-31f);
    }
  }
  static void Fill(PrimitiveType type, int64_t n, void* data, uint64_t seed) {
    switch (type) {
      case PrimitiveType::kF32: FillWith<float>(n, data, seed, [](float f) { return f; }); break;
      case PrimitiveType::kF64: FillWith<double>(n, data, seed, [](float f) { return double{f}; }); break;
      case PrimitiveType::kBF16: FillWith<uint16_t>(n, data, seed, FloatToBf16); break;
      case PrimitiveType::kF16: FillWith<uint16_t>(n, data, seed, FloatToHalf); break;
      case PrimitiveType::kS32:
      case PrimitiveType::kS64:
      case PrimitiveType::kPred: std::memset(data, 0, static_cast<size_t>(n * ByteWidth(type))); break;
    }
  }

  std::map<std::tuple<size_t, PrimitiveType, int64_t>, std::vector<uint64_t>> made_;
};

// The unrounded f32 product of a DOT of 16-bit operands, as bytes. Its variants are compared on it:
// rounding to 16 bits hides most differences of summation order on probe data (a DOT whose f32 products
// differ in 85% of their elements gave the same bf16 in all but 8 of 49152), and real data would meet
// them: two compiles would then train differently.
absl::StatusOr<std::string> F32Product(const proto::Kernel& dot, std::span<const ArrayShape> input_shapes,
                                       ArrayShape shape, std::span<const void* const> inputs) {
  shape.type = PrimitiveType::kF32;
  ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, BuildKernel(dot, input_shapes, shape));
  std::string product(static_cast<size_t>(shape.byte_size()), '\0');
  void* out[] = {product.data()};
  RETURN_IF_ERROR(kernel->Run(inputs, out));
  return product;
}

// What a candidate computed, to compare with its reference: a 16-bit DOT's unrounded f32 product first
// (F32Product), then the output it wrote (rounded, which may take another path: oneDNN rounds a native bf16 one).
absl::StatusOr<std::string> ProductBits(const proto::Kernel& kernel, std::span<const ArrayShape> input_shapes,
                                        const ArrayShape& out_shape, std::span<const void* const> inputs,
                                        const void* output) {
  std::string bits;
  if (kernel.kind() == proto::Kernel::DOT && Is16BitFloat(out_shape.type)) {
    ASSIGN_OR_RETURN(bits, F32Product(kernel, input_shapes, out_shape, inputs));
  }
  bits.append(static_cast<const char*>(output), static_cast<size_t>(out_shape.byte_size()));
  return bits;
}

// The products worth splitting into panels over the pool. Handing half a product to a second core inside
// a step (the worker's start, the operands moving between the cores' caches) costs more than half of a
// small product: a 128x10x128 product took 6-7 us whole and 8 us in two panels there (15-25 us before
// the pool's callers and workers watched for each other instead of sleeping), though panels won on the
// tuner's warm caches. From ~2^21 multiply-adds (~20 us on one core) a split can pay, and timing decides.
constexpr int64_t kMinPanelMacs = int64_t{1} << 21;

// How long autotuning waits for the pool's threads to run on CPUs of their own before it times anyway:
// a worker placed on its creator's CPU was moved within a few milliseconds; another process's load may
// not move at all, and a compile must not wait for it.
constexpr std::chrono::milliseconds kPoolPatience{20};
// How long each timed run waits for the pool's threads to be running: a worker's wake-up (10-60 us on a
// VM) and no more, so that a machine whose other CPU is taken costs the compile at most this per run.
constexpr std::chrono::microseconds kWakePatience{200};

// How many times each GEMM library's variants are timed for the machine's record, in rounds (FastestGemmLibrary).
constexpr int kLibraryRounds = 3;

// One timed run of a candidate: false if it failed, else its best time so far kept in `best_us`. A run split over
// the pool starts with the pool's threads running where they have CPUs of their own (`separate_cpus`), as a kernel
// after the step's earlier parallel ones does: after a serial candidate longer than the worker watches for more
// work (ThreadPool), the split candidate timed next paid the worker's wake-up, 10-60 us on a VM. The MLP's x W1^T in
// column panels, timed right after it whole: 241-264 -> 218-226 us (3 processes each; whole 225-248).
bool TimedRun(const Kernel& kernel, std::span<const void* const> inputs, std::span<void* const> outputs,
              bool separate_cpus, double& best_us) {
  if (kernel.SplitsOverPool() && separate_cpus) ThreadPool::Get().AwaitSeparateCpus(kWakePatience);
  const Clock::time_point start = Clock::now();
  const bool ok = kernel.Run(inputs, outputs).ok();
  best_us = std::min(best_us, MsSince(start) * 1000);
  return ok;
}

// Whether an attention kernel's queries (L) and keys (S) fill at least one block each.
bool FullBlocks(const proto::Executable& exe, const proto::Kernel& attention) {
  const ArrayShape q = InputShape(attention, 0, FromProto(exe.slots(static_cast<int>(attention.inputs(0))).shape()));
  const ArrayShape k = InputShape(attention, 1, FromProto(exe.slots(static_cast<int>(attention.inputs(1))).shape()));
  // q [B..., L, E], k [B..., S, E]
  return q.dims.end()[-2] >= kAttentionBlock && k.dims.end()[-2] >= kAttentionBlock;
}

// The GEMM library to record for `kernel` (a DOT or an attention kernel): every library timed, the times
// noted in `record`. A DOT's library counts its fastest variant among those computing its whole product's bits
// (LibraryTimeUs): only those can run in an executable. oneDNN's matmul split the GPT's [128x4096]x[4096x512]
// weight gradient into panels 2.2x faster than it ran whole, in other bits: it won the record on the panels'
// time, and then ran whole, 3.6 ms where oneDNN's sgemm took 1.5 in panels (RESULTS.md, session 50).
GemmLibrary FastestGemmLibrary(const proto::Kernel& kernel, std::span<const ArrayShape> input_shapes,
                               const ArrayShape& out_shape, std::span<const void* const> inputs,
                               std::span<void* const> outs, bool separate_cpus, proto::AutotuneRecord& record) {
  // Every library's variants, each run once (warming caches) for the bits it computes: only a DOT's are
  // compared, an attention kernel has one variant. A library whose whole product fails has no time.
  struct Timed {
    GemmLibrary library;
    std::unique_ptr<Kernel> built;
    std::string bits;
    double us = 1e300;
    bool ok = true;
  };
  std::vector<Timed> timed;
  for (GemmLibrary library : kGemmLibraries) {
    for (int64_t variant : kernel.kind() == proto::Kernel::DOT
                               ? std::vector<int64_t>{kDotSerial, kDotColumnPanels, kDotRowPanels}
                               : std::vector<int64_t>{kernel.variant()}) {
      if (variant == kDotColumnPanels && DotHasFixedTiles(input_shapes[0].type, library)) continue;  // = rows
      proto::Kernel candidate = kernel;
      candidate.set_gemm_library(static_cast<int32_t>(library));
      candidate.set_variant(variant);
      absl::StatusOr<std::unique_ptr<Kernel>> built = BuildKernel(candidate, input_shapes, out_shape);
      const bool ran = built.ok() && (*built)->Run(inputs, outs).ok();
      absl::StatusOr<std::string> bits = std::string();
      if (ran && kernel.kind() == proto::Kernel::DOT)
        bits = ProductBits(candidate, input_shapes, out_shape, inputs, outs[0]);
      if (!ran || !bits.ok()) {
        if (variant == kDotSerial) break;  // nothing to compare the panels with
        continue;
      }
      timed.push_back(Timed{library, *std::move(built), *std::move(bits)});
    }
  }
  // Then timed in rounds, each one run of every library's every variant, as the variants' tuning is (below):
  // a disturbance of a few milliseconds slows one round alike instead of condemning the library whose runs it
  // hit. A choice made once for every later program must not rest on one library's unlucky milliseconds: timed
  // library after library, one machine record named libxsmm for the MLP's x W1^T (128x256x784) where a fresh
  // record named oneDNN's matmul, and the MLP step ran 2-7% slower on the first (benchmarks/RESULTS.md, session 51).
  for (int round = 0; round < kLibraryRounds; ++round) {
    for (Timed& t : timed) {
      if (t.ok) t.ok = TimedRun(*t.built, inputs, outs, separate_cpus, t.us);
    }
  }
  const GemmLibrary preferred = PreferredGemmLibrary();
  std::optional<double> preferred_us, best_us;
  GemmLibrary best = preferred;
  for (GemmLibrary library : kGemmLibraries) {
    std::vector<TimedVariant> runs;  // the whole product first, which LibraryTimeUs compares the others with
    for (const Timed& t : timed) {
      if (t.library != library) continue;
      if (!t.ok && runs.empty()) break;  // its whole product failed: no time
      if (t.ok) runs.push_back(TimedVariant{t.us, t.bits});
    }
    const std::optional<double> library_us = LibraryTimeUs(runs);
    if (!library_us) continue;
    proto::AutotuneCandidate* cand = record.add_candidates();
    cand->set_name(absl::StrCat("library_", std::string(GemmLibraryName(library))));
    cand->set_us(*library_us);
    if (library == preferred) preferred_us = library_us;
    if (!best_us || *library_us < *best_us) {
      best_us = library_us;
      best = library;
    }
  }
  if (preferred_us && best != preferred && *best_us > *preferred_us * (1 - kGemmLibraryMargin)) return preferred;
  return best;
}

// What decides a kernel's tuning: its configuration (without the slots it reads and writes, and the
// label for humans) and the shapes of those slots. Two kernels of the same signature (one per layer of a
// model) run the same code on arrays of the same sizes, and time alike.
std::string TuningSignature(const proto::Executable& exe, const proto::Kernel& kernel) {
  proto::Kernel config = kernel;
  config.clear_inputs();
  config.clear_output();
  config.clear_extra_outputs();
  config.clear_label();
  std::string signature;
  google::protobuf::io::StringOutputStream stream(&signature);
  google::protobuf::io::CodedOutputStream out(&stream);
  out.SetSerializationDeterministic(true);
  config.SerializeToCodedStream(&out);
  const auto add_slot = [&](int64_t slot) { exe.slots(static_cast<int>(slot)).shape().SerializeToCodedStream(&out); };
  for (int64_t in : kernel.inputs()) add_slot(in);
  add_slot(kernel.output());
  for (int64_t extra : kernel.extra_outputs()) add_slot(extra);
  out.Trim();
  return signature;
}

}  // namespace

std::optional<double> LibraryTimeUs(std::span<const TimedVariant> variants) {
  std::optional<double> best;
  for (const TimedVariant& v : variants) {
    if (v.bits == variants.front().bits && (!best || v.us < *best)) best = v.us;
  }
  return best;
}

int64_t DotSplitVariant(const proto::Kernel& dot, int64_t operand_bytes, int64_t output_bytes, int threads) {
  const double p = threads;
  const double a = static_cast<double>(dot.batch() * dot.m() * dot.k() * operand_bytes);
  const double b = static_cast<double>(dot.batch() * dot.k() * dot.n() * operand_bytes);
  const double c = static_cast<double>(dot.batch() * dot.m() * dot.n() * output_bytes);
  const double rows = a / p + b, columns = a + b / p + c * (p - 1) / (p * p);
  return rows <= columns ? kDotRowPanels : kDotColumnPanels;
}

absl::Status Autotune(proto::Executable& exe, Device* device, const GemmTuningRecord* gemm_tuning) {
  ASSIGN_OR_RETURN(std::shared_ptr<Executable> loaded, Executable::Load(exe));
  std::vector<DeviceMemory> memory;
  std::vector<void*> params, outputs;
  std::mt19937_64 rng(42);
  for (const proto::Shape& p : exe.parameters()) {
    ASSIGN_OR_RETURN(DeviceMemory m, device->Allocate(FromProto(p).byte_size()));
    FillProbeData(FromProto(p), m.data(), rng);
    params.push_back(m.data());
    memory.push_back(std::move(m));
  }
  for (int64_t slot : exe.outputs()) {
    ASSIGN_OR_RETURN(DeviceMemory m,
                     device->Allocate(FromProto(exe.slots(static_cast<int>(slot)).shape()).byte_size()));
    outputs.push_back(m.data());
    memory.push_back(std::move(m));
  }
  ASSIGN_OR_RETURN(DeviceMemory arena, device->Allocate(exe.arena_bytes()));
  std::memset(arena.data(), 0, static_cast<size_t>(exe.arena_bytes()));
  const std::vector<void*> slots = loaded->SlotPointers(params, arena.data(), outputs);
  // Give every slot plausible contents first: run the executable once as compiled.
  loaded->RunKernels(slots).IgnoreError();  // probe data may hold out-of-range indices

  DotOperands dot_operands;
  const int threads = ThreadPool::Get().size();
  // Before the first measurement, the pool's threads each on a CPU of their own (or the record says they
  // were not): a worker sharing its caller's CPU made a split product time as slow as a whole one, and
  // 3 of 12 fresh processes kept a product of 128x784x256 serial, 2x slower for good (RESULTS.md,
  // 2026-11-29).
  std::optional<bool> separate_cpus;
  auto await_separate_cpus = [&] {
    if (separate_cpus) return;
    separate_cpus = ThreadPool::Get().AwaitSeparateCpus(kPoolPatience);
    exe.set_tuned_on_shared_cpus(!*separate_cpus);
  };
  // The first candidate is the reference whose bits every other must reproduce.
  struct Candidate {
    Candidate(std::string n, proto::Kernel k) : name(std::move(n)), kernel(std::move(k)) {}
    std::string name;
    proto::Kernel kernel;
    std::unique_ptr<Kernel> built;
    bool ok = false, identical = false;
    double us = 1e300;
  };
  // A kernel being tuned: its candidates and the memory they run on.
  struct Tuning {
    int k;
    std::vector<Candidate> candidates;
    std::vector<const void*> inputs;
    std::vector<void*> outs;
    // A DOT split into panels either way: the way DotSplitVariant chooses, where timing chooses to split.
    std::optional<int64_t> split_variant;
  };
  std::vector<Tuning> tunings;
  // The first kernel of each TuningSignature, and the later kernels that take its choice: (kernel, first).
  absl::flat_hash_map<std::string, int> first_of_signature;
  std::vector<std::pair<int, int>> same_as;
  for (int k = 0; k < exe.kernels_size(); ++k) {
    proto::Kernel& kernel = *exe.mutable_kernels(k);
    std::vector<Candidate> candidates;
    std::optional<int64_t> split_variant;
    const bool tuned_dot = kernel.kind() == proto::Kernel::DOT && kernel.m() * kernel.n() * kernel.k() >= (1 << 15);
    // An attention kernel's products are small (kAttentionBlock queries or keys by at most 512) and many: which library
    // calls them fastest decides, not its variants (it has none).
    const bool attention = kernel.kind() == proto::Kernel::ATTENTION || kernel.kind() == proto::Kernel::ATTENTION_GRAD;
    const std::optional<GemmShape> gemm_shape = tuned_dot || attention ? TunedGemmShape(exe, kernel) : std::nullopt;
    const std::optional<GemmLibrary> known =
        gemm_shape && gemm_tuning != nullptr ? gemm_tuning->Lookup(*gemm_shape) : std::nullopt;
    // Recorded since the compiler looked (another process's first compile of the shape): obey it.
    if (known) kernel.set_gemm_library(static_cast<int32_t>(*known));
    // An attention is measured only on whole blocks of queries and keys: a smaller one runs in
    // microseconds, noise that would decide for every later attention with its E on the machine.
    const bool measured = tuned_dot || (attention && FullBlocks(exe, kernel));
    if (measured && gemm_shape && gemm_tuning != nullptr && !known) {
      // A shape new to the machine: its library by measurement, recorded once for every later compile.
      std::vector<ArrayShape> input_shapes;
      std::vector<const void*> inputs;
      for (int64_t in : kernel.inputs()) {
        input_shapes.push_back(FromProto(exe.slots(static_cast<int>(in)).shape()));
        // A DOT's on dense random operands, where its variants' bits are compared (as below).
        inputs.push_back(tuned_dot ? dot_operands.Get(input_shapes.back(), inputs.size())
                                   : slots[static_cast<size_t>(in)]);
      }
      void* outs[] = {slots[static_cast<size_t>(kernel.output())]};
      await_separate_cpus();
      proto::AutotuneRecord* record = exe.add_autotune();
      record->set_kernel(k);
      const GemmLibrary fastest =
          FastestGemmLibrary(kernel, input_shapes, FromProto(exe.slots(static_cast<int>(kernel.output())).shape()),
                             inputs, outs, *separate_cpus, *record);
      const GemmLibrary recorded = gemm_tuning->Record(*gemm_shape, fastest);
      record->set_chosen(absl::StrCat("library_", std::string(GemmLibraryName(recorded))));
      kernel.set_gemm_library(static_cast<int32_t>(recorded));
    }
    if (tuned_dot) {
      // The kernel's GEMM library (the machine's: the record's, or the CPU's preferred; libraries
      // round differently, and tuning a variant must never change a result), whole and split into panels.
      const GemmLibrary library = GemmLibraryFromNumber(kernel.gemm_library()).value_or(GemmLibrary::kBlis);
      const std::string name(GemmLibraryName(library));
      candidates.emplace_back(name, kernel);
      if (threads > 1 && kernel.batch() * kernel.m() * kernel.n() * kernel.k() >= kMinPanelMacs) {
        proto::Kernel columns = kernel, rows = kernel;
        columns.set_variant(kDotColumnPanels);
        rows.set_variant(kDotRowPanels);
        const PrimitiveType operand = FromProto(exe.slots(static_cast<int>(kernel.inputs(0))).shape()).type;
        if (DotHasFixedTiles(operand, library)) {  // its row and column variants run the same tiles
          candidates.emplace_back(absl::StrCat(name, "_tiles_x", kDotFixedTiles), rows);
        } else {
          candidates.emplace_back(absl::StrCat(name, "_column_panels_x", threads), columns);
          candidates.emplace_back(absl::StrCat(name, "_row_panels_x", threads), rows);
          const PrimitiveType output = FromProto(exe.slots(static_cast<int>(kernel.output())).shape()).type;
          split_variant = DotSplitVariant(kernel, ByteWidth(operand), ByteWidth(output), threads);
        }
      }
    } else if ((kernel.kind() == proto::Kernel::LOOP || kernel.kind() == proto::Kernel::REDUCE) && threads > 1 &&
               FromProto(kernel.iteration_shape()).numel() >= (1 << 15)) {
      const int64_t n = FromProto(kernel.iteration_shape()).numel();
      const int64_t block = FusedProgram::kBlock;
      proto::Kernel parallel = kernel;
      parallel.set_grain(((n + threads - 1) / threads + block - 1) / block * block);
      candidates.emplace_back("serial", kernel);
      candidates.emplace_back(absl::StrCat("parallel_x", threads), parallel);
    }
    if (candidates.empty()) continue;
    // After its GEMM library is settled (a later kernel of a shape finds the first's in the record).
    if (const auto [first, inserted] = first_of_signature.try_emplace(TuningSignature(exe, kernel), k); !inserted) {
      same_as.emplace_back(k, first->second);
      continue;
    }

    Tuning& t = tunings.emplace_back(Tuning{k, std::move(candidates), {}, {}, split_variant});
    std::vector<ArrayShape> input_shapes;
    for (int64_t in : kernel.inputs()) {
      input_shapes.push_back(FromProto(exe.slots(static_cast<int>(in)).shape()));
      t.inputs.push_back(slots[static_cast<size_t>(in)]);
    }
    // A DOT's candidates multiply dense random operands of their own: the slots' contents, computed from
    // the probe data, can be sparse or regular enough (a gradient of mostly zeros) that every summation
    // order gives the same sums on them, and real data then tells the variants apart.
    if (tuned_dot) {
      for (size_t i = 0; i < t.inputs.size(); ++i) t.inputs[i] = dot_operands.Get(input_shapes[i], i);
    }
    // The kernel's outputs: what every candidate must compute bit for bit.
    const ArrayShape out_shape = FromProto(exe.slots(static_cast<int>(kernel.output())).shape());
    std::vector<ArrayShape> extra_shapes;
    t.outs = {slots[static_cast<size_t>(kernel.output())]};
    for (int64_t extra : kernel.extra_outputs()) {
      extra_shapes.push_back(FromProto(exe.slots(static_cast<int>(extra)).shape()));
      t.outs.push_back(slots[static_cast<size_t>(extra)]);
    }
    // Every candidate runs once (warming caches) and must give the first one's bits.
    std::string reference;
    for (size_t c = 0; c < t.candidates.size(); ++c) {
      Candidate& cand = t.candidates[c];
      ASSIGN_OR_RETURN(cand.built, BuildKernel(cand.kernel, input_shapes, out_shape, extra_shapes));
      cand.ok = cand.built->Run(t.inputs, t.outs).ok();
      ASSIGN_OR_RETURN(std::string bits, ProductBits(cand.kernel, input_shapes, out_shape, t.inputs, t.outs[0]));
      for (size_t e = 0; e < extra_shapes.size(); ++e) {
        bits.append(static_cast<const char*>(t.outs[e + 1]), static_cast<size_t>(extra_shapes[e].byte_size()));
      }
      if (c == 0) reference = bits;
      cand.identical = c == 0 || bits == reference;
    }
  }

  // Then the candidates are timed in rounds, each round one run of every candidate of every kernel, and
  // each keeps its best time. A disturbance of the shared machine (another process, the host tracing
  // the next step, the hypervisor taking a core) lasts milliseconds: it slows the candidates of one
  // round alike rather than condemning whichever kernel's candidates it happened to hit. With every
  // round of a kernel back to back, a run lost its parallel variants whenever the second core was away
  // for those few milliseconds.
  // Each run of a split or parallel candidate starts with the pool's threads running (TimedRun). Where the threads
  // found no CPUs of their own at the start, runs do not wait for them.
  if (!tunings.empty()) await_separate_cpus();
  constexpr int kTimedRounds = 5;
  for (int round = 0; round < kTimedRounds; ++round) {
    for (Tuning& t : tunings) {
      for (Candidate& cand : t.candidates) {
        if (cand.ok) cand.ok = TimedRun(*cand.built, t.inputs, t.outs, *separate_cpus, cand.us);
      }
    }
  }
  for (const Tuning& t : tunings) {
    proto::Kernel& kernel = *exe.mutable_kernels(t.k);
    proto::AutotuneRecord* record = exe.add_autotune();
    record->set_kernel(t.k);
    double best_us = -1;
    for (const Candidate& cand : t.candidates) {
      if (!cand.ok) continue;
      proto::AutotuneCandidate* entry = record->add_candidates();
      entry->set_name(cand.identical ? cand.name : cand.name + " (rejected: different bits)");
      entry->set_us(cand.us);
      if (cand.identical && (best_us < 0 || cand.us < best_us)) {
        best_us = cand.us;
        record->set_chosen(cand.name);
        kernel.set_variant(cand.kernel.variant());
        kernel.set_grain(cand.kernel.grain());
      }
    }
    // Split, then the way that moves the fewest bytes: if its panels gave the reference's bits too and
    // timed no slower than the whole product.
    if (t.split_variant && kernel.variant() != kDotSerial && kernel.variant() != *t.split_variant) {
      const Candidate& whole = t.candidates.front();
      for (const Candidate& cand : t.candidates) {
        if (cand.ok && cand.identical && cand.kernel.variant() == *t.split_variant && cand.us <= whole.us) {
          record->set_chosen(cand.name);
          record->set_split_by_traffic(true);
          kernel.set_variant(cand.kernel.variant());
          break;
        }
      }
    }
  }
  for (const auto& [k, first] : same_as) {
    const proto::Kernel& tuned = exe.kernels(first);
    proto::Kernel& kernel = *exe.mutable_kernels(k);
    kernel.set_variant(tuned.variant());
    kernel.set_grain(tuned.grain());
    // Copied before add_autotune, which may move the records.
    const proto::AutotuneRecord tuned_record =
        *std::find_if(exe.autotune().rbegin(), exe.autotune().rend(),
                      [&](const proto::AutotuneRecord& r) { return r.kernel() == first; });
    proto::AutotuneRecord* record = exe.add_autotune();
    record->set_kernel(k);
    record->set_same_as(first);
    record->set_chosen(tuned_record.chosen());
    record->set_split_by_traffic(tuned_record.split_by_traffic());
  }
  return absl::OkStatus();
}

}  // namespace lazyrt::pjrt
