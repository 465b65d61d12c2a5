// INDEX_ADD on arrays large enough to be split over the pool by outer rows: against a reference loop
// (j in order, so repeated indices accumulate in the same order), along the first, a middle and the
// last axis (inner runs of 1, as the slice gradient of a GPT's fused qkv), in f32 and bf16.
#include <gtest/gtest.h>

#include <random>

#include "pjrt_sim/element_ops.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace index_add_rows_test {

using testing::Dims;
using testing::HostArray;
using testing::MakeArray;
using testing::ModuleBuilder;

struct Case {
  Dims x;
  int64_t axis, count;
};

// Runs index_add(x, axis, index, src) and compares it with the reference loop, element for element.
template <typename T>
void Check(proto::ElementType proto_type, PrimitiveType type, const Case& c, std::mt19937_64& rng) {
  Dims src_dims = c.x;
  src_dims[static_cast<size_t>(c.axis)] = c.count;
  const int64_t size = c.x[static_cast<size_t>(c.axis)];
  std::vector<int64_t> index(static_cast<size_t>(c.count));
  for (int64_t& i : index) i = static_cast<int64_t>(rng() % static_cast<uint64_t>(size));  // repeats included
  auto random_values = [&](int64_t n) {
    std::vector<T> v(static_cast<size_t>(n));
    for (T& e : v) {
      const float f = std::uniform_real_distribution<float>(-4, 4)(rng);
      if constexpr (std::is_same_v<T, float>) {
        e = f;
      } else {
        e = FloatToBf16(f);
      }
    }
    return v;
  };
  const std::vector<T> x = random_values(testing::NumElements(c.x));
  const std::vector<T> src = random_values(testing::NumElements(src_dims));

  ModuleBuilder b;
  const int64_t px = b.Parameter(0, proto_type, c.x);
  const int64_t pi = b.Parameter(1, proto::S64, {c.count});
  const int64_t ps = b.Parameter(2, proto_type, src_dims);
  b.Output(b.Op(Opcode::kIndexAdd, {px, pi, ps}, proto_type, c.x, [&](proto::Instruction& i) {
    i.set_axis(c.axis);
    i.set_site(1);
  }));
  std::unique_ptr<Client> client = testing::MakeClient();
  absl::StatusOr<std::vector<HostArray>> out =
      testing::CompileAndRun(*client, b.module(), {},
                             {MakeArray<T>(type, c.x, x), MakeArray<int64_t>(PrimitiveType::kS64, {c.count}, index),
                              MakeArray<T>(type, src_dims, src)});
  ASSERT_TRUE(out.ok()) << out.status();

  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < c.axis; ++d) outer *= c.x[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(c.axis) + 1; d < c.x.size(); ++d) inner *= c.x[d];
  std::vector<T> want = x;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < c.count; ++j) {
      for (int64_t i = 0; i < inner; ++i) {
        T& w = want[static_cast<size_t>((o * size + index[static_cast<size_t>(j)]) * inner + i)];
        const T s = src[static_cast<size_t>((o * c.count + j) * inner + i)];
        if constexpr (std::is_same_v<T, float>) {
          w += s;
        } else {
          w = FloatToBf16(Bf16ToFloat(w) + Bf16ToFloat(s));
        }
      }
    }
  }
  EXPECT_EQ((*out)[0].values<T>(), want) << "x " << testing::NumElements(c.x) << " elements, axis " << c.axis;
}

const Case kCases[] = {
    {{4096, 384}, 1, 128},     // the last axis, inner 1: the slice gradient's shape
    {{32, 128, 384}, 2, 128},  // the same, rank 3
    {{64, 50, 33}, 1, 70},     // a middle axis, inner runs of 33
    {{300, 257}, 0, 500},      // the first axis: one outer row, nothing to split
    {{3, 5}, 1, 4},            // small: one task
};

TEST(IndexAddRowsTest, F32MatchesTheReferenceLoop) {
  std::mt19937_64 rng(5);
  for (const Case& c : kCases) Check<float>(proto::F32, PrimitiveType::kF32, c, rng);
}

TEST(IndexAddRowsTest, Bf16MatchesTheReferenceLoop) {
  std::mt19937_64 rng(6);
  for (const Case& c : kCases) Check<uint16_t>(proto::BF16, PrimitiveType::kBF16, c, rng);
}

}  // namespace index_add_rows_test
}  // namespace lazyrt::pjrt
