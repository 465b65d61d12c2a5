#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "ir/post_order.h"
#include "lazy/runtime.h"
#include "lazy/tensor.h"

namespace lazyrt {
namespace tracing_test {

using ::testing::HasSubstr;

Tensor Input(std::vector<int64_t> dims, float fill = 1.0f) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n), fill);
  return Tensor::FromData(v, dims);
}

TEST(Tracing, OpsRecordNodesAndRunNothing) {
  Tensor x = Input({2, 3});
  EXPECT_FALSE(x.is_pending());
  Tensor y = relu(x * 2.0 + 1.0);
  EXPECT_TRUE(y.is_pending());
  EXPECT_EQ(y.shape(), Shape(DType::kF32, {2, 3}));
  EXPECT_EQ(y.ir_value().node->op(), ir::OpKind::kRelu);
}

TEST(Tracing, HostScalarsAreParametersSoValuesDoNotChangeTheHash) {
  Tensor x = Input({4});
  const uint64_t h1 = graph_hash({x * 0.1});
  const uint64_t h2 = graph_hash({x * 0.2});
  EXPECT_EQ(h1, h2);
  EXPECT_THAT(graph_text({x * 0.1}), HasSubstr("# parameter 1"));
}

TEST(Tracing, StaticScalarsAreConstantsSoValuesChangeTheHash) {
  Tensor x = Input({4});
  EXPECT_NE(graph_hash({x * Scalar::Static(0.1)}), graph_hash({x * Scalar::Static(0.2)}));
  EXPECT_EQ(graph_hash({x * Scalar::Static(0.1)}), graph_hash({x * Scalar::Static(0.1)}));
  EXPECT_THAT(graph_text({x * static_scalar(0.1)}), HasSubstr("Constant() {value=0.1}"));
}

TEST(Tracing, HashSensitiveToShapeOpAndOperandOrder) {
  Tensor a = Input({4}), b = Input({4}), c = Input({5});
  EXPECT_NE(graph_hash({a + b}), graph_hash({a * b}));
  EXPECT_NE(graph_hash({a + b}), graph_hash({c + c}));
  EXPECT_NE(graph_hash({a - exp(b)}), graph_hash({exp(b) - a}));
  EXPECT_NE(graph_hash({sum(a, {0}, true)}), graph_hash({sum(a, {0}, false)}));
  // Which parameter feeds which use matters, although every leaf has the same shape.
  EXPECT_NE(graph_hash({(a + b) * a}), graph_hash({(a + b) * b}));
}

TEST(Tracing, SameProgramSameHash) {
  auto step = [](const Tensor& x, const Tensor& w, double lr) { return softmax(matmul(x, w) * lr, -1); };
  Tensor x = Input({8, 4}), w = Input({4, 3});
  EXPECT_EQ(graph_hash({step(x, w, 0.1)}), graph_hash({step(x, w, 0.01)}));
}

TEST(Tracing, DTypePromotion) {
  std::vector<int64_t> iv = {1, 2, 3};
  const std::vector<int64_t> dims = {3};
  Tensor i = Tensor::FromData(iv, dims);
  EXPECT_EQ(i.dtype(), DType::kI64);
  EXPECT_EQ((i + 1).dtype(), DType::kI64);
  EXPECT_EQ((i * 0.5).dtype(), DType::kF32);
  EXPECT_EQ((i / 2).dtype(), DType::kF32);
  EXPECT_EQ((i + Input({3})).dtype(), DType::kF32);
  EXPECT_EQ(lt(i, 2).dtype(), DType::kBool);
  EXPECT_EQ(sum(i).dtype(), DType::kI64);
  EXPECT_EQ(exp(i).dtype(), DType::kF32);
}

