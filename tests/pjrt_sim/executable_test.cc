// The compiled artifact: serialization round trips, loading that validates everything and runs no
// pass, rejection of corrupt or tampered executables, and execution's error paths and memory.
#include "pjrt_sim/executable.h"

#include <gmock/gmock.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <thread>

#include "pjrt_sim/block_pool.h"
#include "pjrt_sim/passes.h"
#include "pjrt_sim/version.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace executable_test {

using testing::Dims;
using ::testing::HasSubstr;
using testing::HostArray;
using testing::MakeArray;
using testing::ModuleBuilder;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// Frames a body the way Executable::Serialize does: magic, u32 format version, u64 length, body.
std::string Frame(const std::string& body, uint32_t version = Executable::kFormatVersion) {
  std::string out = "LZRTEXE\n";
  out.append(reinterpret_cast<const char*>(&version), 4);
  const uint64_t length = body.size();
  out.append(reinterpret_cast<const char*>(&length), 8);
  return out + body;
}

// A module exercising every kernel kind, a reshape alias, a repeated result and a parameter result.
proto::Module EveryKernelKind() {
  ModuleBuilder b("every_kernel_kind");
  const int64_t x = b.Parameter(0, proto::F32, {6, 8});
  const int64_t w = b.Parameter(1, proto::F32, {8, 4});
  const int64_t idx = b.Parameter(2, proto::S32, {3});
  const int64_t seed = b.Parameter(3, proto::S64, {});
  const int64_t h = b.Unary(Opcode::kTanh, b.Dot(x, w));  // DOT, LOOP
  const int64_t mx = b.Reduce(Combiner::kMax, h, {1});    // REDUCE
  const int64_t e = b.Unary(Opcode::kExp, b.Binary(Opcode::kSubtract, h, b.Broadcast(mx, {6, 4}, {0})));
  const int64_t sm = b.Binary(Opcode::kDivide, e, b.Broadcast(b.Reduce(Combiner::kSum, e, {1}), {6, 4}, {0}));
  b.Output(sm);
  b.Output(b.Argmax(sm, 1));            // ARGMAX
  b.Output(b.IndexSelect(sm, idx, 0));  // INDEX_SELECT
  const int64_t gidx = b.Convert(b.Iota(proto::S32, {6, 2}, 1), proto::S64);
  b.Output(b.Gather(sm, gidx, 1));      // GATHER
  b.Output(b.Concatenate({sm, h}, 0));  // CONCATENATE
  b.Output(b.Reshape(sm, {24}));        // ALIAS
  b.Output(b.Rng(Opcode::kRngUniform, seed, proto::F32, {5}, 3));
  b.Output(sm);
  b.Output(x);
  return b.module();
}

std::vector<HostArray> EveryKernelKindArgs() {
  std::mt19937_64 rng(5);
  return {MakeArray<float>(PrimitiveType::kF32, {6, 8}, testing::RandomFloats(rng, 48)),
          MakeArray<float>(PrimitiveType::kF32, {8, 4}, testing::RandomFloats(rng, 32)),
          MakeArray<int32_t>(PrimitiveType::kS32, {3}, {5, 0, 5}), MakeArray<int64_t>(PrimitiveType::kS64, {}, {11})};
}

class ExecutableTest : public ::testing::Test {
 protected:
  std::shared_ptr<Executable> CompileOrDie(const proto::Module& module, const CompileOptions& options = {}) {
    absl::StatusOr<std::shared_ptr<Executable>> exe = client_->Compile(module, options);
    EXPECT_TRUE(exe.ok()) << exe.status();
    return exe.ok() ? *exe : nullptr;
  }

  // Loads `p` both directly and through serialized bytes; both must give the same status.
  absl::Status LoadBothWays(const proto::Executable& p) {
    absl::Status direct = Executable::Load(p).status();
    absl::Status bytes = client_->LoadSerializedExecutable(Frame(p.SerializeAsString())).status();
    EXPECT_EQ(direct, bytes);
    return direct;
  }

  std::unique_ptr<Client> client_ = testing::MakeClient();
};

// --- serialization --------------------------------------------------------------------------------
TEST_F(ExecutableTest, SerializeLoadExecuteIsBitIdentical) {
  for (const CompileOptions& options : {CompileOptions{}, CompileOptions{.fusion = false, .autotune = false}}) {
    std::shared_ptr<Executable> exe = CompileOrDie(EveryKernelKind(), options);
    ASSERT_NE(exe, nullptr);
    const std::string bytes = exe->Serialize();
    const int64_t passes_before = CompilerPassesRun();
    absl::StatusOr<std::shared_ptr<Executable>> loaded = client_->LoadSerializedExecutable(bytes);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(CompilerPassesRun(), passes_before) << "loading ran a compiler pass";
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(exe->proto(), (*loaded)->proto()));

    const std::vector<HostArray> args = EveryKernelKindArgs();
    absl::StatusOr<std::vector<HostArray>> a = testing::ExecuteOnHost(*client_, *exe, args);
    absl::StatusOr<std::vector<HostArray>> b = testing::ExecuteOnHost(*client_, **loaded, args);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->size(), 9u);
    ASSERT_EQ(b->size(), a->size());
    for (size_t k = 0; k < a->size(); ++k) {
      EXPECT_EQ((*a)[k].shape, (*b)[k].shape);
      EXPECT_EQ((*a)[k].bytes, (*b)[k].bytes) << "result " << k;
    }
    EXPECT_EQ(CompilerPassesRun(), passes_before) << "executing ran a compiler pass";
    // The repeated result and the parameter result.
    EXPECT_EQ((*a)[7].bytes, (*a)[0].bytes);
    EXPECT_EQ((*a)[8].bytes, args[0].bytes);
    EXPECT_EQ((*a)[5].bytes, (*a)[0].bytes);  // the reshape has the same bytes
    // Serializing the loaded executable gives the same bytes (serialization is deterministic, map
    // fields included), which load again.
    EXPECT_EQ((*loaded)->Serialize(), bytes);
    absl::StatusOr<std::shared_ptr<Executable>> again = client_->LoadSerializedExecutable((*loaded)->Serialize());
    ASSERT_TRUE(again.ok()) << again.status();
  }
}

// With the device's kernel profiling on, every kernel counts its runs and time, its first run apart (the
// one that pays for a new arena's pages and a library's first call); with it off, nothing is counted.
TEST_F(ExecutableTest, KernelProfileCountsEveryRunAndKeepsTheFirstApart) {
  std::shared_ptr<Executable> exe = CompileOrDie(EveryKernelKind());
  ASSERT_NE(exe, nullptr);
  const std::vector<HostArray> args = EveryKernelKindArgs();
  Device* device = client_->device(0);
  ASSERT_TRUE(testing::ExecuteOnHost(*client_, *exe, args).ok());
  for (const Executable::KernelTime& t : exe->kernel_times()) EXPECT_EQ(t.runs, 0);
  device->set_kernel_profiling(KernelProfiling::kTimes);
  constexpr int kRuns = 3;
  for (int r = 0; r < kRuns; ++r) ASSERT_TRUE(testing::ExecuteOnHost(*client_, *exe, args).ok());
  device->set_kernel_profiling(KernelProfiling::kOff);
  const std::vector<Executable::KernelTime> times = exe->kernel_times();
  ASSERT_EQ(times.size(), static_cast<size_t>(exe->proto().kernels_size()));
  for (size_t k = 0; k < times.size(); ++k) {
    EXPECT_EQ(times[k].runs, kRuns) << "kernel " << k;
    EXPECT_GT(times[k].first_ns, 0) << "kernel " << k;
    EXPECT_LT(times[k].first_ns, times[k].total_ns) << "kernel " << k << ": the later runs' time is in the total too";
  }
}

