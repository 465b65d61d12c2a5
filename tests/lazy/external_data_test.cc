// Tensor::FromExternal: host data a step reads in place, kept alive by its owner until no tensor or step
// needs it, with the values and errors of FromData.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "lazy/host_memory.h"
#include "lazy/metrics.h"
#include "lazy/nn.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace lazyrt {
namespace external_data_test {

using ::testing::AllOf;
using ::testing::HasSubstr;

template <typename T>
std::shared_ptr<const std::vector<T>> Shared(std::vector<T> values) {
  return std::make_shared<const std::vector<T>>(std::move(values));
}

TEST(ExternalData, ComputesAsTheSameValuesCopiedDo) {
  const auto x = Shared<float>({0.5f, -1.0f, 2.0f, 3.5f, -4.0f, 1.25f});
  const auto w = Shared<double>({1.0, 2.0, -1.0, 0.5, 3.0, -2.0});
  const auto labels = Shared<int64_t>({1, 0});
  const auto index = Shared<int32_t>({1, 0, 1});
  auto compute = [](const Tensor& x, const Tensor& w, const Tensor& labels, const Tensor& index) {
    const Tensor logits = matmul(x, cast(w, DType::kF32));
    return std::vector<Tensor>{nn::cross_entropy(logits, labels), index_select(logits, 0, index)};
  };
  const std::vector<Tensor> in_place =
      compute(Tensor::FromExternal(*x, {2, 3}, x), Tensor::FromExternal(*w, {3, 2}, w),
              Tensor::FromExternal(*labels, {2}, labels), Tensor::FromExternal(*index, {3}, index));
  const std::vector<Tensor> copied = compute(Tensor::FromData(*x, {2, 3}), Tensor::FromData(*w, {3, 2}),
                                             Tensor::FromData(*labels, {2}), Tensor::FromData(*index, {3}));
  sync();
  for (size_t i = 0; i < in_place.size(); ++i) {
    EXPECT_EQ(in_place[i].to_vector<float>(), copied[i].to_vector<float>()) << "result " << i;
  }
  EXPECT_EQ(Tensor::FromExternal(*x, {2, 3}, x).to_vector<float>(), *x);
}

// A HostVector starts on a huge page and is whole huge pages long (so that all of it can be huge); a step
// reads it in place like any host array.
TEST(ExternalData, AHostVectorIsOnHugePagesAndReadInPlace) {
  auto x = std::make_shared<HostVector<float>>(3 * 1000);
  for (size_t i = 0; i < x->size(); ++i) (*x)[i] = static_cast<float>(i % 7) - 3.0f;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x->data()) % pjrt::kHugePage, 0u);
  x->resize(3 * 1000 * 1000);  // reallocated: 12 MB, on huge pages too
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x->data()) % pjrt::kHugePage, 0u);
  EXPECT_EQ((*x)[2999], static_cast<float>(2999 % 7) - 3.0f);
  std::shared_ptr<const HostVector<float>> owner = x;
  const Tensor t = Tensor::FromExternal(std::span<const float>(x->data(), 6), {2, 3}, owner);
  EXPECT_EQ(sum(t * 2.0f).item(), 2.0 * (-3 - 2 - 1 + 0 + 1 + 2));
  EXPECT_THROW(HugePageAllocator<double>().allocate(SIZE_MAX / 4), std::bad_array_new_length);
}

// The data outlives the caller's last reference for as long as a tensor or a step still reads it.
TEST(ExternalData, TheOwnerIsHeldUntilNoTensorOrStepReadsTheData) {
  auto values = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  const std::weak_ptr<std::vector<float>> watch = values;
  Tensor doubled;
  {
    const Tensor x = Tensor::FromExternal(*values, {2, 2}, values);
    values.reset();
    doubled = x * 2.0;
  }
  EXPECT_FALSE(watch.expired()) << "the pending step reads the data";
  sync();
  EXPECT_EQ(doubled.to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
  wait_device();
  EXPECT_TRUE(watch.expired()) << "no tensor and no step reads the data any more";
}

// Data used in place is not a transfer; a copy is.
TEST(ExternalData, MovesNothingToTheDevice) {
  const auto x = Shared<float>({1, 2, 3});
  const int64_t before = CounterValue("transfers_to_device");
  const Tensor in_place = Tensor::FromExternal(*x, {3}, x);
  EXPECT_EQ(CounterValue("transfers_to_device"), before);
  const Tensor copied = Tensor::FromData(*x, {3});
  EXPECT_EQ(CounterValue("transfers_to_device"), before + 1);
}

TEST(ExternalData, ErrorsNameTheCallAndTheCaller) {
  const auto x = Shared<float>({1, 2, 3, 4, 5});
  int line = __LINE__ + 2;
  try {
    Tensor::FromExternal(*x, {2, 3}, x);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("FromExternal: 5 values do not fill f32[2,3]"),
                                HasSubstr("external_data_test.cc:" + std::to_string(line))));
  }
  line = __LINE__ + 2;
  try {
    Tensor::FromExternal(*x, {5}, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("FromExternal: no owner"), HasSubstr("external_data_test.cc:" + std::to_string(line))));
  }
  EXPECT_THROW(Tensor::FromExternal(*x, {-5}, x), Error);
}

}  // namespace external_data_test
}  // namespace lazyrt
