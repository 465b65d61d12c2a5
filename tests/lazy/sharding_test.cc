// The public SPMD API: meshes, partition specs and mark_sharding (validation, the IR annotation and the
// graph key), on a runtime of 4 simulated devices.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ir/post_order.h"
#include "lazy/runtime.h"
#include "lazy/sharding.h"
#include "lazy/tensor.h"
#include "lowering/lower.h"
#include "pjrt_sim/module_verifier.h"

namespace lazyrt {
namespace {

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

}  // namespace
}  // namespace lazyrt
