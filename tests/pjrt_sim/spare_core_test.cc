// Where an executable leaves a core of the pool idle (its spare-core kernel), and the event an execution
// sets there: the point at which a host waiting for a launch slot resumes (lazy/graph_executor.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "pjrt_sim/executable.h"
#include "pjrt_sim/kernels/kernels.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace {

using testing::HostArray;
using testing::MakeArray;
using testing::ModuleBuilder;

class SpareCoreTest : public ::testing::Test {
 protected:
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

// The event is set as the stream starts the spare-core kernel, before the kernels after it have run:
// there a serial loop over 2^22 elements (milliseconds) is still running when the event fires.
TEST_F(SpareCoreTest, ExecutionSetsItsEventWhereTheSpareCoreKernelStarts) {
  const int64_t n = 2048;
  std::shared_ptr<Executable> exe = LoadWith(ProductThenLoops(n), {true, false, false, false});
  ASSERT_NE(exe, nullptr);
  ASSERT_EQ(exe->spare_core_kernel(), 1);
  EXPECT_EQ(exe->after_spare_core_ns(), -1);  // never run
  std::vector<float> values(static_cast<size_t>(n * n), 0.01f);
  const std::shared_ptr<Buffer> x = Upload(MakeArray<float>(PrimitiveType::kF32, {n, n}, values));
  ASSERT_NE(x, nullptr);
  for (int run = 0; run < 2; ++run) {
    auto spare_core = std::make_shared<Event>();
    absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> results =
        exe->Execute(std::vector<std::shared_ptr<Buffer>>{x}, client_->device(0), nullptr, spare_core);
    ASSERT_TRUE(results.ok()) << results.status();
    ASSERT_TRUE(spare_core->Wait().ok());
    EXPECT_FALSE((*results)[0]->ready()->IsReady()) << "the loops after the spare-core kernel were already done";
    ASSERT_TRUE((*results)[0]->ready()->Wait().ok());
    // Three serial loops over 2^22 elements ran after the event: a millisecond at least.
    EXPECT_GT(exe->after_spare_core_ns(), 1'000'000);
  }
  std::vector<float> back(1);
  absl::StatusOr<std::vector<HostArray>> host =
      testing::ExecuteOnHost(*client_, *exe, {MakeArray<float>(PrimitiveType::kF32, {n, n}, values)});
  ASSERT_TRUE(host.ok()) << host.status();
  const double h = std::tanh(n * 0.01 * 0.01);
  EXPECT_NEAR(host->front().at<float>(0), 1 / (1 + std::exp(-std::exp(h))), 1e-5);
}

// An execution that never reaches the kernel (it has none, or it fails first) sets the event as it ends,
// with its status: whoever waits for it is never left waiting.
TEST_F(SpareCoreTest, EventIsSetAtTheEndWhereTheKernelIsNeverReached) {
  std::shared_ptr<Executable> none = LoadWith(ProductThenLoops(64), {true, true, true, true});
  ASSERT_NE(none, nullptr);
  ASSERT_EQ(none->spare_core_kernel(), -1);
  const std::shared_ptr<Buffer> x =
      Upload(MakeArray<float>(PrimitiveType::kF32, {64, 64}, std::vector<float>(64 * 64, 0.5f)));
  ASSERT_NE(x, nullptr);
  auto spare_core = std::make_shared<Event>();
  absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> results =
      none->Execute(std::vector<std::shared_ptr<Buffer>>{x}, client_->device(0), nullptr, spare_core);
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_TRUE(spare_core->Wait().ok());
  EXPECT_TRUE((*results)[0]->ready()->IsReady());  // set as the execution ended
  EXPECT_EQ(none->after_spare_core_ns(), -1);

  // A gather out of range fails the execution in its first kernel, before the serial loop after it.
  ModuleBuilder b("fails_first");
  const int64_t table = b.Parameter(0, proto::F32, {8, 4});
  const int64_t index = b.Parameter(1, proto::S64, {8, 1});
  b.Output(b.Unary(Opcode::kTanh, b.Gather(table, index, 1)));
  absl::StatusOr<std::shared_ptr<Executable>> compiled =
      client_->Compile(b.module(), {.fusion = false, .autotune = false});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_EQ((*compiled)->spare_core_kernel(), 1) << "a gather may split over the pool; the loop after it does not";
  const std::shared_ptr<Buffer> t = Upload(MakeArray<float>(PrimitiveType::kF32, {8, 4}, std::vector<float>(32, 1)));
  const std::shared_ptr<Buffer> i = Upload(MakeArray<int64_t>(PrimitiveType::kS64, {8, 1}, std::vector<int64_t>(8, 9)));
  ASSERT_NE(t, nullptr);
  ASSERT_NE(i, nullptr);
  auto failed = std::make_shared<Event>();
  results = (*compiled)->Execute(std::vector<std::shared_ptr<Buffer>>{t, i}, client_->device(0), nullptr, failed);
  ASSERT_TRUE(results.ok()) << results.status();
  const absl::Status status = failed->Wait();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("gather"));
  EXPECT_FALSE((*results)[0]->ready()->Wait().ok());
}

}  // namespace
}  // namespace lazyrt::pjrt