// With reruns, every kernel but a collective runs again right after each run but its first, timed apart, and
// the results keep their bits: each computes its outputs from its inputs alone, into bytes it does not read. A
// collective would need the other partitions to run it again too.
TEST_F(ExecutableTest, KernelProfileRerunsEveryKernelButACollectiveAndKeepsTheBits) {
  // The kinds EveryKernelKind has not: a scatter-add, layer norm and its gradient, attention and its gradient, and
  // a collective (an all-reduce of one partition).
  ModuleBuilder b("more_kernel_kinds");
  const int64_t x = b.Parameter(0, proto::F32, {6, 8});
  b.Parameter(1, proto::F32, {8, 4});
  const int64_t idx = b.Parameter(2, proto::S32, {3});
  const int64_t summed = b.Op(Opcode::kAllReduce, {x}, proto::F32, {6, 8},
                              [](proto::Instruction& i) { i.set_combiner(static_cast<int32_t>(Combiner::kSum)); });
  b.Output(b.Unary(Opcode::kTanh, b.Add(summed, x)));
  b.Output(b.Op(Opcode::kIndexAdd, {x, idx, b.Slice(x, {0, 0}, {3, 8}, {1, 1})}, proto::F32, {6, 8},
                [](proto::Instruction& i) { i.set_site(1); }));
  const auto normalize = [](proto::Instruction& i) {
    i.set_axis(1);
    i.set_value(1e-5);
  };
  b.Output(b.Op(Opcode::kLayerNorm, {x}, proto::F32, {6, 8}, normalize));
  b.Output(b.Op(Opcode::kLayerNormGrad, {x, b.Unary(Opcode::kTanh, x)}, proto::F32, {6, 8}, normalize));
  const int64_t q = b.Reshape(x, {2, 3, 8});
  const auto scaled = [](proto::Instruction& i) { i.set_value(0.5); };
  const int64_t attention = b.Op(Opcode::kAttention, {q, q, q}, proto::F32, {2, 3, 9}, scaled);
  b.Output(attention);
  b.Output(b.Op(Opcode::kAttentionGrad, {q, q, q, attention, q}, proto::F32, {2, 72}, scaled));
  for (const auto& [module, parameters] : {std::pair{EveryKernelKind(), 4}, std::pair{b.module(), 3}}) {
    SCOPED_TRACE(module.name());
    std::shared_ptr<Executable> exe = CompileOrDie(module);
    ASSERT_NE(exe, nullptr);
    std::vector<HostArray> args = EveryKernelKindArgs();  // x [6, 8] first
    args.resize(static_cast<size_t>(parameters));
    Device* device = client_->device(0);
    const absl::StatusOr<std::vector<HostArray>> want = testing::ExecuteOnHost(*client_, *exe, args);
    ASSERT_TRUE(want.ok()) << want.status();
    device->set_kernel_profiling(KernelProfiling::kTimesAndReruns);
    constexpr int kRuns = 3;
    for (int r = 0; r < kRuns; ++r) {
      const absl::StatusOr<std::vector<HostArray>> got = testing::ExecuteOnHost(*client_, *exe, args);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->size(), want->size());
      for (size_t j = 0; j < want->size(); ++j) EXPECT_EQ((*got)[j].bytes, (*want)[j].bytes) << "result " << j;
    }
    device->set_kernel_profiling(KernelProfiling::kOff);
    const std::vector<Executable::KernelTime> times = exe->kernel_times();
    int collectives = 0;
    for (size_t k = 0; k < times.size(); ++k) {
      const bool collective = exe->proto().kernels(static_cast<int>(k)).kind() == proto::Kernel::COLLECTIVE;
      collectives += collective;
      EXPECT_EQ(times[k].runs, kRuns) << "kernel " << k;
      EXPECT_EQ(times[k].reruns, collective ? 0 : kRuns - 1) << "kernel " << k;
      EXPECT_EQ(times[k].rerun_ns > 0, !collective) << "kernel " << k;
    }
    const bool more_kinds = module.name() == "more_kernel_kinds";
    EXPECT_EQ(collectives, more_kinds ? 1 : 0);
    if (more_kinds) {
      for (proto::Kernel::Kind kind : {proto::Kernel::SCATTER, proto::Kernel::NORMALIZE, proto::Kernel::ATTENTION,
                                       proto::Kernel::ATTENTION_GRAD}) {
        EXPECT_TRUE(std::ranges::any_of(exe->proto().kernels(), [&](const proto::Kernel& k) {
          return k.kind() == kind;
        })) << proto::Kernel::Kind_Name(kind);
      }
    }
  }
}

// Small executables are estimated cheaper than a hand-off to the stream thread (and so run on the
// caller's); GEMMs and large loops never are.
TEST_F(ExecutableTest, OnlySmallWorkWithoutGemmIsEstimatedCheaperThanAHandOff) {
  auto chain = [](int64_t elements) {
    ModuleBuilder b("chain");
    const int64_t x = b.Parameter(0, proto::F32, {elements});
    b.Output(b.Unary(Opcode::kTanh, b.Add(x, x)));
    return b.module();
  };
  std::shared_ptr<Executable> small = CompileOrDie(chain(16));
  std::shared_ptr<Executable> large = CompileOrDie(chain(1 << 16));
  std::shared_ptr<Executable> gemm = CompileOrDie(EveryKernelKind());
  ASSERT_TRUE(small && large && gemm);
  // Small: under a bare-metal wake-up (~2 us). Large and GEMM: above any wake-up a stream records.
  EXPECT_LE(small->inline_ns(), 2000);
  EXPECT_GT(large->inline_ns(), Stream::kMaxWakeNs);
  EXPECT_EQ(gemm->inline_ns(), Executable::kNeverInline);
  // The same verdict after a round trip through bytes.
  absl::StatusOr<std::shared_ptr<Executable>> loaded = client_->LoadSerializedExecutable(small->Serialize());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->inline_ns(), small->inline_ns());
  const std::vector<HostArray> args = {MakeArray(PrimitiveType::kF32, {16}, std::vector<float>(16, 0.5f))};
  absl::StatusOr<std::vector<HostArray>> out = testing::ExecuteOnHost(*client_, **loaded, args);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].values<float>(), std::vector<float>(16, std::tanh(1.0f)));
}

// What the estimate decides: a small executable whose arguments are ready runs on the calling thread of an
// idle stream, so its results are ready when Execute returns; handed to the stream thread, they would be
// ready only microseconds later (a wake-up), and twenty runs would not all find them ready at once.
TEST_F(ExecutableTest, ASmallExecutableRunsOnTheCallersThreadWhenTheStreamIsIdle) {
  ModuleBuilder b("small");
  const int64_t x = b.Parameter(0, proto::F32, {16});
  b.Output(b.Add(x, x));
  std::shared_ptr<Executable> small = CompileOrDie(b.module());
  ASSERT_NE(small, nullptr);
  Device* device = client_->device(0);
  ASSERT_LE(small->inline_ns(), device->stream().wake_ns());
  const std::vector<float> halves(16, 0.5f);
  absl::StatusOr<std::shared_ptr<Buffer>> arg =
      client_->BufferFromHost(halves.data(), {PrimitiveType::kF32, {16}}, device);
  ASSERT_TRUE(arg.ok()) << arg.status();
  const std::vector<std::shared_ptr<Buffer>> args = {*arg};
  for (int run = 0; run < 20; ++run) {
    device->stream().Synchronize();  // idle
    absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> results = small->Execute(args, device);
    ASSERT_TRUE(results.ok()) << results.status();
    ASSERT_EQ(results->size(), 1u);
    EXPECT_TRUE((*results)[0]->ready()->IsReady()) << "run " << run << " was handed to the stream thread";
    std::vector<float> out(16);
    ASSERT_TRUE((*results)[0]->ToHost(out.data(), out.size() * sizeof(float)).ok());
    EXPECT_EQ(out, std::vector<float>(16, 1.0f));
  }
}

TEST_F(ExecutableTest, CompiledFactsSurviveTheRoundTrip) {
  std::shared_ptr<Executable> exe = CompileOrDie(EveryKernelKind());
  ASSERT_NE(exe, nullptr);
  const proto::Executable& p = exe->proto();
  EXPECT_EQ(p.compiler_version(), std::string(kCompilerVersion));
  EXPECT_EQ(p.device_kind(), std::string(Device::kKind));
  EXPECT_EQ(p.module_name(), "every_kernel_kind");
  EXPECT_EQ(p.parameters_size(), 4);
  EXPECT_EQ(p.outputs_size(), 9);
  std::set<proto::Kernel::Kind> kinds;
  for (const proto::Kernel& k : p.kernels()) kinds.insert(k.kind());
  EXPECT_EQ(kinds.size(), 7u) << "expected every kernel kind";
  absl::StatusOr<proto::Executable> parsed = Executable::Parse(exe->Serialize());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->pass_timings_size(), p.pass_timings_size());
  EXPECT_EQ(parsed->arena_bytes(), p.arena_bytes());
}

