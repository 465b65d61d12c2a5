// Where an executable leaves a core of the pool idle (its spare-core kernel), and the event an execution
// sets there: the point at which a host waiting for a launch slot resumes (lazy/graph_executor.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pjrt_sim/executable.h"
#include "pjrt_sim/kernels/kernels.h"
#include "pjrt_sim/thread_pool.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace {

using testing::HostArray;
using testing::MakeArray;
using testing::ModuleBuilder;

class SpareCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ThreadPool::Get().size() == 1) GTEST_SKIP() << "the pool has one thread: no core of it ever idles";
  }

  // `module` compiled without fusion or autotuning (one kernel per instruction, every kernel serial),
  // then each kernel k given `split(k)`'s way of running: over the pool or on the stream's thread alone.
  std::shared_ptr<Executable> LoadWith(const proto::Module& module, const std::vector<bool>& split) {
    absl::StatusOr<std::shared_ptr<Executable>> compiled =
        client_->Compile(module, {.fusion = false, .autotune = false});
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    if (!compiled.ok()) return nullptr;
    proto::Executable p = (*compiled)->proto();
    EXPECT_EQ(static_cast<size_t>(p.kernels_size()), split.size());
    for (int k = 0; k < p.kernels_size() && static_cast<size_t>(k) < split.size(); ++k) {
      proto::Kernel& kernel = *p.mutable_kernels(k);
      if (kernel.kind() == proto::Kernel::DOT) {
        kernel.set_variant(split[static_cast<size_t>(k)] ? kDotRowPanels : kDotSerial);
      } else {
        const int64_t n = FromProto(kernel.iteration_shape()).numel();
        kernel.set_grain(split[static_cast<size_t>(k)] ? n / 2 : 0);
      }
    }
    absl::StatusOr<std::shared_ptr<Executable>> loaded = Executable::Load(p);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? *loaded : nullptr;
  }

  // Launches `exe` on device 0 with `spare_core`; its results (none where the launch failed).
  std::vector<std::shared_ptr<Buffer>> Launch(const Executable& exe, std::vector<std::shared_ptr<Buffer>> args,
                                              std::shared_ptr<Event> spare_core) {
    absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> results =
        exe.Execute(args, client_->device(0), nullptr, std::move(spare_core));
    EXPECT_TRUE(results.ok()) << results.status();
    return results.ok() ? *std::move(results) : std::vector<std::shared_ptr<Buffer>>{};
  }

  std::shared_ptr<Buffer> Upload(const HostArray& a) {
    absl::StatusOr<std::shared_ptr<Buffer>> b = client_->BufferFromHost(a.bytes.data(), a.shape, client_->device(0));
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? *b : nullptr;
  }

  std::unique_ptr<Client> client_ = testing::MakeClient();
};

// A product, then elementwise loops over its n x n result: kernels DOT, LOOP, LOOP, LOOP.
proto::Module ProductThenLoops(int64_t n) {
  ModuleBuilder b("product_then_loops");
  const int64_t x = b.Parameter(0, proto::F32, {n, n});
  const int64_t h = b.Unary(Opcode::kTanh, b.Dot(x, x));
  const int64_t e = b.Unary(Opcode::kExp, h);
  b.Output(b.Unary(Opcode::kLogistic, e));
  return b.module();
}

TEST_F(SpareCoreTest, IsTheFirstKernelOnOneThreadAfterOneSplitOverThePool) {
  const proto::Module m = ProductThenLoops(64);
  struct Case {
    std::vector<bool> split;
    int64_t spare;
  };
  for (const Case& c : std::vector<Case>{
           {{true, false, false, false}, 1},  // the product split, then serial loops
           {{true, true, false, true}, 2},    // the first serial one after the split ones
           {{false, true, false, false}, 2},  // a serial kernel before any split one does not count
           {{false, false, false, false}, -1},
           {{true, true, true, true}, -1},
       }) {
    std::shared_ptr<Executable> exe = LoadWith(m, c.split);
    ASSERT_NE(exe, nullptr);
    EXPECT_EQ(exe->spare_core_kernel(), c.spare) << ::testing::PrintToString(c.split);
  }
}

