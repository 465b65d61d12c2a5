// The SPMD partitioner: which shardings propagate, which collectives each rule inserts and with which
// groups, the per-partition shapes; and the partitioned program's numbers against the global program's. The
// partitioned program runs here instruction by instruction, each partition's local instructions compiled and
// run by the real compiler and kernels, its collectives done by reference loops over the partitions' values.
#include "pjrt_sim/spmd_partitioner.h"

#include "tests/pjrt_sim/spmd_test_util.h"

namespace lazyrt::pjrt {
namespace spmd_partitioner_test {

using ::testing::HasSubstr;
using namespace spmd_test;  // NOLINT(google-build-using-namespace): the helpers of these tests

// ---- Rules ------------------------------------------------------------------------------------------------

TEST(SpmdPartitioner, DataParallelMatmulNeedsNoCollective) {
  ModuleBuilder b;
  SetMesh(b, {4});
  const int64_t x = ShardedParameter(b, 0, {8, 5}, {0, kWhole});
  const int64_t w = b.Parameter(1, proto::F32, {5, 3});
  b.Output(b.Unary(Opcode::kTanh, b.Dot(x, w)));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(r.module.num_partitions(), 4);
  EXPECT_EQ(r.collectives, 0);
  EXPECT_EQ(Count(r.module, Opcode::kPartitionSlice), 0);
  EXPECT_THAT(DimsOf(Only(r.module, Opcode::kDot)), ElementsAre(2, 3));
  EXPECT_THAT(AxesOf(r.output_shardings[0], 2), ElementsAre(0, kWhole));
  EXPECT_THAT(AxesOf(r.parameter_shardings[1], 2), ElementsAre(kWhole, kWhole));
  ExpectSameNumbers(b.module(), {Random({8, 5}, 1), Random({5, 3}, 2)});
}

TEST(SpmdPartitioner, WeightGradientOfABatchShardedDotIsAllReduced) {
  ModuleBuilder b;
  SetMesh(b, {4});
  const int64_t x = ShardedParameter(b, 0, {8, 5}, {0, kWhole});
  const int64_t dy = ShardedParameter(b, 1, {8, 3}, {0, kWhole});
  b.Output(b.Dot(b.Transpose(x, {1, 0}), dy));  // x^T dy: the batch is contracted
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(r.collectives, 1);
  const proto::Instruction& all_reduce = Only(r.module, Opcode::kAllReduce);
  EXPECT_EQ(all_reduce.combiner(), static_cast<int32_t>(Combiner::kSum));
  EXPECT_THAT(Groups(all_reduce), ElementsAre(ElementsAre(0, 1, 2, 3)));
  EXPECT_THAT(DimsOf(Only(r.module, Opcode::kDot)), ElementsAre(5, 3));
  EXPECT_THAT(AxesOf(r.output_shardings[0], 2), ElementsAre(kWhole, kWhole));
  ExpectSameNumbers(b.module(), {Random({8, 5}, 3), Random({8, 3}, 4)});
}

TEST(SpmdPartitioner, MegatronMlpAllReducesOverTheModelAxisOnly) {
  ModuleBuilder b;
  SetMesh(b, {2, 2});  // data, model
  const int64_t x = ShardedParameter(b, 0, {4, 6}, {0, kWhole});
  const int64_t w1 = ShardedParameter(b, 1, {6, 8}, {kWhole, 1});  // column-split
  const int64_t w2 = ShardedParameter(b, 2, {8, 6}, {1, kWhole});  // row-split
  const int64_t h = b.Dot(x, w1);
  const int64_t relu = b.Binary(Opcode::kMaximum, h, b.Broadcast(b.Constant(0, proto::F32), {4, 8}, {}));
  b.Output(b.Dot(relu, w2));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(r.collectives, 1);
  EXPECT_EQ(r.replicated_fallbacks, 0);
  EXPECT_EQ(Count(r.module, Opcode::kAllGather), 0);
  EXPECT_EQ(Count(r.module, Opcode::kPartitionSlice), 0);
  const proto::Instruction& all_reduce = Only(r.module, Opcode::kAllReduce);
  EXPECT_THAT(Groups(all_reduce),
              ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));  // partitions differing in "model"
  EXPECT_THAT(DimsOf(all_reduce), ElementsAre(2, 6));
  EXPECT_THAT(AxesOf(r.output_shardings[0], 2), ElementsAre(0, kWhole));
  ExpectSameNumbers(b.module(), {Random({4, 6}, 5), Random({6, 8}, 6), Random({8, 6}, 7)});
}

TEST(SpmdPartitioner, APartialDotWantedSplitIsReduceScattered) {
  ModuleBuilder b;
  SetMesh(b, {2});
  const int64_t x = ShardedParameter(b, 0, {4, 6}, {kWhole, 0});
  const int64_t w = ShardedParameter(b, 1, {6, 8}, {0, kWhole});
  const int64_t y = b.Dot(x, w);
  Annotate(b, y, {0, kWhole});
  b.Output(y);
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(Count(r.module, Opcode::kAllReduce), 0);
  const proto::Instruction& scatter = Only(r.module, Opcode::kReduceScatter);
  EXPECT_EQ(scatter.axis(), 0);
  EXPECT_THAT(DimsOf(scatter), ElementsAre(2, 8));
  ExpectSameNumbers(b.module(), {Random({4, 6}, 8), Random({6, 8}, 9)});
}

TEST(SpmdPartitioner, AReductionOverASplitDimIsAllReducedWithItsCombiner) {
  ModuleBuilder b;
  SetMesh(b, {2, 2});
  const int64_t x = ShardedParameter(b, 0, {4, 6}, {0, 1});
  b.Output(b.Reduce(Combiner::kMax, x, {1}));
  b.Output(b.Reduce(Combiner::kSum, x, {0, 1}));
  const SpmdPartitioned r = Partitioned(b.module());
  std::vector<std::pair<int32_t, std::vector<std::vector<int64_t>>>> all_reduces;
  for (const proto::Instruction& inst : r.module.instructions()) {
    if (inst.opcode() == static_cast<int32_t>(Opcode::kAllReduce))
      all_reduces.emplace_back(inst.combiner(), Groups(inst));
  }
  EXPECT_THAT(
      all_reduces,
      ElementsAre(std::pair(static_cast<int32_t>(Combiner::kMax), std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}),
                  std::pair(static_cast<int32_t>(Combiner::kSum), std::vector<std::vector<int64_t>>{{0, 1, 2, 3}})));
  EXPECT_THAT(AxesOf(r.output_shardings[0], 1), ElementsAre(0));  // rows stay split over "data"
  ExpectSameNumbers(b.module(), {Random({4, 6}, 10)});
}