// --- corrupt bytes --------------------------------------------------------------------------------
TEST_F(ExecutableTest, RejectsBytesThatAreNotAnExecutable) {
  for (const std::string& bytes : {std::string(), std::string("garbage"), std::string(100, '\0'),
                                   std::string("LZRTEXE\n"), std::string("LZRTEXE\n") + std::string(11, '\x01')}) {
    absl::StatusOr<std::shared_ptr<Executable>> r = client_->LoadSerializedExecutable(bytes);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_THAT(Message(r.status()), HasSubstr("invalid executable"));
  }
  std::string bytes = CompileOrDie(EveryKernelKind())->Serialize();
  bytes[0] ^= 1;
  EXPECT_THAT(Message(client_->LoadSerializedExecutable(bytes).status()), HasSubstr("bad magic"));
}

TEST_F(ExecutableTest, RejectsEveryTruncationAndTrailingBytes) {
  const std::string bytes = CompileOrDie(EveryKernelKind())->Serialize();
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<std::shared_ptr<Executable>> r = client_->LoadSerializedExecutable(bytes.substr(0, n));
    ASSERT_FALSE(r.ok()) << "truncated to " << n << " of " << bytes.size() << " bytes loaded";
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  }
  absl::StatusOr<std::shared_ptr<Executable>> r = client_->LoadSerializedExecutable(bytes + "x");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Message(r.status()), HasSubstr("does not match"));
}

TEST_F(ExecutableTest, RejectsOtherFormatVersions) {
  const std::string body = CompileOrDie(EveryKernelKind())->proto().SerializeAsString();
  for (uint32_t v : {0u, Executable::kFormatVersion - 1, Executable::kFormatVersion + 1, 0xffffffffu}) {
    absl::StatusOr<std::shared_ptr<Executable>> r = client_->LoadSerializedExecutable(Frame(body, v));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(Message(r.status()), HasSubstr("format version"));
  }
  EXPECT_TRUE(client_->LoadSerializedExecutable(Frame(body)).ok());
}

