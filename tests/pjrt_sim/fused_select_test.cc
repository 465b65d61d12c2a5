// The fused loop's select is branch-free (a mask picks one argument's bits): it must give exactly the
// bits of the unfused select, for every element type, for predicates that are any nonzero byte, and
// for values whose bits a float comparison would not tell apart (NaN payloads, -0).
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <limits>
#include <random>

#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace fused_select_test {

using testing::Dims;
using testing::HostArray;
using testing::MakeArray;
using testing::ModuleBuilder;

// A value of T with its bits drawn at random (any NaN payload, -0, infinities, denormals).
template <typename T>
T RandomBits(std::mt19937_64& rng) {
  uint64_t bits = rng();
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

// select(p, a, b) and the ReLU backward select(compare(x, 0), 0, g) of the MLP, fused and not.
template <typename T>
void CheckSelect(proto::ElementType type, PrimitiveType primitive) {
  std::mt19937_64 rng(7);
  for (const Dims& dims : {Dims{1}, Dims{7}, Dims{300}, Dims{3, 257}, Dims{128, 256}}) {
    const int64_t n = testing::NumElements(dims);
    std::vector<uint8_t> p(static_cast<size_t>(n));
    for (uint8_t& x : p) x = rng() % 3 == 0 ? 0 : static_cast<uint8_t>(rng() % 256 | 1);  // any nonzero byte
    std::vector<T> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    for (T& x : a) x = RandomBits<T>(rng);
    for (T& x : b) x = RandomBits<T>(rng);
    ModuleBuilder mb;
    const int64_t pp = mb.Parameter(0, proto::PRED, dims);
    const int64_t pa = mb.Parameter(1, type, dims);
    const int64_t pb = mb.Parameter(2, type, dims);
    mb.Output(mb.Select(pp, pa, pb));
    // The predicate computed in the same loop, a constant on one side: ReLU's backward.
    mb.Output(mb.Select(mb.Compare(CompareDirection::kLe, pa, mb.Broadcast(mb.Constant(0, type), dims, {})),
                        mb.Broadcast(mb.Constant(0, type), dims, {}), pb));
    const std::vector<HostArray> args = {MakeArray<uint8_t>(PrimitiveType::kPred, dims, p),
                                         MakeArray<T>(primitive, dims, a), MakeArray<T>(primitive, dims, b)};
    std::unique_ptr<Client> client = testing::MakeClient();
    for (bool fusion : {false, true}) {
      absl::StatusOr<std::vector<HostArray>> out =
          testing::CompileAndRun(*client, mb.module(), {.fusion = fusion, .autotune = false}, args);
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_EQ(out->size(), 2u);
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(i);
        const T want = p[k] != 0 ? a[k] : b[k];
        const T got = (*out)[0].at<T>(i);
        ASSERT_EQ(std::memcmp(&got, &want, sizeof(T)), 0) << "select at " << i << ", fusion " << fusion;
        const T relu_want = a[k] <= T{0} ? T{0} : b[k];
        const T relu_got = (*out)[1].at<T>(i);
        ASSERT_EQ(std::memcmp(&relu_got, &relu_want, sizeof(T)), 0)
            << "relu backward at " << i << ", fusion " << fusion;
      }
    }
  }
}

TEST(FusedSelectTest, F32) { CheckSelect<float>(proto::F32, PrimitiveType::kF32); }
TEST(FusedSelectTest, F64) { CheckSelect<double>(proto::F64, PrimitiveType::kF64); }
TEST(FusedSelectTest, S32) { CheckSelect<int32_t>(proto::S32, PrimitiveType::kS32); }
TEST(FusedSelectTest, S64) { CheckSelect<int64_t>(proto::S64, PrimitiveType::kS64); }

}  // namespace fused_select_test
}  // namespace lazyrt::pjrt