// softmax as lowering emits it: max and sum along the last axis, broadcast back.
int64_t Softmax(ModuleBuilder& b, int64_t x) {
  const Dims dims = b.dims(x);
  const int64_t max = b.Broadcast(b.Reduce(Combiner::kMax, x, {1}), dims, {0});
  const int64_t e = b.Unary(Opcode::kExp, b.Binary(Opcode::kSubtract, x, max));
  return b.Binary(Opcode::kDivide, e, b.Broadcast(b.Reduce(Combiner::kSum, e, {1}), dims, {0}));
}

TEST(SpmdPartitioner, SoftmaxOverSplitRowsIsLocalAndOverASplitAxisAllReduces) {
  for (const int64_t split_dim : {0, 1}) {
    ModuleBuilder b;
    SetMesh(b, {4});
    Axes axes = {kWhole, kWhole};
    axes[static_cast<size_t>(split_dim)] = 0;
    b.Output(Softmax(b, ShardedParameter(b, 0, {8, 12}, axes)));
    const SpmdPartitioned r = Partitioned(b.module());
    EXPECT_EQ(r.collectives, split_dim == 0 ? 0 : 2) << "split dim " << split_dim;
    EXPECT_EQ(Count(r.module, Opcode::kAllGather), 0);
    EXPECT_EQ(AxesOf(r.output_shardings[0], 2), axes);
    ExpectSameNumbers(b.module(), {Random({8, 12}, 11)});
  }
}