TEST_F(ExecutableTest, RejectsOtherCompilerVersionsAndDeviceKinds) {
  proto::Executable p = CompileOrDie(EveryKernelKind())->proto();
  p.set_compiler_version("lazyrt-sim-compiler/0");
  absl::StatusOr<std::shared_ptr<Executable>> r = client_->LoadSerializedExecutable(Frame(p.SerializeAsString()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(r.status()), HasSubstr("lazyrt-sim-compiler/0"));
  EXPECT_THAT(Message(r.status()), HasSubstr(std::string(kCompilerVersion)));

  p = CompileOrDie(EveryKernelKind())->proto();
  p.set_device_kind("tpu-v9");
  r = client_->LoadSerializedExecutable(Frame(p.SerializeAsString()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(r.status()), HasSubstr("tpu-v9"));
}

// Every single-bit flip of the serialized bytes is either rejected with a status or loads into an
// executable that runs (possibly failing with a status) without crashing. Flips in the header are
// always rejected.
TEST_F(ExecutableTest, BitFlipsNeverCrash) {
  ModuleBuilder b("small");
  const int64_t x = b.Parameter(0, proto::F32, {4, 3});
  const int64_t idx = b.Parameter(1, proto::S64, {2});
  const int64_t t = b.Unary(Opcode::kTanh, b.Add(b.Transpose(b.Parameter(2, proto::F32, {3, 4}), {1, 0}), x));
  b.Output(b.Reduce(Combiner::kSum, t, {1}));
  b.Output(b.IndexSelect(t, idx, 0));
  b.Output(b.Dot(t, b.Parameter(3, proto::F32, {3, 2})));
  b.Output(b.Concatenate({x, t}, 1));
  std::shared_ptr<Executable> exe = CompileOrDie(b.module(), {.fusion = true, .autotune = false});
  ASSERT_NE(exe, nullptr);
  proto::Executable small = exe->proto();
  small.clear_pass_timings();  // fewer bytes that cannot matter
  const std::string bytes = Frame(small.SerializeAsString());
  std::unique_ptr<Client> tiny = testing::MakeClient(int64_t{1} << 20);  // bounds huge allocations
  const google::protobuf::LogSilencer quiet;  // flipped bits in strings make protobuf log invalid UTF-8
  int loaded = 0, rejected = 0;
  for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    std::string flipped = bytes;
    flipped[bit / 8] = static_cast<char>(flipped[bit / 8] ^ (1 << (bit % 8)));
    absl::StatusOr<std::shared_ptr<Executable>> r = tiny->LoadSerializedExecutable(flipped);
    if (!r.ok()) {
      ++rejected;
      EXPECT_FALSE(r.status().message().empty());
      continue;
    }
    ASSERT_GE(bit, 20u * 8) << "a flip in the header loaded";
    ++loaded;
    // Run it on arguments of the shapes it now declares (when they are small).
    std::vector<HostArray> args;
    bool small_enough = true;
    for (const proto::Shape& s : (*r)->proto().parameters()) {
      const ArrayShape shape = FromProto(s);
      small_enough = small_enough && shape.byte_size() <= (1 << 16);
      if (!small_enough) break;
      HostArray a(shape);
      std::fill(a.bytes.begin(), a.bytes.end(), 0);
      args.push_back(std::move(a));
    }
    if (!small_enough) continue;
    absl::StatusOr<std::vector<HostArray>> out = testing::ExecuteOnHost(*tiny, **r, args);
    (void)out;  // any status is fine; not crashing is the point
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(loaded, 0);
  EXPECT_EQ(tiny->device(0)->memory_stats().bytes_in_use, 0);
}

// --- tampered executables: checked at load -------------------------------------------------------
int FirstArenaSlot(const proto::Executable& p) {
  for (int s = 0; s < p.slots_size(); ++s) {
    if (p.slots(s).kind() == proto::Slot::ARENA) return s;
  }
  return -1;
}

proto::Module Chain() {
  ModuleBuilder b("chain");
  const int64_t x = b.Parameter(0, proto::F32, {4, 5});
  b.Output(b.Add(b.Unary(Opcode::kExp, b.Unary(Opcode::kTanh, x)), x));  // fused: one kernel
  return b.module();
}

TEST_F(ExecutableTest, RejectsSlotOutsideTheArena) {
  const proto::Executable good = CompileOrDie(Chain(), {.fusion = false, .autotune = false})->proto();
  const int s = FirstArenaSlot(good);
  ASSERT_GE(s, 0);
  ASSERT_TRUE(LoadBothWays(good).ok());
  const int64_t bytes = FromProto(good.slots(s).shape()).byte_size();
  for (int64_t offset : {good.arena_bytes() - bytes + 1, good.arena_bytes(), int64_t{-64}, int64_t{1} << 62,
                         std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
    proto::Executable p = good;
    p.mutable_slots(s)->set_offset(offset);
    const absl::Status st = LoadBothWays(p);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << offset;
    EXPECT_THAT(Message(st), HasSubstr(absl::StrCat("slot ", s, ": outside the arena"))) << offset;
  }
  proto::Executable misaligned = good;
  misaligned.mutable_slots(s)->set_offset(good.slots(s).offset() + 4);
  misaligned.set_arena_bytes(good.arena_bytes() + 64);
  EXPECT_THAT(Message(LoadBothWays(misaligned)), HasSubstr("misaligned arena offset"));
  int64_t end = 0;  // where the last arena slot ends
  for (const proto::Slot& slot : good.slots()) {
    if (slot.kind() == proto::Slot::ARENA) end = std::max(end, slot.offset() + FromProto(slot.shape()).byte_size());
  }
  proto::Executable shrunk = good;
  shrunk.set_arena_bytes(end - 1);
  EXPECT_THAT(Message(LoadBothWays(shrunk)), HasSubstr("outside the arena"));
  proto::Executable negative = good;
  negative.set_arena_bytes(-1);
  EXPECT_THAT(Message(LoadBothWays(negative)), HasSubstr("arena size out of range"));
}

TEST_F(ExecutableTest, RejectsKernelReadingAnUnwrittenSlot) {
  const proto::Executable good = CompileOrDie(Chain(), {.fusion = false, .autotune = false})->proto();
  ASSERT_GE(good.kernels_size(), 3);
  // Run the last kernel first: it reads values no kernel has written yet.
  proto::Executable p = good;
  p.mutable_kernels()->SwapElements(0, p.kernels_size() - 1);
  EXPECT_THAT(Message(LoadBothWays(p)), HasSubstr("before it is written"));
  // A kernel reading an output-less arena slot that nothing writes.
  proto::Executable extra = good;
  proto::Slot* orphan = extra.add_slots();
  orphan->set_kind(proto::Slot::ARENA);
  *orphan->mutable_shape() = good.slots(static_cast<int>(good.kernels(0).output())).shape();
  orphan->set_offset(0);
  extra.mutable_kernels(0)->set_inputs(0, extra.slots_size() - 1);
  EXPECT_THAT(Message(LoadBothWays(extra)), HasSubstr("before it is written"));
  // Out of range slot numbers.
  for (int64_t bad : {int64_t{-1}, int64_t{good.slots_size()}, int64_t{1} << 40}) {
    proto::Executable q = good;
    q.mutable_kernels(0)->set_inputs(0, bad);
    EXPECT_THAT(Message(LoadBothWays(q)), HasSubstr("reads slot")) << bad;
  }
}

TEST_F(ExecutableTest, RejectsLoadReachingOutsideItsInput) {
  const proto::Executable good = CompileOrDie(Chain(), {.fusion = true, .autotune = false})->proto();
  ASSERT_EQ(good.kernels_size(), 1);
  int load = -1;
  for (int i = 0; i < good.kernels(0).program_size(); ++i) {
    if (good.kernels(0).program(i).load()) load = i;
  }
  ASSERT_GE(load, 0);
  const auto tamper = [&](const std::function<void(proto::Step&)>& f) {
    proto::Executable p = good;
    f(*p.mutable_kernels(0)->mutable_program(load));
    return LoadBothWays(p);
  };
  EXPECT_THAT(Message(tamper([](proto::Step& s) { s.set_offset(1); })), HasSubstr("load reaches outside its input"));
  EXPECT_THAT(Message(tamper([](proto::Step& s) { s.set_offset(-1); })), HasSubstr("load reaches outside its input"));
  EXPECT_THAT(Message(tamper([](proto::Step& s) { s.set_strides(0, 6); })),
              HasSubstr("load reaches outside its input"));
  EXPECT_THAT(Message(tamper([](proto::Step& s) { s.set_strides(1, -1); })),
              HasSubstr("load reaches outside its input"));
  EXPECT_THAT(Message(tamper([](proto::Step& s) { s.set_input(7); })), HasSubstr("input out of range"));
  EXPECT_THAT(Message(tamper([](proto::Step& s) { s.add_strides(1); })), HasSubstr("a stride per iteration dim"));
  EXPECT_THAT(Message(tamper([](proto::Step& s) { s.set_type(proto::F64); })), HasSubstr("load type differs"));
  // Strides so large that the reach overflows 64 bits and wraps back inside: (5 - 1) * 2^62 = 2^64.
  EXPECT_THAT(Message(tamper([](proto::Step& s) {
                s.set_offset(0);
                s.set_strides(0, 0);
                s.set_strides(1, int64_t{1} << 62);
              })),
              HasSubstr("load reaches outside its input"));
  EXPECT_THAT(Message(tamper([](proto::Step& s) {
                s.set_offset(4);
                s.set_strides(0, (int64_t{1} << 62) + 5);  // (4 - 1) * stride wraps to 2^62 + 15
                s.set_strides(1, -1);
              })),
              HasSubstr("load reaches outside its input"));
  EXPECT_THAT(Message(tamper([](proto::Step& s) {
                s.set_offset(std::numeric_limits<int64_t>::max());
                s.set_strides(0, 0);
                s.set_strides(1, 0);
              })),
              HasSubstr("load reaches outside its input"));
  EXPECT_THAT(Message(tamper([](proto::Step& s) { s.set_strides(0, std::numeric_limits<int64_t>::min()); })),
              HasSubstr("load reaches outside its input"));
}

// A dim of one point is never stepped along, whatever stride a load gives it: walking past the last point
// with a huge one overflowed (UndefinedBehaviorSanitizer, in the executable loader's fuzzer).
TEST_F(ExecutableTest, ALoadsStrideAlongADimOfOnePointIsNeverTaken) {
  // A contiguous load of [4, 1], its last dim of one point; a strided one (a transpose) of [3, 1, 4], its
  // middle dim.
  ModuleBuilder contiguous("last_dim_of_one_point");
  contiguous.Output(contiguous.Unary(Opcode::kExp, contiguous.Parameter(0, proto::F32, {4, 1})));
  ModuleBuilder strided("middle_dim_of_one_point");
  strided.Output(
      strided.Unary(Opcode::kExp, strided.Transpose(strided.Parameter(0, proto::F32, {4, 1, 3}), {2, 1, 0})));
  std::mt19937_64 rng(11);
  for (const auto& [module, dims] : {std::pair{contiguous.module(), std::vector<int64_t>{4, 1}},
                                     std::pair{strided.module(), std::vector<int64_t>{4, 1, 3}}}) {
    std::shared_ptr<Executable> exe = CompileOrDie(module, {.fusion = true, .autotune = false});
    ASSERT_NE(exe, nullptr);
    proto::Executable p = exe->proto();
    ASSERT_EQ(p.kernels_size(), 1) << module.name();
    const ArrayShape space = FromProto(p.kernels(0).iteration_shape());
    int tampered = 0;
    for (proto::Step& step : *p.mutable_kernels(0)->mutable_program()) {
      if (!step.load()) continue;
      for (size_t d = 0; d < space.dims.size(); ++d) {
        if (space.dims[d] != 1) continue;
        step.set_strides(static_cast<int>(d), std::numeric_limits<int64_t>::max());
        ++tampered;
      }
    }
    ASSERT_EQ(tampered, 1) << module.name();
    ASSERT_TRUE(LoadBothWays(p).ok()) << module.name();
    absl::StatusOr<std::shared_ptr<Executable>> loaded = Executable::Load(p);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const int64_t n = ArrayShape{PrimitiveType::kF32, dims}.numel();
    const std::vector<HostArray> args = {MakeArray<float>(PrimitiveType::kF32, dims, testing::RandomFloats(rng, n))};
    absl::StatusOr<std::vector<HostArray>> want = testing::ExecuteOnHost(*client_, *exe, args);
    absl::StatusOr<std::vector<HostArray>> got = testing::ExecuteOnHost(*client_, **loaded, args);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ((*got)[0].bytes, (*want)[0].bytes) << module.name();
  }
}

// Buffer assignment never lets a kernel's arrays share arena bytes: one that did would copy between
// overlapping bytes (memcpy: AddressSanitizer's report in the loader's fuzzer) and have threads write what
// others read.
TEST_F(ExecutableTest, RejectsAKernelWhoseArraysShareArenaBytes) {
  ModuleBuilder b("overlap");
  const int64_t e = b.Unary(Opcode::kExp, b.Parameter(0, proto::F32, {32}));
  b.Output(b.Unary(Opcode::kTanh, b.Concatenate({e, e}, 0)));
  std::shared_ptr<Executable> exe = CompileOrDie(b.module(), {.fusion = false, .autotune = false});
  ASSERT_NE(exe, nullptr);
  const proto::Executable good = exe->proto();
  int concat = -1;
  for (int k = 0; k < good.kernels_size(); ++k) {
    if (good.kernels(k).kind() == proto::Kernel::CONCATENATE) concat = k;
  }
  ASSERT_GE(concat, 0);
  const proto::Slot& in = good.slots(static_cast<int>(good.kernels(concat).inputs(0)));
  ASSERT_EQ(in.kind(), proto::Slot::ARENA);
  ASSERT_EQ(good.slots(static_cast<int>(good.kernels(concat).output())).kind(), proto::Slot::ARENA);
  for (int64_t shift : {0, 64}) {  // the same bytes, and the input's second half and past it
    proto::Executable p = good;
    proto::Slot& out = *p.mutable_slots(static_cast<int>(good.kernels(concat).output()));
    out.set_offset(in.offset() + shift);
    p.set_arena_bytes(std::max(p.arena_bytes(), out.offset() + FromProto(out.shape()).byte_size()));
    EXPECT_THAT(Message(LoadBothWays(p)), HasSubstr("whose arena bytes overlap slot")) << shift;
  }
}

// Shapes are bounded also where a dim is 0: the dims after it make strides and partial products that
// overflow ([0, 2^32, 2^32]: 2^64).
TEST_F(ExecutableTest, RejectsShapesTooLargeToWalk) {
  const proto::Executable good = CompileOrDie(Chain(), {.fusion = false, .autotune = false})->proto();
  proto::Executable slot = good;
  proto::Shape* shape = slot.mutable_slots(FirstArenaSlot(slot))->mutable_shape();
  shape->clear_dims();
  for (int64_t d : {int64_t{0}, int64_t{1} << 32, int64_t{1} << 32}) shape->add_dims(d);
  EXPECT_THAT(Message(LoadBothWays(slot)), HasSubstr("too large"));

  ModuleBuilder b("reduce");
  b.Output(b.Reduce(Combiner::kSum, b.Unary(Opcode::kExp, b.Parameter(0, proto::F32, {4, 6})), {1}));
  proto::Executable reduce = CompileOrDie(b.module(), {.fusion = true, .autotune = false})->proto();
  ASSERT_EQ(reduce.kernels_size(), 1);
  ASSERT_EQ(reduce.kernels(0).kind(), proto::Kernel::REDUCE);
  proto::Kernel& k = *reduce.mutable_kernels(0);
  k.mutable_iteration_shape()->clear_dims();
  for (int64_t d : {int64_t{4}, int64_t{0}, int64_t{1} << 32, int64_t{1} << 32})
    k.mutable_iteration_shape()->add_dims(d);
  k.clear_reduce_dims();
  for (int64_t d : {1, 2, 3}) k.add_reduce_dims(d);
  EXPECT_THAT(Message(LoadBothWays(reduce)), HasSubstr("bad reduction"));

  // An iteration space that a DOT carries and does not use: counted, so checked.
  ModuleBuilder d("dot");
  d.Output(d.Dot(d.Parameter(0, proto::F32, {4, 6}), d.Parameter(1, proto::F32, {6, 5})));
  proto::Executable dot = CompileOrDie(d.module(), {.fusion = true, .autotune = false})->proto();
  ASSERT_EQ(dot.kernels_size(), 1);
  ASSERT_EQ(dot.kernels(0).kind(), proto::Kernel::DOT);
  for (int64_t dim : {int64_t{1} << 40, int64_t{1} << 40})
    dot.mutable_kernels(0)->mutable_iteration_shape()->add_dims(dim);
  EXPECT_THAT(Message(LoadBothWays(dot)), HasSubstr("kernel 0's iteration space: too large"));
}

TEST_F(ExecutableTest, ReductionsExtraOutputsCoverItsIterationSpace) {
  // Sibling fusion: the reduction sums e over rows and stores tanh(e) beside, an array of its iteration
  // space [4, 6]; its own [4] output in that place is refused.
  ModuleBuilder b("reduce_and_loop");
  const int64_t e = b.Unary(Opcode::kExp, b.Parameter(0, proto::F32, {4, 6}));
  b.Output(b.Reduce(Combiner::kSum, e, {1}));
  b.Output(b.Unary(Opcode::kTanh, e));
  const proto::Executable good = CompileOrDie(b.module(), {.fusion = true, .autotune = false})->proto();
  ASSERT_EQ(good.kernels_size(), 1);
  ASSERT_EQ(good.kernels(0).kind(), proto::Kernel::REDUCE);
  ASSERT_EQ(good.kernels(0).extra_outputs_size(), 1);
  EXPECT_TRUE(LoadBothWays(good).ok());
  proto::Executable bad = good;
  bad.mutable_kernels(0)->set_extra_outputs(0, good.kernels(0).output());
  EXPECT_THAT(Message(LoadBothWays(bad)), HasSubstr("extra output 0 is not a f32 array of the iteration space's dims"));
}

TEST_F(ExecutableTest, RejectsMalformedProgramsAndKernels) {
  const proto::Executable good = CompileOrDie(Chain(), {.fusion = true, .autotune = false})->proto();
  const auto tamper = [&](const std::function<void(proto::Executable&)>& f) {
    proto::Executable p = good;
    f(p);
    return Message(LoadBothWays(p));
  };
  const int last = good.kernels(0).program_size() - 1;
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.mutable_kernels(0)->mutable_program(last)->set_args(0, last); }),
              HasSubstr("not an earlier step"));
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.mutable_kernels(0)->mutable_program(last)->add_args(0); }),
              HasSubstr("wrong number of arguments"));
  EXPECT_THAT(tamper([&](proto::Executable& p) {
                p.mutable_kernels(0)->mutable_program(last)->set_opcode(static_cast<int32_t>(Opcode::kDot));
              }),
              HasSubstr("cannot be fused"));
  EXPECT_THAT(tamper([&](proto::Executable& p) {
                p.mutable_kernels(0)->mutable_program(last)->set_opcode(static_cast<int32_t>(1234));
              }),
              HasSubstr("invalid opcode"));
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.mutable_kernels(0)->clear_program(); }),
              HasSubstr("empty fused program"));
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.mutable_kernels(0)->mutable_iteration_shape()->set_dims(0, 5); }),
              HasSubstr("iteration space must be the output"));
  EXPECT_THAT(
      tamper([&](proto::Executable& p) { p.mutable_kernels(0)->set_kind(static_cast<proto::Kernel::Kind>(42)); }),
      HasSubstr("unknown kernel kind"));
  // Operand views are read by attention and concatenation kernels only: a loop would ignore one.
  EXPECT_THAT(tamper([&](proto::Executable& p) {
                proto::OperandView* v = p.mutable_kernels(0)->add_operand_views();
                v->add_dims(1);
                v->add_strides(1);
              }),
              HasSubstr("has operand views, which only ATTENTION, ATTENTION_GRAD, CONCATENATE and DOT read"));
  // Result views are written by an attention's gradient only: a loop would write its output as it is.
  EXPECT_THAT(tamper([&](proto::Executable& p) {
                proto::OperandView* v = p.mutable_kernels(0)->add_result_views();
                v->add_dims(1);
                v->add_strides(1);
              }),
              HasSubstr("has result views, which only ATTENTION_GRAD writes through"));
  // A kernel writing a parameter, an alias, or nothing that exists.
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.mutable_kernels(0)->set_output(0); }),
              HasSubstr("writes a slot it may not"));
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.mutable_kernels(0)->set_output(99); }),
              HasSubstr("writes a slot it may not"));
  // Extra outputs: to a writable slot of the output's dims and the result step's type, one per result
  // step, and from a loop kernel only.
  const int64_t out = good.kernels(0).output();
  const auto extra = [&](int64_t slot, int64_t root) {
    return [=](proto::Executable& p) {
      p.mutable_kernels(0)->add_extra_outputs(slot);
      p.mutable_kernels(0)->add_extra_roots(root);
    };
  };
  EXPECT_THAT(tamper(extra(0, last)), HasSubstr("writes a slot it may not"));
  EXPECT_THAT(tamper(extra(99, last)), HasSubstr("writes a slot it may not"));
  EXPECT_THAT(tamper(extra(out, last + 1)), HasSubstr("is not a step"));
  EXPECT_THAT(tamper(extra(out, -1)), HasSubstr("is not a step"));
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.mutable_kernels(0)->add_extra_outputs(out); }),
              HasSubstr("a result step each"));
  EXPECT_THAT(tamper([&](proto::Executable& p) {
                proto::Step* wide = p.mutable_kernels(0)->add_program();  // f64, into an f32 slot
                wide->set_opcode(static_cast<int32_t>(Opcode::kConvert));
                wide->set_type(proto::F64);
                wide->add_args(last);
                extra(out, last + 1)(p);
              }),
              HasSubstr("extra output 0 is not a f64 array"));
  // The last step is the output's value: of the output's type (its store rounds a 16-bit value).
  EXPECT_THAT(tamper([&](proto::Executable& p) {
                proto::Step* narrow = p.mutable_kernels(0)->add_program();  // bf16, into an f32 slot
                narrow->set_opcode(static_cast<int32_t>(Opcode::kConvert));
                narrow->set_type(proto::BF16);
                narrow->add_args(last);
              }),
              HasSubstr("program type differs from the output"));
  EXPECT_THAT(tamper([&](proto::Executable& p) {
                proto::Slot* other = p.add_slots();
                other->set_kind(proto::Slot::ARENA);
                other->mutable_shape()->set_type(proto::F32);
                other->mutable_shape()->add_dims(1);
                p.set_arena_bytes(p.arena_bytes() + 64);
                other->set_offset(p.arena_bytes() - 64);
                extra(p.slots_size() - 1, last)(p);
              }),
              HasSubstr("of the iteration space's dims"));
  EXPECT_TRUE(LoadBothWays([&] {
                proto::Executable p = good;
                extra(out, last)(p);  // the output written twice: pointless, but within bounds
                return p;
              }())
                  .ok());
  // Slots and results.
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.mutable_slots(0)->set_index(5); }), HasSubstr("bad parameter"));
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.mutable_slots(0)->mutable_shape()->set_dims(0, 9); }),
              HasSubstr("bad parameter"));
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.mutable_slots(0)->mutable_shape()->set_dims(0, -9); }),
              HasSubstr("bad dimension"));
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.set_outputs(0, 0); }), HasSubstr("bad result index"));
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.set_outputs(0, 42); }), HasSubstr("bad result index"));
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.add_outputs(-1); }), HasSubstr("never computed"));
  EXPECT_THAT(tamper([&](proto::Executable& p) {
                proto::Slot* alias = p.add_slots();
                alias->set_kind(proto::Slot::ALIAS);
                alias->set_index(0);
                alias->mutable_shape()->set_type(proto::F32);
                alias->mutable_shape()->add_dims(21);
              }),
              HasSubstr("bad alias"));
  EXPECT_THAT(tamper([&](proto::Executable& p) {
                proto::Slot* alias = p.add_slots();
                alias->set_kind(proto::Slot::ALIAS);
                alias->set_index(p.slots_size() - 1);  // itself
                *alias->mutable_shape() = p.slots(0).shape();
              }),
              HasSubstr("bad alias"));
  EXPECT_THAT(tamper([&](proto::Executable& p) { p.mutable_slots(0)->set_kind(static_cast<proto::Slot::Kind>(9)); }),
              HasSubstr("unknown kind"));
}