TEST(Tracing, OpShapes) {
  Tensor x = Input({2, 3, 4});
  EXPECT_EQ(sum(x, {-1}).shape(), Shape(DType::kF32, {2, 3}));
  EXPECT_EQ(mean(x, {0, 2}, true).shape(), Shape(DType::kF32, {1, 3, 1}));
  EXPECT_EQ(max(x).shape(), Shape(DType::kF32, {}));
  EXPECT_EQ(argmax(x, 1).shape(), Shape(DType::kI64, {2, 4}));
  EXPECT_EQ(transpose(x, 0, 2).shape(), Shape(DType::kF32, {4, 3, 2}));
  EXPECT_EQ(permute(x, {1, 2, 0}).shape(), Shape(DType::kF32, {3, 4, 2}));
  EXPECT_EQ(reshape(x, {6, -1}).shape(), Shape(DType::kF32, {6, 4}));
  EXPECT_EQ(expand(Input({3, 1}), {2, 3, 5}).shape(), Shape(DType::kF32, {2, 3, 5}));
  EXPECT_EQ(slice(x, 2, 1, 100, 2).shape(), Shape(DType::kF32, {2, 3, 2}));
  EXPECT_EQ(slice(x, 1, -2, 3).shape(), Shape(DType::kF32, {2, 2, 4}));
  EXPECT_EQ(cat({x, x}, 1).shape(), Shape(DType::kF32, {2, 6, 4}));
  EXPECT_EQ(matmul(Input({5, 2, 3}), Input({3, 7})).shape(), Shape(DType::kF32, {5, 2, 7}));
  EXPECT_EQ(matmul(Input({3}), Input({3, 7})).shape(), Shape(DType::kF32, {7}));
  EXPECT_EQ(matmul(Input({2, 3}), Input({3})).shape(), Shape(DType::kF32, {2}));
  EXPECT_EQ(log_softmax(x, 1).shape(), x.shape());
  EXPECT_EQ(where(gt(x, 0.0), x, zeros({1})).shape(), x.shape());
  Tensor idx = arange(0, 4);
  EXPECT_EQ(idx.shape(), Shape(DType::kI64, {4}));
  EXPECT_EQ(arange(10, 0, -3).shape(), Shape(DType::kI64, {4}));
  EXPECT_EQ(index_select(Input({10, 8}), 0, idx).shape(), Shape(DType::kF32, {4, 8}));
  EXPECT_EQ(one_hot(idx, 10).shape(), Shape(DType::kI64, {4, 10}));
  EXPECT_EQ(gather(Input({4, 10}), 1, reshape(idx, {4, 1})).shape(), Shape(DType::kF32, {4, 1}));
  EXPECT_EQ(full({2, 2}, 3.0).shape(), Shape(DType::kF32, {2, 2}));
}

TEST(Tracing, ActivationsTimesAWeightAreOneTwoDimensionalProduct) {
  // [5, 2, 3] x [3, 7]: one [10, 3] x [3, 7] GEMM (and one for each gradient), not five small ones.
  Tensor r = matmul(Input({5, 2, 3}), Input({3, 7}));
  EXPECT_EQ(r.shape(), Shape(DType::kF32, {5, 2, 7}));
  ASSERT_EQ(r.ir_value().node->op(), ir::OpKind::kReshape);
  EXPECT_EQ(r.ir_value().node->operand(0).node->op(), ir::OpKind::kMatMul);
  EXPECT_EQ(r.ir_value().node->operand(0).node->shape(0), Shape(DType::kF32, {10, 7}));
  // A batched right operand stays a batched product.
  EXPECT_EQ(matmul(Input({5, 2, 3}), Input({5, 3, 7})).ir_value().node->op(), ir::OpKind::kMatMul);
}