TEST(SpmdPartitioner, AReplicatedOperandIsSlicedWithoutCommunication) {
  ModuleBuilder b;
  SetMesh(b, {4});
  const int64_t x = ShardedParameter(b, 0, {8, 3}, {0, kWhole});
  const int64_t y = b.Parameter(1, proto::F32, {8, 3});
  b.Output(b.Add(x, y));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(r.collectives, 0);
  EXPECT_EQ(Only(r.module, Opcode::kPartitionSlice).axis(), 0);
  ExpectSameNumbers(b.module(), {Random({8, 3}, 12), Random({8, 3}, 13)});
}

TEST(SpmdPartitioner, AnOpWithoutARuleIsComputedReplicatedAndCounted) {
  ModuleBuilder b;
  SetMesh(b, {2});
  const int64_t x = ShardedParameter(b, 0, {4, 3, 2}, {0, kWhole, kWhole});
  const int64_t seed = b.Parameter(1, proto::S64, {});
  // Attention with dropout draws its random numbers over the whole batch: no rule.
  b.Output(b.Unary(Opcode::kExp, Attention(b, x, x, x, 0.25, seed)));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(r.replicated_fallbacks, 1);
  EXPECT_EQ(Count(r.module, Opcode::kAllGather), 1);
  EXPECT_THAT(DimsOf(Only(r.module, Opcode::kAttention)), ElementsAre(4, 3, 3));
  ExpectSameNumbers(b.module(), {Random({4, 3, 2}, 14), testing::MakeArray<int64_t>(PrimitiveType::kS64, {}, {7})});
}

TEST(SpmdPartitioner, RandomNumbersAreDrawnWholeThenSliced) {
  ModuleBuilder b;
  SetMesh(b, {4});
  const int64_t x = ShardedParameter(b, 0, {8, 4}, {0, kWhole});
  const int64_t seed = b.Parameter(1, proto::S64, {});
  b.Output(b.Add(x, b.Rng(Opcode::kRngUniform, seed, proto::F32, {8, 4}, 3)));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_THAT(DimsOf(Only(r.module, Opcode::kRngUniform)), ElementsAre(8, 4));
  EXPECT_EQ(Count(r.module, Opcode::kPartitionSlice), 1);
  ExpectSameNumbers(b.module(), {Random({8, 4}, 15), testing::MakeArray<int64_t>(PrimitiveType::kS64, {}, {42})});
}

TEST(SpmdPartitioner, AReshapeKeepsAnOuterSplitAndGathersAnInnerOne) {
  ModuleBuilder b;
  SetMesh(b, {2});
  const int64_t outer = ShardedParameter(b, 0, {4, 3, 5}, {0, kWhole, kWhole});
  b.Output(b.Unary(Opcode::kNegate, b.Reshape(outer, {12, 5})));
  const int64_t inner = ShardedParameter(b, 1, {3, 4}, {kWhole, 0});
  b.Output(b.Unary(Opcode::kNegate, b.Reshape(inner, {12})));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_THAT(AxesOf(r.output_shardings[0], 2), ElementsAre(0, kWhole));
  EXPECT_THAT(AxesOf(r.output_shardings[1], 1), ElementsAre(kWhole));
  EXPECT_EQ(Count(r.module, Opcode::kAllGather), 1);
  ExpectSameNumbers(b.module(), {Random({4, 3, 5}, 16), Random({3, 4}, 17)});
}

TEST(SpmdPartitioner, BackwardPropagationShardsABroadcastBias) {
  ModuleBuilder b;
  SetMesh(b, {4});
  const int64_t x = ShardedParameter(b, 0, {8, 3}, {0, kWhole});
  const int64_t bias = b.Parameter(1, proto::F32, {3});
  b.Output(b.Add(x, b.Broadcast(bias, {8, 3}, {1})));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_THAT(DimsOf(Only(r.module, Opcode::kBroadcast)), ElementsAre(2, 3));  // broadcast straight to the shard
  EXPECT_EQ(Count(r.module, Opcode::kPartitionSlice), 0);
  ExpectSameNumbers(b.module(), {Random({8, 3}, 18), Random({3}, 19)});
}

