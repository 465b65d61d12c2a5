// The public SPMD API: meshes, partition specs and mark_sharding (validation, the IR annotation and the
// graph key), on a runtime of 4 simulated devices.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "ir/post_order.h"
#include "lazy/metrics.h"
#include "lazy/nn.h"
#include "lazy/runtime.h"
#include "lazy/sharding.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"
#include "lowering/lower.h"
#include "pjrt_sim/module_verifier.h"

namespace lazyrt {
namespace sharding_test {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kDevices = 4;

// Before the first tensor: the runtime of this binary has kDevices devices.
class FourDevices : public ::testing::Environment {
 public:
  void SetUp() override {
    absl::StatusOr<Options> o = Options::FromEnvironment();
    ASSERT_TRUE(o.ok()) << o.status();
    o->devices = kDevices;
    configure(*o);
  }
};
const ::testing::Environment* const kEnvironment = ::testing::AddGlobalTestEnvironment(new FourDevices);

// The message of the Error `f` throws ("" if none).
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

pjrt::proto::Module Lowered(const Tensor& root) {
  const ir::Value roots[] = {root.ir_value()};
  ir::PostOrder order(roots);
  absl::StatusOr<pjrt::proto::Module> module = lowering::LowerGraph(order, "test");
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return {};
  EXPECT_TRUE(pjrt::VerifyModule(*module).ok()) << pjrt::VerifyModule(*module);
  return *module;
}

std::vector<int64_t> DimAxes(const pjrt::proto::Instruction& inst) {
  return {inst.sharding().dim_axes().begin(), inst.sharding().dim_axes().end()};
}

TEST(Mesh, CoversTheRuntimesDevicesRowMajor) {
  const Mesh mesh({2, 2}, {"data", "model"});
  EXPECT_THAT(mesh.device_ids(), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(mesh.size(), 4);
  EXPECT_EQ(mesh.axis_index("model"), 1);
  EXPECT_EQ(mesh.axis_index("expert"), std::nullopt);
  EXPECT_EQ(mesh.ToString(), "{data=2, model=2} on devices [0,1,2,3]");
  EXPECT_EQ(Mesh({4}, {"data"}, {3, 2, 1, 0}).device_ids(), std::vector<int64_t>({3, 2, 1, 0}));
}

TEST(Mesh, RefusesBadShapesNamesAndDevices) {
  const int line = __LINE__ + 1;
  const std::string wrong_count = ErrorOf([] { Mesh({8}, {"data"}); });
  EXPECT_THAT(wrong_count, AllOf(HasSubstr("needs 8 devices but this runtime has 4"), HasSubstr("LAZYRT_DEVICES"),
                                 HasSubstr(absl::StrCat("sharding_test.cc:", line))));
  EXPECT_THAT(ErrorOf([] { Mesh({2, 2}, {"data", "data"}); }), HasSubstr("'data' appears twice"));
  EXPECT_THAT(ErrorOf([] { Mesh({2, 2}, {"data"}); }), HasSubstr("2 axis sizes [2,2] but 1 axis names"));
  EXPECT_THAT(ErrorOf([] {
                Mesh({4, 0}, {"data", "model"}, std::vector<int64_t>{});
              }),
              HasSubstr("axis 'model' has size 0"));
  EXPECT_THAT(ErrorOf([] { Mesh({2}, {"data"}, {0, 4}); }), HasSubstr("device 4 does not exist"));
  EXPECT_THAT(ErrorOf([] { Mesh({2}, {"data"}, {1, 1}); }), HasSubstr("device 1 appears twice"));
  EXPECT_THAT(ErrorOf([] { Mesh({2}, {"data"}, {0, 1, 2}); }), HasSubstr("needs 2 devices but was given 3"));
  EXPECT_THAT(ErrorOf([] { Mesh({}, {}); }), HasSubstr("at least one axis"));
}

TEST(MarkSharding, RefusesSpecsThatDoNotFit) {
  const Mesh mesh({2, 2}, {"data", "model"});
  const Tensor x = zeros({6, 4});
  const int line = __LINE__ + 1;
  const std::string rank = ErrorOf([&] { mark_sharding(x, mesh, {"data"}); });
  EXPECT_THAT(rank, AllOf(HasSubstr("has 1 entries"), HasSubstr("f32[6,4]"), HasSubstr("one per dim, 2"),
                          HasSubstr(absl::StrCat("sharding_test.cc:", line))));
  EXPECT_THAT(ErrorOf([&] {
                mark_sharding(x, mesh, {"expert", {}});
              }),
              AllOf(HasSubstr("dim 0 names the axis 'expert'"), HasSubstr("axes: data, model")));
  EXPECT_THAT(ErrorOf([&] { mark_sharding(x, mesh, {"data", "data"}); }), HasSubstr("'data' splits two dims"));
  EXPECT_THAT(ErrorOf([&] {
                mark_sharding(zeros({5, 4}), mesh, {"data", {}});
              }),
              AllOf(HasSubstr("dim 0 of size 5 cannot be split into 2 equal pieces over axis 'data'")));
  EXPECT_THAT(ErrorOf([&] { mark_sharding(Tensor(), mesh, {}); }), HasSubstr("undefined tensor"));
}

TEST(MarkSharding, AnnotatesTheValueInTheModule) {
  const Mesh mesh({2, 2}, {"data", "model"});
  Tensor x = zeros({4, 6});
  mark_sharding(x, mesh, {"data", {}});
  Tensor w = zeros({6, 8});
  mark_sharding(w, mesh, {{}, "model"});
  const pjrt::proto::Module module = Lowered(matmul(x, w));
  EXPECT_THAT(module.mesh().shape(), ElementsAre(2, 2));
  EXPECT_THAT(module.mesh().device_ids(), ElementsAre(0, 1, 2, 3));
  std::vector<std::vector<int64_t>> annotated;
  for (const pjrt::proto::Instruction& inst : module.instructions()) {
    if (inst.has_sharding()) annotated.push_back(DimAxes(inst));
  }
  // x's and w's values (whatever computes them); the product is left to the partitioner.
  EXPECT_THAT(annotated, ElementsAre(ElementsAre(0, -1), ElementsAre(-1, 1)));
}

TEST(MarkSharding, AnOptimizersAssignKeepsTheLayout) {
  const Mesh mesh({4}, {"data"});
  Tensor p = zeros({8, 2});
  mark_sharding(p, mesh, {"data", {}});
  p.assign(p + 1.0);
  const pjrt::proto::Module module = Lowered(p);
  ASSERT_EQ(module.outputs_size(), 1);
  EXPECT_THAT(DimAxes(module.instructions(static_cast<int>(module.outputs(0)))), ElementsAre(0, -1));
}

TEST(MarkSharding, TheGraphKeyIncludesMeshAndSharding) {
  auto root_hash = [](const Mesh* mesh, const PartitionSpec& spec) {
    Tensor x = zeros({4, 4});
    if (mesh != nullptr) mark_sharding(x, *mesh, spec);
    return (x * 2.0).ir_value().hash();
  };
  const Mesh data({4}, {"data"});
  const Mesh other_devices({4}, {"data"}, {1, 0, 2, 3});
  const Mesh two_axes({2, 2}, {"data", "model"});
  const auto plain = root_hash(nullptr, {});
  EXPECT_EQ(root_hash(&data, {"data", {}}), root_hash(&data, {"data", {}}));
  EXPECT_NE(root_hash(&data, {"data", {}}), plain);
  EXPECT_NE(root_hash(&data, {"data", {}}), root_hash(&data, {{}, "data"}));
  EXPECT_NE(root_hash(&data, {"data", {}}), root_hash(&other_devices, {"data", {}}));
  EXPECT_NE(root_hash(&two_axes, {"data", {}}), root_hash(&two_axes, {"model", {}}));
}

// ---- Running sharded programs on the mesh ----------------------------------------------------------------

std::vector<float> RandomValues(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Tensor Random(std::vector<int64_t> dims, uint64_t seed) {
  size_t n = 1;
  for (int64_t d : dims) n *= static_cast<size_t>(d);
  return Tensor::FromData(std::span<const float>(RandomValues(n, seed)), dims);
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tolerance = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tolerance) << "element " << i;
}

TEST(ShardedExecution, ABatchShardedMatmulMatchesAReferenceLoop) {
  const Mesh mesh({4}, {"data"});
  const std::vector<float> xv = RandomValues(8 * 5, 1), wv = RandomValues(5 * 3, 2);
  Tensor x = Tensor::FromData(std::span<const float>(xv), {8, 5});
  Tensor w = Tensor::FromData(std::span<const float>(wv), {5, 3});
  mark_sharding(x, mesh, {"data", {}});
  // Compiled, or loaded from a persistent cache an earlier run stored it in.
  auto found = [] { return CounterValue(counters::kGraphsCompiled) + CounterValue(counters::kPersistentCacheHit); };
  const int64_t before = found();
  Tensor y = matmul(x, w);
  std::vector<float> want(8 * 3, 0.0f);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 5; ++k)
        want[static_cast<size_t>(i * 3 + j)] += xv[static_cast<size_t>(i * 5 + k)] * wv[static_cast<size_t>(k * 3 + j)];
    }
  }
  ExpectNear(y.to_vector<float>(), want);
  EXPECT_EQ(found(), before + 1);
  const int64_t fallbacks = CounterValue(counters::kSpmdReplicatedFallbacks);
  // Attention with dropout has no partitioning rule (its random numbers are drawn over the whole batch):
  // computed replicated, and counted.
  const Tensor rows = reshape(x, {8, 1, 5});
  EXPECT_EQ(scaled_dot_product_attention(rows, rows, rows, Tensor(), 0.5).to_vector<float>().size(), 40u);
  EXPECT_EQ(CounterValue(counters::kSpmdReplicatedFallbacks), fallbacks + 1);
  // Computed as 4 partitions: the result is 4 pieces of [2, 3], split along dim 0.
  const std::shared_ptr<const detail::ShardedData>& pieces = y.impl()->sharded;
  ASSERT_NE(pieces, nullptr);
  EXPECT_THAT(pieces->dim_axes, ElementsAre(0, -1));
  ASSERT_EQ(pieces->shards.size(), 4u);
  EXPECT_EQ(pieces->shards[3]->shape().dims, std::vector<int64_t>({2, 3}));
  // The result lives as pieces on the mesh; used again it is passed on as it is, and read back whole.
  ExpectNear((y * 2.0).to_vector<float>(), [&] {
    std::vector<float> twice = want;
    for (float& v : twice) v *= 2.0f;
    return twice;
  }());
}