// A concatenation's operand views are checked against the slots they read, as an attention's are: a view
// that fits loads and computes what the operand itself gives; one reaching past its slot, or with more
// views than inputs, is refused with what is wrong.
TEST_F(ExecutableTest, ConcatenationViewsAreCheckedAgainstTheirSlots) {
  const proto::Executable good = CompileOrDie(EveryKernelKind(), {.fusion = true, .autotune = false})->proto();
  int concat = -1;
  for (int k = 0; k < good.kernels_size(); ++k) {
    if (good.kernels(k).kind() == proto::Kernel::CONCATENATE) concat = k;
  }
  ASSERT_GE(concat, 0);
  const std::vector<HostArray> want =
      testing::ExecuteOnHost(*client_, *Executable::Load(good).value(), EveryKernelKindArgs()).value();
  // The first operand, [6, 4], viewed as itself: the same results.
  const auto with_view = [&](int64_t offset, int views, int64_t row_stride = 4) {
    proto::Executable p = good;
    for (int v = 0; v < views; ++v) {
      proto::OperandView* view = p.mutable_kernels(concat)->add_operand_views();
      if (v > 0) continue;
      view->add_dims(6);
      view->add_dims(4);
      view->set_offset(offset);
      view->add_strides(row_stride);
      view->add_strides(1);
    }
    return p;
  };
  const absl::StatusOr<std::shared_ptr<Executable>> same = Executable::Load(with_view(0, 1));
  ASSERT_TRUE(same.ok()) << same.status();
  const absl::StatusOr<std::vector<HostArray>> got = testing::ExecuteOnHost(*client_, **same, EveryKernelKindArgs());
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t r = 0; r < want.size(); ++r) EXPECT_EQ((*got)[r].bytes, want[r].bytes) << "result " << r;
  // Row 1 of the softmax (result 0) six times: the concatenation (result 4) reads through the view.
  const absl::StatusOr<std::shared_ptr<Executable>> repeated = Executable::Load(with_view(4, 1, 0));
  ASSERT_TRUE(repeated.ok()) << repeated.status();
  const std::vector<HostArray> rows = testing::ExecuteOnHost(*client_, **repeated, EveryKernelKindArgs()).value();
  const std::vector<float> softmax = want[0].values<float>(), joined = rows[4].values<float>();
  for (size_t i = 0; i < 24; ++i) EXPECT_EQ(joined[i], softmax[4 + i % 4]) << i;
  EXPECT_THAT(Message(LoadBothWays(with_view(1, 1))), HasSubstr("reaches outside its input"));
  EXPECT_THAT(Message(LoadBothWays(with_view(0, 3))), HasSubstr("3 operand views for 2 inputs"));
}

