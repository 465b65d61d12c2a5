// The SPMD partitioner's records of avoidable reshardings (the runtime's resharding findings): which
// collectives are recorded, with which origin, layouts and bytes, and which are not (the collectives a
// data-parallel step needs, an op without a rule); and that the executable keeps them through serialization.
#include "pjrt_sim/spmd_partitioner.h"

#include "tests/pjrt_sim/spmd_test_util.h"

namespace lazyrt::pjrt {
namespace spmd_resharding_test {

using spmd_test::kWhole;
using spmd_test::Partitioned;
using ::testing::ElementsAre;

void SetMesh(ModuleBuilder& b, int64_t size) { spmd_test::SetMesh(b, {size}); }
// A parameter laid out as `axes` (none: replicated), from graph node `origin`.
int64_t Parameter(ModuleBuilder& b, int64_t number, const Dims& dims, const std::vector<int64_t>& axes,
                  int64_t origin) {
  const int64_t id = spmd_test::ShardedParameter(b, number, dims, axes);
  b.inst(id).set_origin(origin);
  return id;
}

std::vector<int64_t> Axes(const proto::Sharding& s) { return {s.dim_axes().begin(), s.dim_axes().end()}; }

// y = x w with the batch split over 4 partitions and w split on its contracted dim: w is gathered every run.
proto::Module WeightSplitOnTheContractedDim() {
  ModuleBuilder b;
  SetMesh(b, 4);
  const int64_t x = Parameter(b, 0, {8, 8}, {0, kWhole}, 1);
  const int64_t w = Parameter(b, 1, {8, 4}, {0, kWhole}, 2);  // K split: the dot needs it whole
  const int64_t y = b.Dot(x, w);
  b.inst(y).set_origin(3);
  b.Output(y);
  return b.module();
}

TEST(SpmdResharding, AWeightSplitOnTheContractedDimOfABatchSplitDotIsRecorded) {
  const SpmdPartitioned r = Partitioned(WeightSplitOnTheContractedDim());
  ASSERT_EQ(r.reshardings.size(), 1U);
  const proto::Resharding& found = r.reshardings[0];
  EXPECT_EQ(found.kind(), proto::Resharding::PARAMETER);
  EXPECT_EQ(found.origin(), 2);
  EXPECT_EQ(found.consumer(), "dot");
  EXPECT_EQ(found.consumer_origin(), 3);
  EXPECT_THAT(found.shape().dims(), ElementsAre(8, 4));
  EXPECT_THAT(Axes(found.had()), ElementsAre(0, kWhole));
  EXPECT_THAT(Axes(found.needed()), ElementsAre());         // replicated
  EXPECT_EQ(found.bytes_per_partition(), 3 * (2 * 4 * 4));  // the 3 other partitions' [2, 4] f32 pieces
}

TEST(SpmdResharding, DataParallelCollectivesAreNotRecorded) {
  ModuleBuilder b;
  SetMesh(b, 4);
  const int64_t x = Parameter(b, 0, {8, 5}, {0, kWhole}, 1);
  const int64_t w = Parameter(b, 1, {5, 3}, {}, 2);
  const int64_t dy = Parameter(b, 2, {8, 3}, {0, kWhole}, 3);
  b.Output(b.Unary(Opcode::kTanh, b.Dot(x, w)));   // forward: no collective
  b.Output(b.Dot(b.Transpose(x, {1, 0}), dy));     // the weight's gradient: all-reduced, as it must be
  b.Output(b.Reduce(Combiner::kSum, dy, {0, 1}));  // a loss's sum over the split batch: all-reduced
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(r.collectives, 2);
  EXPECT_TRUE(r.reshardings.empty());
}

TEST(SpmdResharding, AValueComputedSplitOnAnotherDimThanItsConsumerNeedsIsRecordedAsExchanged) {
  ModuleBuilder b;
  SetMesh(b, 2);
  const int64_t x = Parameter(b, 0, {4, 6}, {0, kWhole}, 1);
  const int64_t w = Parameter(b, 1, {6, 8}, {}, 2);
  const int64_t a = Parameter(b, 2, {4, 6}, {}, 3);
  const int64_t v = Parameter(b, 3, {6, 8}, {kWhole, 0}, 4);
  const int64_t h = b.Dot(x, w);  // rows split
  const int64_t g = b.Dot(a, v);  // columns split
  b.inst(g).set_origin(6);
  const int64_t z = b.Add(h, g);  // rows split, as its first operand
  b.inst(z).set_origin(7);
  b.Output(z);
  const SpmdPartitioned r = Partitioned(b.module());
  ASSERT_EQ(r.reshardings.size(), 1U);
  const proto::Resharding& found = r.reshardings[0];
  EXPECT_EQ(found.kind(), proto::Resharding::EXCHANGED);  // an ALL_TO_ALL moves the split from columns to rows
  EXPECT_EQ(found.origin(), 6);
  EXPECT_EQ(found.consumer(), "add");
  EXPECT_EQ(found.consumer_origin(), 7);
  EXPECT_THAT(Axes(found.had()), ElementsAre(kWhole, 0));
  EXPECT_THAT(Axes(found.needed()), ElementsAre(0, kWhole));
  EXPECT_EQ(found.bytes_per_partition(), 2 * 4 * 4);  // the [2, 4] of the other partition's columns it lacks
}

TEST(SpmdResharding, TheOperandsOfAnOpWithoutARuleAreNotRecorded) {
  ModuleBuilder b;
  SetMesh(b, 2);
  const int64_t x = Parameter(b, 0, {4, 3, 2}, {0, kWhole, kWhole}, 1);
  const int64_t seed = b.Parameter(1, proto::S64, {});
  // Attention with dropout draws its random numbers over the whole batch: no rule, computed replicated from x
  // gathered (a fallback).
  b.Output(spmd_test::Attention(b, x, x, x, 0.25, seed));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(r.replicated_fallbacks, 1);
  EXPECT_TRUE(r.reshardings.empty());
}

TEST(SpmdResharding, TheExecutableKeepsTheRecordsThroughSerialization) {
  std::unique_ptr<Client> client = testing::MakeClient();
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(WeightSplitOnTheContractedDim(), kFused);
  ASSERT_TRUE(exe.ok()) << exe.status();
  ASSERT_EQ((*exe)->proto().reshardings_size(), 1);
  absl::StatusOr<std::shared_ptr<Executable>> loaded = client->LoadSerializedExecutable((*exe)->Serialize());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ((*loaded)->proto().reshardings_size(), 1);
  EXPECT_EQ((*loaded)->proto().reshardings(0).origin(), 2);
  EXPECT_EQ((*loaded)->proto().reshardings(0).bytes_per_partition(), 96);
  // Checked at load like every other field.
  proto::Executable bad = (*exe)->proto();
  bad.mutable_reshardings(0)->mutable_needed()->add_dim_axes(5);
  EXPECT_FALSE(Executable::Load(std::move(bad)).ok());
}

}  // namespace spmd_resharding_test
}  // namespace lazyrt::pjrt
