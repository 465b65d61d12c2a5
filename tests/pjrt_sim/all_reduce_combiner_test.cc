// The all-reduce combiner (gradient bucketing): which all-reduces it combines and which it must not,
// that the module it leaves is one the verifier accepts, and that combined executables compute the
// same bits as uncombined ones and as the sums in member order, on 2 and 4 partitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "pjrt_sim/all_reduce_combiner.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/module_verifier.h"
#include "pjrt_sim/passes.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace all_reduce_combiner_test {

using testing::Dims;
using testing::HostArray;
using testing::ModuleBuilder;

using Groups = std::vector<std::vector<int64_t>>;

int64_t AllReduce(ModuleBuilder& b, int64_t x, Combiner combiner = Combiner::kSum, const Groups& groups = {}) {
  return b.Op(Opcode::kAllReduce, {x}, b.type(x), b.dims(x), [&](proto::Instruction& i) {
    i.set_combiner(static_cast<int32_t>(combiner));
    for (const std::vector<int64_t>& g : groups)
      i.add_replica_groups()->mutable_partitions()->Assign(g.begin(), g.end());
  });
}

ModuleBuilder Partitioned(int partitions) {
  ModuleBuilder b("combine");
  b.mutable_module().set_num_partitions(partitions);
  return b;
}

// The module combined with `threshold_bytes` (dead code removed, as the compiler does), after checking
// that the verifier accepts it; `removed` receives the pass's count.
HloModule Combined(const proto::Module& module, int64_t threshold_bytes, int64_t* removed) {
  EXPECT_TRUE(VerifyModule(module).ok());
  HloModule hlo = FromVerifiedProto(module);
  *removed = CombineAllReduces(hlo, threshold_bytes);
  EliminateDeadCode(hlo);
  const absl::Status verified = VerifyModule(ToProto(hlo));
  EXPECT_TRUE(verified.ok()) << verified;
  return hlo;
}