TEST_F(SpareCoreTest, KernelsSayWhetherTheySplitOverThePool) {
  const proto::Module m = ProductThenLoops(64);
  absl::StatusOr<std::shared_ptr<Executable>> compiled = client_->Compile(m, {.fusion = false, .autotune = false});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const proto::Executable& p = (*compiled)->proto();
  const ArrayShape square{PrimitiveType::kF32, {64, 64}};
  const ArrayShape product{PrimitiveType::kF32, {1, 64, 64}};
  proto::Kernel dot = p.kernels(0);
  ASSERT_EQ(dot.kind(), proto::Kernel::DOT);
  for (const int64_t variant : {kDotSerial, kDotColumnPanels, kDotRowPanels}) {
    dot.set_variant(variant);
    absl::StatusOr<std::unique_ptr<Kernel>> built = BuildKernel(dot, std::vector<ArrayShape>{square, square}, product);
    ASSERT_TRUE(built.ok()) << built.status();
    EXPECT_EQ((*built)->SplitsOverPool(), variant != kDotSerial) << variant;
  }
  proto::Kernel loop = p.kernels(2);
  ASSERT_EQ(loop.kind(), proto::Kernel::LOOP);
  // A grain of the whole space is one task: run on the calling thread.
  for (const auto& [grain, splits] : std::vector<std::pair<int64_t, bool>>{{0, false}, {4096, false}, {2048, true}}) {
    loop.set_grain(grain);
    absl::StatusOr<std::unique_ptr<Kernel>> built = BuildKernel(loop, std::vector<ArrayShape>{square}, square);
    ASSERT_TRUE(built.ok()) << built.status();
    EXPECT_EQ((*built)->SplitsOverPool(), splits) << grain;
  }
}

// A module of the kernel kinds a training step has, at sizes where the tuner may split them: loops, row and
// column reductions (a bias's gradient), a layer norm and its gradient, products, gathers, index selects,
// argmax, concatenation.
proto::Module ManyKernelKinds() {
  ModuleBuilder b("many_kernel_kinds");
  const int64_t x = b.Parameter(0, proto::F32, {512, 256});
  const int64_t w = b.Parameter(1, proto::F32, {256, 256});
  const int64_t idx = b.Parameter(2, proto::S64, {512, 4});
  const int64_t rows = b.Parameter(3, proto::S32, {64});
  const int64_t h = b.Unary(Opcode::kTanh, b.Dot(x, w));
  b.Output(b.Reduce(Combiner::kSum, h, {0}));  // columns
  b.Output(b.Reduce(Combiner::kMax, h, {1}));  // rows
  const auto norm = [&](Opcode op, std::vector<int64_t> operands) {
    return b.Op(op, std::move(operands), proto::F32, {512, 256}, [](proto::Instruction& i) {
      i.set_axis(1);
      i.set_value(1e-5);
    });
  };
  const int64_t n = norm(Opcode::kLayerNorm, {h});
  b.Output(norm(Opcode::kLayerNormGrad, {h, n}));
  b.Output(b.Gather(h, idx, 1));
  b.Output(b.IndexSelect(h, rows, 0));
  b.Output(b.Argmax(h, 1));
  b.Output(b.Concatenate({h, x}, 0));
  return b.module();
}