TEST(Tracing, RandomOpsKeepTheGraphWhileTheSeedAdvances) {
  detail::DeviceState& state = detail::Runtime::Get().device_state({0}, SourceLocation::current());
  state.AdvanceRng();
  // Two random draws in one step come from two streams of the same seed parameter.
  Tensor u1 = rand({4, 4});
  Tensor r1 = u1 + randn({4, 4}, 1.0, 2.0);
  const std::string text = graph_text({r1});
  EXPECT_THAT(text, HasSubstr("RngUniform(%0) {stream=0}"));
  EXPECT_THAT(text, HasSubstr("RngNormal(%0) {stream=1}"));
  const ir::Node* seed1 = u1.ir_value().node->operand(0).node.get();
  state.AdvanceRng();  // what a sync does
  Tensor u2 = rand({4, 4});
  Tensor r2 = u2 + randn({4, 4}, 1.0, 2.0);
  EXPECT_EQ(graph_hash({r1}), graph_hash({r2}));
  const ir::Node* seed2 = u2.ir_value().node->operand(0).node.get();
  ASSERT_EQ(seed1->op(), ir::OpKind::kDeviceData);
  EXPECT_NE(seed1, seed2);
  EXPECT_NE(static_cast<const detail::ScalarLeaf&>(*seed1->leaf_data()).value,
            static_cast<const detail::ScalarLeaf&>(*seed2->leaf_data()).value);
}

TEST(Registry, FindsLiveTensorsAndForgetsDeadOnes) {
  detail::DeviceState& state = detail::Runtime::Get().device_state({0}, SourceLocation::current());
  const size_t before = state.LiveTensors().size();
  Tensor x = Input({3});
  {
    Tensor y = x + 1.0;
    Tensor z = y * 2.0;
    EXPECT_EQ(state.LiveTensors().size(), before + 2);
  }
  EXPECT_EQ(state.LiveTensors().size(), before);
}

// One thread traces and drops tensors while another collects the live ones, as a sync does: a tensor
// whose last handle is going is skipped, any other is held until the collector lets go (and is then
// destroyed on the collector's thread). The sanitizer builds check the reference counts' ordering.
TEST(Registry, CollectsWhileAnotherThreadDropsTensors) {
  detail::DeviceState& state = detail::Runtime::Get().device_state({0}, SourceLocation::current());
  const size_t before = state.LiveTensors().size();
  Tensor x = Input({3});
  std::atomic<bool> enough{false};
  std::thread tracer([&] {
    // Until the collector has held enough tensors (bounded: a stalled collector fails the test below).
    for (int i = 0; i < 5'000'000 && !enough; ++i) {
      Tensor y = x + 1.0;
      Tensor z = y * 2.0;
    }
    enough = true;
  });
  int64_t held = 0;
  while (!enough) {
    for (const Tensor& t : state.LiveTensors()) {
      EXPECT_TRUE(t.is_pending());
      EXPECT_EQ(t.shape(), x.shape());
      if (++held == 1000) enough = true;
    }
  }
  tracer.join();
  EXPECT_GE(held, 1000);
  EXPECT_EQ(state.LiveTensors().size(), before);
}

TEST(Tracing, AssignUpdatesEveryHandle) {
  Tensor p = Input({3});
  Tensor alias = p;
  p.assign(p - 0.1);
  EXPECT_TRUE(alias.is_pending());
  EXPECT_EQ(alias.ir_value().node->op(), ir::OpKind::kSub);
}

TEST(Tracing, DeepChainsTraceAndDie) {
  Tensor x = Input({2});
  Tensor y = x;
  for (int i = 0; i < 200'000; ++i) y = y + 1.0;
  ir::Value root = y.ir_value();
  {
    std::vector<ir::Value> roots{root};
    ir::PostOrder order(roots);
    EXPECT_EQ(order.size(), 400'001u);  // the input, and per step an Add and its scalar
  }
}

TEST(GraphDump, TextAndDot) {
  Tensor x = Input({2, 2});
  Tensor y = tanh(x) * 3.0;
  EXPECT_THAT(graph_text({y}), HasSubstr("Tanh(%0) : f32[2,2]"));
  EXPECT_THAT(graph_dot({y}), HasSubstr("digraph"));
}

}  // namespace tracing_test
}  // namespace lazyrt