TEST(SpmdPartitioner, TheCompilerPartitionsAModuleWithAMeshAndRecordsTheLayouts) {
  ModuleBuilder b;
  SetMesh(b, {2, 2});
  const int64_t x = ShardedParameter(b, 0, {4, 6}, {0, kWhole});
  const int64_t w = ShardedParameter(b, 1, {6, 8}, {kWhole, 1});
  const int64_t seed = b.Parameter(2, proto::S64, {});
  b.Output(Attention(b, x, x, x, 0.5, seed));  // attention with dropout: no rule
  b.Output(b.Dot(x, w));
  std::unique_ptr<Client> client = testing::MakeClient();
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(b.module(), kFused);
  ASSERT_TRUE(exe.ok()) << exe.status();
  const proto::Executable& p = (*exe)->proto();
  EXPECT_EQ(p.num_partitions(), 4);
  EXPECT_THAT(p.mesh().device_ids(), ElementsAre(0, 1, 2, 3));
  ASSERT_EQ(p.parameter_shardings_size(), 3);
  EXPECT_THAT(p.parameter_shardings(1).dim_axes(), ElementsAre(kWhole, 1));
  EXPECT_THAT(p.output_shardings(1).dim_axes(), ElementsAre(0, 1));
  EXPECT_EQ(p.replicated_fallbacks(), 1);
  EXPECT_THAT((*exe)->parameter_shapes()[1].dims, ElementsAre(6, 4));  // per partition
  // Serialized and loaded like any executable, the layouts with it.
  absl::StatusOr<std::shared_ptr<Executable>> loaded = client->LoadSerializedExecutable((*exe)->Serialize());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT((*loaded)->proto().output_shardings(0).dim_axes(), ::testing::IsEmpty());
  proto::Executable bad = p;
  bad.mutable_parameter_shardings(0)->set_dim_axes(0, 2);
  EXPECT_THAT(Executable::Load(std::move(bad)).status().message(), HasSubstr("parameter 0's sharding is invalid"));
}

// ---- The module format ------------------------------------------------------------------------------------

TEST(SpmdPartitioner, TheVerifierChecksMeshAndShardings) {
  ModuleBuilder b;
  const int64_t x = b.Parameter(0, proto::F32, {6, 4});
  b.Output(x);
  Annotate(b, x, {0, kWhole});
  EXPECT_THAT(VerifyModule(b.module()).message(), HasSubstr("without a mesh"));
  SetMesh(b, {4});
  EXPECT_THAT(VerifyModule(b.module()).message(), HasSubstr("does not split into 4 equal pieces"));
  b.inst(x).mutable_sharding()->set_dim_axes(0, kWhole);
  b.inst(x).mutable_sharding()->set_dim_axes(1, 0);
  EXPECT_TRUE(VerifyModule(b.module()).ok()) << VerifyModule(b.module());
  b.inst(x).mutable_sharding()->set_dim_axes(1, 1);
  EXPECT_THAT(VerifyModule(b.module()).message(), HasSubstr("axis 1 of dim 1 is not in [-1, 1)"));
  b.inst(x).mutable_sharding()->set_dim_axes(1, 0);
  b.mutable_module().mutable_mesh()->set_device_ids(1, 0);
  EXPECT_THAT(VerifyModule(b.module()).message(), HasSubstr("must be distinct"));
  b.mutable_module().mutable_mesh()->add_device_ids(7);
  EXPECT_THAT(VerifyModule(b.module()).message(), HasSubstr("has 4 partitions but 5 devices"));
}

TEST(SpmdPartitioner, RefusesAModuleWithoutAMesh) {
  ModuleBuilder b;
  b.Output(b.Parameter(0, proto::F32, {2}));
  EXPECT_THAT(PartitionSpmd(b.module()).status().message(), HasSubstr("no mesh"));
}

}  // namespace spmd_partitioner_test
}  // namespace lazyrt::pjrt