// One SGD step of a two-layer MLP; returns the loss and the updated weights.
struct MlpStep {
  float loss;
  std::vector<float> w1, w2;
};
MlpStep RunMlpStep(const Mesh* mesh, bool model_parallel) {
  Tensor x = Random({8, 6}, 10);
  Tensor target = Random({8, 4}, 11);
  Tensor w1 = Random({6, 8}, 12).requires_grad_();
  Tensor w2 = Random({8, 4}, 13).requires_grad_();
  if (mesh != nullptr) {
    mark_sharding(x, *mesh, {"data", {}});
    mark_sharding(target, *mesh, {"data", {}});
    mark_sharding(w1, *mesh, {{}, model_parallel ? std::optional<std::string>("model") : std::nullopt});
    mark_sharding(w2, *mesh, {model_parallel ? std::optional<std::string>("model") : std::nullopt, {}});
  }
  Tensor h = relu(matmul(x, w1));
  Tensor err = matmul(h, w2) - target;
  Tensor loss = mean(err * err);
  loss.backward();
  w1.assign((w1 - w1.grad() * 0.1).detach());
  w2.assign((w2 - w2.grad() * 0.1).detach());
  sync();
  if (mesh != nullptr) {  // the weights stay laid out as marked
    EXPECT_THAT(w1.impl()->sharded->dim_axes, ElementsAre(-1, model_parallel ? 1 : -1));
    EXPECT_THAT(w2.impl()->sharded->dim_axes, ElementsAre(model_parallel ? 1 : -1, -1));
  }
  return {static_cast<float>(loss.item()), w1.to_vector<float>(), w2.to_vector<float>()};
}