TEST_F(ExecutableTest, RejectsDotAndReduceThatDoNotFit) {
  ModuleBuilder b("dot");
  b.Output(b.Dot(b.Parameter(0, proto::F32, {4, 8}), b.Parameter(1, proto::F32, {8, 2})));
  b.Output(b.Reduce(Combiner::kSum, b.Parameter(2, proto::F32, {3, 5}), {1}));
  const proto::Executable good = CompileOrDie(b.module(), {.fusion = true, .autotune = false})->proto();
  int dot = -1, reduce = -1;
  for (int k = 0; k < good.kernels_size(); ++k) {
    if (good.kernels(k).kind() == proto::Kernel::DOT) dot = k;
    if (good.kernels(k).kind() == proto::Kernel::REDUCE) reduce = k;
  }
  ASSERT_GE(dot, 0);
  ASSERT_GE(reduce, 0);
  const auto tamper = [&](int k, const std::function<void(proto::Kernel&)>& f, const Dims& output_dims = {}) {
    proto::Executable p = good;
    f(*p.mutable_kernels(k));
    if (!output_dims.empty()) {  // reshape the kernel's output to match the tampered sizes
      proto::Shape* shape = p.mutable_slots(static_cast<int>(p.kernels(k).output()))->mutable_shape();
      shape->clear_dims();
      for (int64_t d : output_dims) shape->add_dims(d);
    }
    return Message(LoadBothWays(p));
  };
  EXPECT_THAT(tamper(dot, [](proto::Kernel& k) { k.set_k(9); }), HasSubstr("operands do not fit the product"));
  EXPECT_THAT(tamper(dot, [](proto::Kernel& k) { k.set_m(5); }), HasSubstr("operands do not fit the product"));
  EXPECT_THAT(tamper(dot, [](proto::Kernel& k) { k.set_batch(2); }), HasSubstr("operands do not fit the product"));
  EXPECT_THAT(tamper(dot, [](proto::Kernel& k) { k.set_variant(7); }), HasSubstr("operands do not fit the product"));
  EXPECT_THAT(tamper(dot, [](proto::Kernel& k) { k.set_lhs_batch_stride(-1); }), HasSubstr("operands do not fit"));
  // Products that overflow 64 bits and wrap to the true sizes must not pass.
  EXPECT_THAT(tamper(dot,
                     [](proto::Kernel& k) {
                       k.set_batch(3);
                       k.set_m(4);
                       k.set_n(2);
                       k.set_k(8);
                       k.set_lhs_batch_stride(std::numeric_limits<int64_t>::max());  // 2 * stride wraps to -2
                     },
                     {3, 4, 2}),
              HasSubstr("operands do not fit the product"));
  EXPECT_THAT(tamper(dot,
                     [](proto::Kernel& k) {
                       k.set_batch(int64_t{1} << 61);  // batch * m * n = 2^64 wraps to 0 elements
                       k.set_m(4);
                       k.set_n(2);
                       k.set_k(8);
                       k.set_lhs_batch_stride(0);
                       k.set_rhs_batch_stride(0);
                     },
                     {0}),
              HasSubstr("operands do not fit the product"));
  EXPECT_THAT(tamper(reduce, [](proto::Kernel& k) { k.set_reduce_dims(0, 0); }), HasSubstr("bad reduction"));
  EXPECT_THAT(tamper(reduce, [](proto::Kernel& k) { k.set_combiner(1234); }), HasSubstr("bad reduction"));
  EXPECT_THAT(tamper(reduce, [](proto::Kernel& k) { k.add_reduce_dims(1); }), HasSubstr("bad reduction"));
  // A reduced dimension of negative size is not a shape.
  EXPECT_THAT(tamper(reduce, [](proto::Kernel& k) { k.mutable_iteration_shape()->set_dims(1, -5); }),
              HasSubstr("bad reduction"));
}