// The all-reduces left, as their element counts, smallest first.
std::vector<int64_t> AllReduceSizes(const HloModule& hlo) {
  std::vector<int64_t> sizes;
  for (const HloInst& inst : hlo.insts) {
    if (inst.opcode == Opcode::kAllReduce) sizes.push_back(inst.shape.numel());
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

int CollectiveKernels(const Executable& exe) {
  int n = 0;
  for (const proto::Kernel& k : exe.proto().kernels()) n += k.kind() == proto::Kernel::COLLECTIVE ? 1 : 0;
  return n;
}

TEST(AllReduceCombinerTest, CombinesOnlyAllReducesOfOneCombinerTypeAndGroups) {
  ModuleBuilder b = Partitioned(4);
  const Groups pairs = {{0, 1}, {2, 3}};
  const int64_t f32 = b.Parameter(0, proto::F32, {3, 2});
  const int64_t f64 = b.Parameter(1, proto::F64, {5});
  for (const int64_t r : {AllReduce(b, f32), AllReduce(b, b.Add(f32, f32)), AllReduce(b, f32, Combiner::kMax),
                          AllReduce(b, f64), AllReduce(b, f32, Combiner::kSum, pairs),
                          AllReduce(b, b.Mul(f32, f32), Combiner::kSum, pairs), AllReduce(b, f64)}) {
    b.Output(r);
  }
  int64_t removed = 0;
  const HloModule hlo = Combined(b.module(), kDefaultAllReduceCombineBytes, &removed);
  EXPECT_EQ(removed, 3);
  // f32 max (6), f64 sums (10), f32 sums (12), f32 sums in pairs (12).
  EXPECT_EQ(AllReduceSizes(hlo), (std::vector<int64_t>{6, 10, 12, 12}));
}

TEST(AllReduceCombinerTest, LeavesAnAllReduceOfAnotherOnesResultAlone) {
  ModuleBuilder b = Partitioned(2);
  const int64_t x = b.Parameter(0, proto::F32, {4});
  const int64_t first = AllReduce(b, x);
  const int64_t second = AllReduce(b, b.Mul(first, x));
  b.Output(first);
  b.Output(second);
  int64_t removed = 0;
  const HloModule hlo = Combined(b.module(), kDefaultAllReduceCombineBytes, &removed);
  EXPECT_EQ(removed, 0);
  EXPECT_EQ(AllReduceSizes(hlo), (std::vector<int64_t>{4, 4}));
}

// a (sum) and c (max) open two buckets; d (max) reads a's result and b (sum) reads c's: combining
// {a, b} and {c, d} would make each combined all-reduce wait for the other's.
TEST(AllReduceCombinerTest, MakesNoCycleBetweenBuckets) {
  ModuleBuilder b = Partitioned(2);
  const int64_t x = b.Parameter(0, proto::F32, {4});
  const int64_t a = AllReduce(b, x);
  const int64_t c = AllReduce(b, b.Add(x, x), Combiner::kMax);
  const int64_t d = AllReduce(b, b.Mul(a, x), Combiner::kMax);
  const int64_t sum_of_c = AllReduce(b, b.Mul(c, x));
  for (const int64_t r : {a, c, d, sum_of_c}) b.Output(r);
  int64_t removed = 0;
  const HloModule hlo = Combined(b.module(), kDefaultAllReduceCombineBytes, &removed);
  EXPECT_EQ(removed, 1);  // only one of the two pairs
  EXPECT_EQ(AllReduceSizes(hlo).size(), 3U);
}

TEST(AllReduceCombinerTest, TheThresholdSplitsBuckets) {
  ModuleBuilder b = Partitioned(2);
  const int64_t x = b.Parameter(0, proto::F32, {10});  // 40 bytes each
  for (int i = 0; i < 5; ++i) b.Output(AllReduce(b, i == 0 ? x : b.Add(x, b.Constant(i, proto::F32, {10}))));
  const auto sizes = [&](int64_t threshold) {
    int64_t removed = 0;
    return AllReduceSizes(Combined(b.module(), threshold, &removed));
  };
  EXPECT_EQ(sizes(0), (std::vector<int64_t>(5, 10)));
  EXPECT_EQ(sizes(79), (std::vector<int64_t>(5, 10)));
  EXPECT_EQ(sizes(80), (std::vector<int64_t>{10, 20, 20}));
  EXPECT_EQ(sizes(120), (std::vector<int64_t>{20, 30}));
  EXPECT_EQ(sizes(200), (std::vector<int64_t>{50}));
}

// Gradient-like values of several shapes and types, each all-reduced, some read again after the
// all-reduce: compiled with and without combining, run on every partition with random operands.
proto::Module GradientsModule(int partitions) {
  ModuleBuilder b = Partitioned(partitions);
  const Dims shapes[] = {{3, 5}, {7}, {}, {2, 3, 4}, {1}};
  int64_t number = 0;
  for (const Dims& dims : shapes) {
    const int64_t w = b.Parameter(number++, proto::F32, dims);
    const int64_t g = b.Mul(w, w);
    const int64_t r = AllReduce(b, g);
    b.Output(r);
    b.Output(b.Add(r, w));  // a reader of the piece (fused with its slice)
  }
  const int64_t h = b.Parameter(number, proto::BF16, {6});
  b.Output(AllReduce(b, b.Add(h, h)));
  b.Output(AllReduce(b, h));
  return b.module();
}

std::vector<std::vector<HostArray>> Arguments(const proto::Module& module, int partitions) {
  std::mt19937_64 rng(static_cast<uint64_t>(partitions));
  std::vector<std::vector<HostArray>> args(static_cast<size_t>(partitions));
  for (const proto::Instruction& inst : module.instructions()) {
    if (inst.opcode() != static_cast<int32_t>(Opcode::kParameter)) continue;
    const Dims dims(inst.shape().dims().begin(), inst.shape().dims().end());
    const int64_t n = testing::NumElements(dims);
    for (auto& partition : args) {
      const std::vector<float> values = testing::RandomFloats(rng, n, -100.0f, 100.0f);
      HostArray a(ArrayShape{FromProto(inst.shape().type()), dims});
      for (int64_t i = 0; i < n; ++i) {
        StoreElement(values[static_cast<size_t>(i)], a.shape.type, a.bytes.data() + i * ByteWidth(a.shape.type));
      }
      partition.push_back(std::move(a));
    }
  }
  return args;
}

class CombinedExecutableTest : public ::testing::TestWithParam<int> {};

TEST_P(CombinedExecutableTest, ComputesTheSameBitsAsOneAllReducePerValue) {
  const int partitions = GetParam();
  const proto::Module module = GradientsModule(partitions);
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create({.num_devices = partitions, .device_memory_bytes = int64_t{1} << 26});
  ASSERT_TRUE(client.ok()) << client.status();
  const std::vector<std::vector<HostArray>> args = Arguments(module, partitions);
  std::vector<std::vector<std::vector<HostArray>>> results;
  for (const int64_t threshold : {int64_t{0}, kDefaultAllReduceCombineBytes}) {
    absl::StatusOr<std::shared_ptr<Executable>> exe = (*client)->Compile(
        module, CompileOptions{.fusion = true, .autotune = false, .all_reduce_combine_bytes = threshold});
    ASSERT_TRUE(exe.ok()) << exe.status();
    // Seven all-reduces; combined, one of the five f32 values and one of the two bf16 ones.
    EXPECT_EQ(CollectiveKernels(**exe), threshold == 0 ? 7 : 2);
    const int64_t calls_before = (*client)->device(0)->collective_stats().calls;
    absl::StatusOr<std::vector<std::vector<HostArray>>> got = testing::RunPartitions(**client, **exe, args);
    ASSERT_TRUE(got.ok()) << got.status();
    // What the run report and the trace count: one communicator call per collective kernel.
    EXPECT_EQ((*client)->device(0)->collective_stats().calls - calls_before, threshold == 0 ? 7 : 2);
    results.push_back(*std::move(got));
  }
  for (int p = 0; p < partitions; ++p) {
    const std::vector<HostArray>& uncombined = results[0][static_cast<size_t>(p)];
    const std::vector<HostArray>& combined = results[1][static_cast<size_t>(p)];
    ASSERT_EQ(combined.size(), uncombined.size());
    for (size_t j = 0; j < combined.size(); ++j) {
      EXPECT_EQ(combined[j].shape, uncombined[j].shape) << "partition " << p << " output " << j;
      EXPECT_EQ(combined[j].bytes, uncombined[j].bytes) << "partition " << p << " output " << j;
    }
    // And the f32 sums are those of the members' squares in member order.
    for (size_t v = 0; v < 5; ++v) {
      const HostArray& got = combined[2 * v];
      for (int64_t i = 0; i < got.numel(); ++i) {
        float sum = 0;
        for (int q = 0; q < partitions; ++q) {
          const float w = args[static_cast<size_t>(q)][v].at<float>(i);
          sum = q == 0 ? w * w : sum + w * w;
        }
        ASSERT_EQ(got.at<float>(i), sum) << "partition " << p << " value " << v << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Partitions, CombinedExecutableTest, ::testing::Values(2, 4));

}  // namespace all_reduce_combiner_test
}  // namespace lazyrt::pjrt