// Whatever a kernel reports as not splitting over the pool hands it nothing when it runs (on zeros: every
// index in range): each kernel as compiled (serial) and with the variant or grain that splits it.
TEST_F(SpareCoreTest, AKernelThatSaysItDoesNotSplitHandsThePoolNothing) {
  absl::StatusOr<std::shared_ptr<Executable>> exe =
      client_->Compile(ManyKernelKinds(), {.fusion = false, .autotune = false});
  ASSERT_TRUE(exe.ok()) << exe.status();
  const proto::Executable& p = (*exe)->proto();
  const auto shape = [&](int64_t slot) { return FromProto(p.slots(static_cast<int>(slot)).shape()); };
  int splitting = 0, not_splitting = 0;
  for (const proto::Kernel& compiled : p.kernels()) {
    proto::Kernel split = compiled;
    if (split.kind() == proto::Kernel::DOT) split.set_variant(kDotRowPanels);
    if (split.has_iteration_shape()) split.set_grain(FromProto(split.iteration_shape()).numel() / 2);
    for (const proto::Kernel& kernel : {compiled, split}) {
      std::vector<ArrayShape> input_shapes, extra_shapes;
      for (int64_t in : kernel.inputs()) input_shapes.push_back(shape(in));
      for (int64_t extra : kernel.extra_outputs()) extra_shapes.push_back(shape(extra));
      absl::StatusOr<std::unique_ptr<Kernel>> built =
          BuildKernel(kernel, input_shapes, shape(kernel.output()), extra_shapes);
      ASSERT_TRUE(built.ok()) << built.status();
      std::vector<std::vector<uint64_t>> memory;
      const auto zeros = [&](const ArrayShape& a) {
        return memory.emplace_back(static_cast<size_t>(a.byte_size() / 8 + 1), 0).data();
      };
      std::vector<const void*> inputs;
      std::vector<void*> outputs;
      for (const ArrayShape& a : input_shapes) inputs.push_back(zeros(a));
      outputs.push_back(zeros(shape(kernel.output())));
      for (const ArrayShape& a : extra_shapes) outputs.push_back(zeros(a));
      const uint64_t before = ThreadPool::Get().jobs();
      ASSERT_TRUE((*built)->Run(inputs, outputs).ok()) << kernel.label();
      if ((*built)->SplitsOverPool()) {
        ++splitting;
      } else {
        ++not_splitting;
        EXPECT_EQ(ThreadPool::Get().jobs(), before) << proto::Kernel::Kind_Name(kernel.kind()) << " " << kernel.label();
      }
    }
  }
  EXPECT_GT(splitting, 0);
  EXPECT_GT(not_splitting, 0);
}

// The event is set as the stream starts the spare-core kernel, before that kernel runs: where the kernel
// itself fails (a gather out of range), the event still says OK and the results carry the error. And the
// executable learns how long its runs went on from there: three serial loops over 2^22 elements.
TEST_F(SpareCoreTest, ExecutionSetsItsEventWhereTheSpareCoreKernelStarts) {
  ModuleBuilder b("split_then_gather");
  const int64_t table = b.Parameter(0, proto::F32, {256, 256});
  const int64_t index = b.Parameter(1, proto::S64, {256, 256});
  b.Output(b.Gather(b.Unary(Opcode::kTanh, table), index, 1));
  std::shared_ptr<Executable> gather = LoadWith(b.module(), {true, false});
  ASSERT_NE(gather, nullptr);
  ASSERT_EQ(gather->spare_core_kernel(), 1);
  const std::shared_ptr<Buffer> t =
      Upload(MakeArray<float>(PrimitiveType::kF32, {256, 256}, std::vector<float>(256 * 256, 0.5f)));
  for (const int64_t at : {int64_t{3}, int64_t{256}}) {
    const std::shared_ptr<Buffer> i =
        Upload(MakeArray<int64_t>(PrimitiveType::kS64, {256, 256}, std::vector<int64_t>(256 * 256, at)));
    ASSERT_NE(t, nullptr);
    ASSERT_NE(i, nullptr);
    auto spare_core = std::make_shared<Event>();
    const std::vector<std::shared_ptr<Buffer>> results = Launch(*gather, {t, i}, spare_core);
    ASSERT_EQ(results.size(), 1u);
    EXPECT_TRUE(spare_core->Wait().ok()) << at;
    EXPECT_EQ(results[0]->ready()->Wait().ok(), at < 256);
  }

  const int64_t n = 2048;
  std::shared_ptr<Executable> exe = LoadWith(ProductThenLoops(n), {true, false, false, false});
  ASSERT_NE(exe, nullptr);
  ASSERT_EQ(exe->spare_core_kernel(), 1);
  EXPECT_EQ(exe->after_spare_core_ns(), -1);  // never run
  const std::vector<float> values(static_cast<size_t>(n * n), 0.01f);
  const HostArray host_x = MakeArray<float>(PrimitiveType::kF32, {n, n}, values);
  const std::shared_ptr<Buffer> x = Upload(host_x);
  ASSERT_NE(x, nullptr);
  auto spare_core = std::make_shared<Event>();
  const std::vector<std::shared_ptr<Buffer>> results = Launch(*exe, {x}, spare_core);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(spare_core->Wait().ok());
  ASSERT_TRUE(results[0]->ready()->Wait().ok());
  EXPECT_GT(exe->after_spare_core_ns(), 1'000'000);
  // Runs without an event do not count.
  const int64_t learned = exe->after_spare_core_ns();
  absl::StatusOr<std::vector<HostArray>> host = testing::ExecuteOnHost(*client_, *exe, {host_x});
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(exe->after_spare_core_ns(), learned);
  const double h = std::tanh(n * 0.01 * 0.01);
  EXPECT_NEAR(host->front().at<float>(0), 1 / (1 + std::exp(-std::exp(h))), 1e-5);
}