// --- execution ------------------------------------------------------------------------------------
// Two executions queued on one stream run in one arena: each takes its block as it starts (the freed block
// of the one before), where taking it at submission held two, each last touched a run before.
TEST_F(ExecutableTest, QueuedExecutionsRunInTheSameArena) {
  ModuleBuilder b("arena");
  const int64_t in = b.Parameter(0, proto::F32, {8000});
  int64_t sum = b.Unary(Opcode::kTanh, in);
  for (int i = 1; i < 4; ++i) sum = b.Add(sum, b.Unary(Opcode::kTanh, b.Add(in, b.Constant(i, proto::F32, {8000}))));
  b.Output(b.Reduce(Combiner::kSum, sum, {0}));
  std::shared_ptr<Executable> exe = CompileOrDie(b.module(), {.fusion = false, .autotune = false});
  ASSERT_NE(exe, nullptr);
  const int64_t arena = exe->proto().arena_bytes();
  ASSERT_GT(arena, 0);
  std::unique_ptr<Client> client = testing::MakeClient(64 << 20);
  Device* device = client->device(0);
  absl::StatusOr<DeviceMemory> memory = device->Allocate(8000 * 4);
  ASSERT_TRUE(memory.ok());
  std::fill_n(static_cast<float*>(memory->data()), 8000, 0.0f);
  auto written = std::make_shared<Event>();  // the argument is ready when the test says so
  std::vector<std::shared_ptr<Buffer>> args = {std::make_shared<Buffer>(
      device, ArrayShape{PrimitiveType::kF32, {8000}}, std::make_shared<DeviceMemory>(*std::move(memory)), written)};
  const int64_t before = device->memory_stats().bytes_in_use;
  absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> first = exe->Execute(args, device);
  absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> second = exe->Execute(args, device);
  ASSERT_TRUE(first.ok() && second.ok());
  // Both arenas counted from submission, as one: the stream binds one at a time. Two f32 results.
  EXPECT_EQ(device->memory_stats().bytes_in_use, before + arena + 2 * 4);
  EXPECT_EQ(device->memory_stats().arena_bytes, arena);
  written->Set(absl::OkStatus());
  for (const auto* results : {&*first, &*second}) {
    float total = 0;
    ASSERT_TRUE((*results)[0]->ToHost(&total, sizeof total).ok());
    EXPECT_NEAR(total, 8000 * (std::tanh(1.0f) + std::tanh(2.0f) + std::tanh(3.0f)), 1.0f);
  }
  device->stream().Synchronize();
  EXPECT_EQ(device->memory_stats().bytes_cached,
            static_cast<int64_t>(BlockPool::BlockBytes(arena)));  // one arena block, used twice
}

TEST_F(ExecutableTest, OutOfMemoryIsResourceExhaustedAndReleasesEverything) {
  // Compiled on a roomy device (autotuning measures there), run on a tiny one.
  ModuleBuilder b("oom");
  const int64_t x = b.Parameter(0, proto::F32, {1000});
  b.Output(b.Broadcast(x, {100, 1000}, {1}));  // a 400000-byte result
  std::shared_ptr<Executable> exe = CompileOrDie(b.module());
  ASSERT_NE(exe, nullptr);
  std::unique_ptr<Client> tiny = testing::MakeClient(64 << 10);
  Device* device = tiny->device(0);
  std::vector<float> host(1000, 1.5f);
  absl::StatusOr<std::shared_ptr<Buffer>> arg =
      tiny->BufferFromHost(host.data(), {PrimitiveType::kF32, {1000}}, device);
  ASSERT_TRUE(arg.ok());
  const MemoryStats before = device->memory_stats();
  std::vector<std::shared_ptr<Buffer>> args = {*arg};
  absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> r = exe->Execute(args, device);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Message(r.status()), HasSubstr("400000 bytes"));
  EXPECT_THAT(Message(r.status()), HasSubstr("SIM:0"));
  device->stream().Synchronize();
  EXPECT_EQ(device->memory_stats().bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(device->memory_stats().live_allocations, before.live_allocations);

  // An arena that does not fit: ten f32[8000] values live at once, reduced to one number.
  ModuleBuilder c("arena");
  const int64_t in = c.Parameter(0, proto::F32, {8000});
  std::vector<int64_t> live;
  for (int i = 0; i < 10; ++i) live.push_back(c.Unary(Opcode::kTanh, c.Add(in, c.Constant(i, proto::F32, {8000}))));
  int64_t sum = live[0];
  for (int i = 1; i < 10; ++i) sum = c.Add(sum, live[static_cast<size_t>(i)]);
  c.Output(c.Reduce(Combiner::kSum, sum, {0}));
  std::shared_ptr<Executable> big_arena = CompileOrDie(c.module(), {.fusion = false, .autotune = false});
  ASSERT_NE(big_arena, nullptr);
  ASSERT_GT(big_arena->proto().arena_bytes(), 64 << 10);
  std::vector<float> h2(8000, 0.25f);
  absl::StatusOr<std::shared_ptr<Buffer>> arg2 = tiny->BufferFromHost(h2.data(), {PrimitiveType::kF32, {8000}}, device);
  ASSERT_TRUE(arg2.ok());
  const MemoryStats before2 = device->memory_stats();
  std::vector<std::shared_ptr<Buffer>> args2 = {*arg2};
  r = big_arena->Execute(args2, device);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Message(r.status()), HasSubstr(absl::StrCat(big_arena->proto().arena_bytes(), " bytes")));
  EXPECT_EQ(device->memory_stats().bytes_in_use, before2.bytes_in_use);

  // The device stays usable.
  ModuleBuilder small("small");
  small.Output(small.Unary(Opcode::kNegate, small.Parameter(0, proto::F32, {1000})));
  std::shared_ptr<Executable> ok = CompileOrDie(small.module());
  absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> fine = ok->Execute(args, device);
  ASSERT_TRUE(fine.ok()) << fine.status();
  std::vector<float> back(1000);
  ASSERT_TRUE((*fine)[0]->ToHost(back.data(), 4000).ok());
  EXPECT_EQ(back[999], -1.5f);
}

