// The SPMD partitioner's rules for the ops a GPT's step is made of besides dots and elementwise math: slices,
// concatenation, embedding lookups and their gradients (index_select, gather, index_add, scatter_add), fused
// attention and its gradient split over batch and heads, and a split moved between two dims by ALL_TO_ALL.
// Each: the partitioned program computes what the global one does, with no op computed replicated.
#include <random>

#include "tests/pjrt_sim/spmd_test_util.h"

namespace lazyrt::pjrt {
namespace spmd_rules_test {

using namespace spmd_test;  // NOLINT(google-build-using-namespace): the helpers of these tests

int64_t ShardedIndex(ModuleBuilder& b, int64_t number, const Dims& dims, const Axes& axes) {
  const int64_t id = b.Parameter(number, proto::S64, dims);
  Annotate(b, id, axes);
  return id;
}

HostArray RandomIndex(const Dims& dims, int64_t bound, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> values(static_cast<size_t>(testing::NumElements(dims)));
  for (int64_t& v : values) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(bound));
  return testing::MakeArray<int64_t>(PrimitiveType::kS64, dims, values);
}

TEST(SpmdRules, ASliceOfAWholeDimKeepsTheOtherDimsSplit) {
  ModuleBuilder b;
  SetMesh(b, {4});
  const int64_t x = ShardedParameter(b, 0, {8, 6}, {0, kWhole});
  b.Output(b.Unary(Opcode::kNegate, b.Slice(x, {0, 1}, {8, 5}, {1, 1})));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(r.replicated_fallbacks, 0);
  EXPECT_EQ(r.collectives, 0);
  EXPECT_THAT(DimsOf(Only(r.module, Opcode::kSlice)), ElementsAre(2, 4));
  EXPECT_THAT(AxesOf(r.output_shardings[0], 2), ElementsAre(0, kWhole));
  ExpectSameNumbers(b.module(), {Random({8, 6}, 1)});
}

TEST(SpmdRules, ConcatenationAlongAWholeDimKeepsTheSplit) {
  ModuleBuilder b;
  SetMesh(b, {2});
  const int64_t x = ShardedParameter(b, 0, {4, 3}, {0, kWhole});
  const int64_t y = b.Parameter(1, proto::F32, {4, 2});  // replicated: sliced, no communication
  b.Output(b.Concatenate({x, y}, 1));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(r.replicated_fallbacks, 0);
  EXPECT_EQ(r.collectives, 0);
  EXPECT_THAT(DimsOf(Only(r.module, Opcode::kConcatenate)), ElementsAre(2, 5));
  ExpectSameNumbers(b.module(), {Random({4, 3}, 2), Random({4, 2}, 3)});
}

TEST(SpmdRules, AnEmbeddingLookupSplitsItsIndexAndReadsTheTableWhole) {
  ModuleBuilder b;
  SetMesh(b, {4});
  const int64_t table = b.Parameter(0, proto::F32, {10, 3});
  const int64_t tokens = ShardedIndex(b, 1, {8}, {0});
  b.Output(b.IndexSelect(table, tokens, 0));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(r.replicated_fallbacks, 0);
  EXPECT_EQ(r.collectives, 0);
  EXPECT_THAT(DimsOf(Only(r.module, Opcode::kIndexSelect)), ElementsAre(2, 3));
  EXPECT_THAT(AxesOf(r.output_shardings[0], 2), ElementsAre(0, kWhole));
  ExpectSameNumbers(b.module(), {Random({10, 3}, 4), RandomIndex({8}, 10, 5)});
}

TEST(SpmdRules, AGatherAlongAWholeDimKeepsTheRowsSplit) {
  // Cross-entropy picks each row's target logit: rows split over the batch, the vocabulary whole.
  ModuleBuilder b;
  SetMesh(b, {2, 2});
  const int64_t logits = ShardedParameter(b, 0, {8, 5}, {0, kWhole});
  const int64_t targets = ShardedIndex(b, 1, {8, 1}, {0, kWhole});
  b.Output(b.Gather(logits, targets, 1));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(r.replicated_fallbacks, 0);
  EXPECT_EQ(r.collectives, 0);
  EXPECT_THAT(DimsOf(Only(r.module, Opcode::kGather)), ElementsAre(4, 1));
  ExpectSameNumbers(b.module(), {Random({8, 5}, 6), RandomIndex({8, 1}, 5, 7)});
}

TEST(SpmdRules, IndexAddAndScatterAddAlongAWholeDimKeepTheOtherDimsSplit) {
  ModuleBuilder b;
  SetMesh(b, {2});
  // index_add: the gradient of a slice or an embedding, rows added along dim 0, the columns split.
  const int64_t x = ShardedParameter(b, 0, {6, 4}, {kWhole, 0});
  const int64_t rows = b.Parameter(1, proto::S64, {3});
  const int64_t src = ShardedParameter(b, 2, {3, 4}, {kWhole, 0});
  b.Output(b.Op(Opcode::kIndexAdd, {x, rows, src}, proto::F32, {6, 4}, [](proto::Instruction& i) { i.set_axis(0); }));
  // scatter_add: the gradient of a gather along dim 1, the rows split.
  const int64_t y = ShardedParameter(b, 3, {4, 5}, {0, kWhole});
  const int64_t at = ShardedIndex(b, 4, {4, 2}, {0, kWhole});
  const int64_t values = ShardedParameter(b, 5, {4, 2}, {0, kWhole});
  b.Output(
      b.Op(Opcode::kScatterAdd, {y, at, values}, proto::F32, {4, 5}, [](proto::Instruction& i) { i.set_axis(1); }));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(r.replicated_fallbacks, 0);
  EXPECT_EQ(r.collectives, 0);
  EXPECT_THAT(DimsOf(Only(r.module, Opcode::kIndexAdd)), ElementsAre(6, 2));
  EXPECT_THAT(DimsOf(Only(r.module, Opcode::kScatterAdd)), ElementsAre(2, 5));
  ExpectSameNumbers(b.module(), {Random({6, 4}, 8), RandomIndex({3}, 6, 9), Random({3, 4}, 10), Random({4, 5}, 11),
                                 RandomIndex({4, 2}, 5, 12), Random({4, 2}, 13)});
}

TEST(SpmdRules, AnEmbeddingGradientAddsEachPartitionsRowsAndAllReducesTheTable) {
  // The tokens (and the rows of the gradient) split over the batch: partial tables, summed once.
  ModuleBuilder b;
  SetMesh(b, {4});
  const int64_t table = b.Parameter(0, proto::F32, {10, 3});
  const int64_t tokens = ShardedIndex(b, 1, {8}, {0});
  const int64_t rows = ShardedParameter(b, 2, {8, 3}, {0, kWhole});
  b.Output(b.Op(Opcode::kIndexAdd, {table, tokens, rows}, proto::F32, {10, 3},
                [](proto::Instruction& i) { i.set_axis(0); }));
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(r.replicated_fallbacks, 0);
  EXPECT_EQ(Count(r.module, Opcode::kAllGather), 0);
  EXPECT_THAT(DimsOf(Only(r.module, Opcode::kIndexAdd)), ElementsAre(10, 3));
  const proto::Instruction& all_reduce = Only(r.module, Opcode::kAllReduce);
  EXPECT_THAT(DimsOf(all_reduce), ElementsAre(10, 3));
  EXPECT_THAT(Groups(all_reduce), ElementsAre(ElementsAre(0, 1, 2, 3)));
  ExpectSameNumbers(b.module(), {Random({10, 3}, 20), RandomIndex({8}, 10, 21), Random({8, 3}, 22)});
}

// f32, and bf16 (whose forward result is f32 and gradients bf16).
TEST(SpmdRules, AttentionAndItsGradientSplitOverBatchAndHeadsWithoutCommunication) {
  for (const proto::ElementType type : {proto::F32, proto::BF16}) {
    SCOPED_TRACE(proto::ElementType_Name(type));
    ModuleBuilder b;
    SetMesh(b, {2, 2});  // data, model: q, k, v [batch, heads, time, head dim]
    const Axes batch_and_heads = {0, 1, kWhole, kWhole};
    const int64_t q = ShardedParameter(b, 0, {2, 4, 3, 2}, batch_and_heads, type);
    const int64_t k = ShardedParameter(b, 1, {2, 4, 3, 2}, batch_and_heads, type);
    const int64_t v = ShardedParameter(b, 2, {2, 4, 3, 2}, batch_and_heads, type);
    const int64_t d_out = ShardedParameter(b, 3, {2, 4, 3, 2}, batch_and_heads, type);
    const int64_t out = Attention(b, q, k, v);
    b.Output(out);
    b.Output(AttentionGrad(b, q, k, v, out, d_out));
    const SpmdPartitioned r = Partitioned(b.module());
    EXPECT_EQ(r.replicated_fallbacks, 0);
    EXPECT_EQ(r.collectives, 0);
    EXPECT_THAT(DimsOf(Only(r.module, Opcode::kAttention)), ElementsAre(1, 2, 3, 3));
    EXPECT_THAT(DimsOf(Only(r.module, Opcode::kAttentionGrad)), ElementsAre(1, 2, 18));
    EXPECT_EQ(Only(r.module, Opcode::kAttention).shape().type(), proto::F32);
    EXPECT_EQ(Only(r.module, Opcode::kAttentionGrad).shape().type(), type);
    EXPECT_THAT(AxesOf(r.output_shardings[1], 3), ElementsAre(0, 1, kWhole));
    const auto random = type == proto::BF16 ? RandomBf16 : Random;
    ExpectSameNumbers(b.module(), {random({2, 4, 3, 2}, 14), random({2, 4, 3, 2}, 15), random({2, 4, 3, 2}, 16),
                                   random({2, 4, 3, 2}, 17)});
  }
}

TEST(SpmdRules, ASplitMovedToAnotherDimIsOneAllToAll) {
  ModuleBuilder b;
  SetMesh(b, {2, 2});
  const int64_t x = ShardedParameter(b, 0, {4, 6}, {1, kWhole});
  const int64_t y = b.Unary(Opcode::kNegate, x);
  Annotate(b, y, {kWhole, 1});
  b.Output(y);
  const SpmdPartitioned r = Partitioned(b.module());
  EXPECT_EQ(Count(r.module, Opcode::kAllGather), 0);
  EXPECT_EQ(Count(r.module, Opcode::kPartitionSlice), 0);
  const proto::Instruction& all_to_all = Only(r.module, Opcode::kAllToAll);
  EXPECT_THAT(all_to_all.dims(), ElementsAre(1, 0));  // split dim 1, concatenate dim 0
  EXPECT_THAT(Groups(all_to_all), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));
  EXPECT_THAT(DimsOf(all_to_all), ElementsAre(4, 3));
  EXPECT_THAT(AxesOf(r.output_shardings[0], 2), ElementsAre(kWhole, 1));
  ExpectSameNumbers(b.module(), {Random({4, 6}, 18)});
}

}  // namespace spmd_rules_test
}  // namespace lazyrt::pjrt