// An execution that never reaches the kernel (it has none, or fails first) sets the event as it ends, with
// its status: whoever waits for it is never left waiting.
TEST_F(SpareCoreTest, EventIsSetAtTheEndWhereTheKernelIsNeverReached) {
  std::shared_ptr<Executable> none = LoadWith(ProductThenLoops(64), {true, true, true, true});
  ASSERT_NE(none, nullptr);
  ASSERT_EQ(none->spare_core_kernel(), -1);
  const std::shared_ptr<Buffer> x =
      Upload(MakeArray<float>(PrimitiveType::kF32, {64, 64}, std::vector<float>(64 * 64, 0.5f)));
  ASSERT_NE(x, nullptr);
  auto spare_core = std::make_shared<Event>();
  const std::vector<std::shared_ptr<Buffer>> results = Launch(*none, {x}, spare_core);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(spare_core->Wait().ok());
  EXPECT_TRUE(results[0]->ready()->Wait().ok());
  EXPECT_EQ(none->after_spare_core_ns(), -1);

  // An argument that failed (a gather out of range) fails the execution before its first kernel.
  ModuleBuilder b("fails");
  const int64_t table = b.Parameter(0, proto::F32, {64, 64});
  const int64_t index = b.Parameter(1, proto::S64, {64, 64});
  b.Output(b.Gather(table, index, 1));
  absl::StatusOr<std::shared_ptr<Executable>> gather =
      client_->Compile(b.module(), {.fusion = false, .autotune = false});
  ASSERT_TRUE(gather.ok()) << gather.status();
  const std::shared_ptr<Buffer> i =
      Upload(MakeArray<int64_t>(PrimitiveType::kS64, {64, 64}, std::vector<int64_t>(64 * 64, 99)));
  ASSERT_NE(i, nullptr);
  const std::vector<std::shared_ptr<Buffer>> failed = Launch(**gather, {x, i}, nullptr);
  ASSERT_EQ(failed.size(), 1u);
  std::shared_ptr<Executable> spare = LoadWith(ProductThenLoops(64), {true, false, false, false});
  ASSERT_NE(spare, nullptr);
  ASSERT_EQ(spare->spare_core_kernel(), 1);
  auto never = std::make_shared<Event>();
  const std::vector<std::shared_ptr<Buffer>> after_failure = Launch(*spare, {failed[0]}, never);
  ASSERT_EQ(after_failure.size(), 1u);
  const absl::Status status = never->Wait();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("gather"));
  EXPECT_FALSE(after_failure[0]->ready()->Wait().ok());
  EXPECT_EQ(spare->after_spare_core_ns(), -1);
}

}  // namespace
}  // namespace lazyrt::pjrt