TEST(ShardedExecution, AnMlpStepWithDataAndModelShardingMatchesOneDevice) {
  const MlpStep single = RunMlpStep(nullptr, false);
  const Mesh data({4}, {"data"});
  const Mesh data_model({2, 2}, {"data", "model"});
  for (const auto& [mesh, model_parallel] : {std::pair{&data, false}, std::pair{&data_model, true}}) {
    const MlpStep sharded = RunMlpStep(mesh, model_parallel);
    EXPECT_NEAR(sharded.loss, single.loss, 1e-5f * std::abs(single.loss)) << mesh->ToString();
    ExpectNear(sharded.w1, single.w1);
    ExpectNear(sharded.w2, single.w2);
  }
}

TEST(ShardedExecution, ReductionsAndSoftmaxOverASplitDim) {
  const Mesh mesh({4}, {"data"});
  const std::vector<float> v = RandomValues(4 * 8, 20);
  Tensor plain = Tensor::FromData(std::span<const float>(v), {4, 8});
  Tensor split = Tensor::FromData(std::span<const float>(v), {4, 8});
  mark_sharding(split, mesh, {{}, "data"});
  ExpectNear(sum(split, {1}).to_vector<float>(), sum(plain, {1}).to_vector<float>());
  ExpectNear(softmax(split, 1).to_vector<float>(), softmax(plain, 1).to_vector<float>());
  ExpectNear(max(split).to_vector<float>(), max(plain).to_vector<float>());
}

TEST(ShardedExecution, TheSecondStepHitsTheCache) {
  const Mesh mesh({2, 2}, {"data", "model"});
  Tensor w = Random({6, 4}, 30);
  mark_sharding(w, mesh, {{}, "model"});
  auto step = [&](uint64_t seed) {
    Tensor x = Random({4, 6}, seed);
    mark_sharding(x, mesh, {"data", {}});
    w.assign(w + matmul(x.transpose(0, 1), x).sum({1}, true) * 0.01);
    sync();
  };
  step(31);
  const int64_t compiled = CounterValue(counters::kGraphsCompiled);
  const int64_t hits = CounterValue(counters::kExecutableCacheHit);
  step(32);
  step(33);
  EXPECT_EQ(CounterValue(counters::kGraphsCompiled), compiled);
  EXPECT_EQ(CounterValue(counters::kExecutableCacheHit), hits + 2);
}

}  // namespace sharding_test
}  // namespace lazyrt