TEST_F(ExecutableTest, OutOfRangeIndexFailsTheResultsNotTheProcess) {
  ModuleBuilder b("index");
  const int64_t x = b.Parameter(0, proto::F32, {4, 2});
  const int64_t idx = b.Parameter(1, proto::S64, {3});
  b.Output(b.IndexSelect(x, idx, 0));
  b.Output(b.Unary(Opcode::kNegate, x));
  std::shared_ptr<Executable> exe = CompileOrDie(b.module());
  ASSERT_NE(exe, nullptr);
  const HostArray hx = MakeArray<float>(PrimitiveType::kF32, {4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  for (int64_t bad : {int64_t{4}, int64_t{-1}, int64_t{1} << 40}) {
    absl::StatusOr<std::vector<HostArray>> r =
        testing::ExecuteOnHost(*client_, *exe, {hx, MakeArray<int64_t>(PrimitiveType::kS64, {3}, {0, bad, 1})});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange) << r.status();
    EXPECT_THAT(Message(r.status()),
                HasSubstr(absl::StrCat("index ", bad, " is out of range for a dimension of size 4")));
  }
  // Each result reports the failure; none hands out garbage.
  Device* device = client_->device(0);
  auto bx = client_->BufferFromHost(hx.bytes.data(), hx.shape, device);
  std::vector<int64_t> bad = {9, 9, 9};
  auto bi = client_->BufferFromHost(bad.data(), {PrimitiveType::kS64, {3}}, device);
  ASSERT_TRUE(bx.ok() && bi.ok());
  std::vector<std::shared_ptr<Buffer>> args = {*bx, *bi};
  absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> results = exe->Execute(args, device);
  ASSERT_TRUE(results.ok()) << results.status();  // the failure is found on the device
  std::vector<float> host(8);
  for (const auto& r : *results) {
    EXPECT_EQ(r->AwaitReady().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(r->ToHost(host.data(), static_cast<size_t>(r->shape().byte_size())).code(),
              absl::StatusCode::kOutOfRange);
  }
  // A gather too; and valid indices work afterwards.
  ModuleBuilder g("gather");
  g.Output(g.Gather(g.Parameter(0, proto::F32, {4, 2}), g.Parameter(1, proto::S32, {4, 1}), 1));
  std::shared_ptr<Executable> gexe = CompileOrDie(g.module());
  absl::StatusOr<std::vector<HostArray>> gr =
      testing::ExecuteOnHost(*client_, *gexe, {hx, MakeArray<int32_t>(PrimitiveType::kS32, {4, 1}, {0, 1, 2, 1})});
  ASSERT_FALSE(gr.ok());
  EXPECT_EQ(gr.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(Message(gr.status()), HasSubstr("gather: index 2"));
  absl::StatusOr<std::vector<HostArray>> good =
      testing::ExecuteOnHost(*client_, *exe, {hx, MakeArray<int64_t>(PrimitiveType::kS64, {3}, {3, 0, 3})});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_THAT((*good)[0].values<float>(), ::testing::ElementsAre(6, 7, 0, 1, 6, 7));
}

TEST_F(ExecutableTest, BuffersAreFreedWhenDropped) {
  std::shared_ptr<Executable> exe = CompileOrDie(EveryKernelKind());
  ASSERT_NE(exe, nullptr);
  Device* device = client_->device(0);
  device->stream().Synchronize();
  const MemoryStats start = device->memory_stats();
  {
    std::vector<std::shared_ptr<Buffer>> args;
    for (const HostArray& a : EveryKernelKindArgs())
      args.push_back(*client_->BufferFromHost(a.bytes.data(), a.shape, device));
    for (int i = 0; i < 5; ++i) {
      absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> r = exe->Execute(args, device);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_GT(device->memory_stats().bytes_in_use, start.bytes_in_use);
      // Drop some results before they are computed.
      if (i % 2) continue;
      for (const auto& buf : *r) ASSERT_TRUE(buf->AwaitReady().ok());
    }
    // Deleting an argument while work using it is queued keeps that work correct.
    absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> r = exe->Execute(args, device);
    ASSERT_TRUE(r.ok());
    args[0]->Delete();
    std::vector<float> back(48);
    ASSERT_TRUE((*r)[8]->ToHost(back.data(), back.size() * 4).ok());
    EXPECT_EQ(std::memcmp(back.data(), EveryKernelKindArgs()[0].bytes.data(), 48 * 4), 0);
  }
  device->stream().Synchronize();
  const MemoryStats end = device->memory_stats();
  EXPECT_EQ(end.bytes_in_use, start.bytes_in_use);
  EXPECT_EQ(end.live_allocations, start.live_allocations);
  EXPECT_GT(end.num_allocs, start.num_allocs);
}

TEST_F(ExecutableTest, RejectsWrongArguments) {
  ModuleBuilder b("args");
  b.Output(b.Add(b.Parameter(0, proto::F32, {4}), b.Convert(b.Parameter(1, proto::S32, {4}), proto::F32)));
  std::shared_ptr<Executable> exe = CompileOrDie(b.module());
  ASSERT_NE(exe, nullptr);
  Device* device = client_->device(0);
  const std::vector<float> f(8, 1);
  const std::vector<int32_t> s(4, 2);
  auto f4 = *client_->BufferFromHost(f.data(), {PrimitiveType::kF32, {4}}, device);
  auto f2x2 = *client_->BufferFromHost(f.data(), {PrimitiveType::kF32, {2, 2}}, device);
  auto s4 = *client_->BufferFromHost(s.data(), {PrimitiveType::kS32, {4}}, device);
  auto f8 = *client_->BufferFromHost(f.data(), {PrimitiveType::kF32, {8}}, device);

  const auto run = [&](std::vector<std::shared_ptr<Buffer>> args, Device* d) { return exe->Execute(args, d).status(); };
  absl::Status st = run({f4}, device);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(st), HasSubstr("takes 2 arguments, got 1"));
  st = run({f4, s4, s4}, device);
  EXPECT_THAT(Message(st), HasSubstr("takes 2 arguments, got 3"));
  st = run({f2x2, s4}, device);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(st), HasSubstr("argument 0 is f32[2,2], the executable expects f32[4]"));
  st = run({f8, s4}, device);
  EXPECT_THAT(Message(st), HasSubstr("argument 0 is f32[8]"));
  st = run({f4, f4}, device);
  EXPECT_THAT(Message(st), HasSubstr("argument 1 is f32[4], the executable expects s32[4]"));
  st = run({s4, f4}, device);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);

  // A buffer on another device.
  std::unique_ptr<Client> two = *Client::Create({.num_devices = 2, .device_memory_bytes = 1 << 20});
  auto other = *two->BufferFromHost(f.data(), {PrimitiveType::kF32, {4}}, two->device(1));
  auto mine = *two->BufferFromHost(s.data(), {PrimitiveType::kS32, {4}}, two->device(0));
  st = run({other, mine}, two->device(0));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(st), HasSubstr("argument 0 lives on SIM:1, not SIM:0"));

  // A deleted buffer.
  auto gone = *client_->BufferFromHost(f.data(), {PrimitiveType::kF32, {4}}, device);
  gone->Delete();
  st = run({gone, s4}, device);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(st), HasSubstr("argument 0"));
  EXPECT_THAT(Message(st), HasSubstr("deleted"));

  // And the right ones work.
  absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> r =
      exe->Execute(std::vector<std::shared_ptr<Buffer>>{f4, s4}, device);
  ASSERT_TRUE(r.ok());
  std::vector<float> back(4);
  ASSERT_TRUE((*r)[0]->ToHost(back.data(), 16).ok());
  EXPECT_THAT(back, ::testing::Each(3.0f));
}

TEST_F(ExecutableTest, ManyQueuedExecutionsEachGetTheirOwnResults) {
  ModuleBuilder b("scale");
  const int64_t x = b.Parameter(0, proto::F32, {300});
  const int64_t s = b.Parameter(1, proto::F32, {});
  b.Output(b.Reduce(Combiner::kSum, b.Mul(b.Unary(Opcode::kTanh, x), b.Broadcast(s, {300}, {})), {0}));
  std::shared_ptr<Executable> exe = CompileOrDie(b.module(), {.fusion = false, .autotune = false});
  ASSERT_NE(exe, nullptr);
  Device* device = client_->device(0);
  std::vector<float> hx(300, 1.0f);
  auto bx = *client_->BufferFromHost(hx.data(), {PrimitiveType::kF32, {300}}, device);
  std::vector<std::shared_ptr<Buffer>> results;
  for (int i = 0; i < 40; ++i) {
    const float scale = static_cast<float>(i);
    auto bs = *client_->BufferFromHost(&scale, {PrimitiveType::kF32, {}}, device);
    absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> r =
        exe->Execute(std::vector<std::shared_ptr<Buffer>>{bx, bs}, device);
    ASSERT_TRUE(r.ok());
    results.push_back((*r)[0]);
  }
  const float unit = 300 * std::tanh(1.0f);
  for (int i = 0; i < 40; ++i) {
    float v = 0;
    ASSERT_TRUE(results[static_cast<size_t>(i)]->ToHost(&v, 4).ok());
    EXPECT_NEAR(v, unit * static_cast<float>(i), 1e-3f * (1 + static_cast<float>(i))) << i;
  }
}

TEST_F(ExecutableTest, ConcurrentCompilesAndExecutions) {
  // Host threads compiling (autotuning on the device's pool) while others execute on the same device.
  const int64_t n = 192;  // n * n > 2^15: GEMM and loop autotune candidates
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      ModuleBuilder b("concurrent");
      const int64_t x = b.Parameter(0, proto::F32, {n, n});
      const int64_t scaled = b.Mul(x, b.Constant(t + 1, proto::F32, {n, n}));
      b.Output(b.Reduce(Combiner::kSum, b.Unary(Opcode::kTanh, scaled), {1}));
      b.Output(b.Dot(scaled, x));
      absl::StatusOr<std::shared_ptr<Executable>> exe = client_->Compile(b.module(), {});
      ASSERT_TRUE(exe.ok()) << exe.status();
      std::vector<float> hx(static_cast<size_t>(n * n));
      for (size_t i = 0; i < hx.size(); ++i) hx[i] = static_cast<float>(i % 13) * 0.01f;
      const HostArray arg = MakeArray<float>(PrimitiveType::kF32, {n, n}, hx);
      std::vector<HostArray> first;
      for (int rep = 0; rep < 4; ++rep) {
        absl::StatusOr<std::vector<HostArray>> r = testing::ExecuteOnHost(*client_, **exe, {arg});
        ASSERT_TRUE(r.ok()) << r.status();
        if (rep == 0) {
          first = *r;
          double row0 = 0;
          for (int64_t c = 0; c < n; ++c) row0 += std::tanh(static_cast<double>(hx[static_cast<size_t>(c)]) * (t + 1));
          EXPECT_NEAR(first[0].at<float>(0), row0, 1e-3);
        } else {
          EXPECT_EQ((*r)[0].bytes, first[0].bytes);
          EXPECT_EQ((*r)[1].bytes, first[1].bytes);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST_F(ExecutableTest, ExecutableWithoutParametersOrResults) {
  std::shared_ptr<Executable> empty = CompileOrDie(proto::Module());
  ASSERT_NE(empty, nullptr);
  absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> r = empty->Execute({}, client_->device(0));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
  absl::StatusOr<std::shared_ptr<Executable>> loaded = client_->LoadSerializedExecutable(empty->Serialize());
  EXPECT_TRUE(loaded.ok()) << loaded.status();
}

}  // namespace executable_test
}  // namespace lazyrt::pjrt
