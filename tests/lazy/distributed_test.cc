// lazy/distributed.h in one process (the binary's runtime has 4 devices, sharding_test.cc): the
// environment is validated with errors naming the variable, and make_array_from_process_local_data of
// a whole batch is mark_sharding's layout. Several processes: tests/scripts/distributed.sh.
#include "lazy/distributed.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lazy/tracing.h"

namespace lazyrt {
namespace distributed_test {

using ::testing::AllOf;
using ::testing::HasSubstr;

using Vars = std::vector<std::pair<std::string, std::string>>;

// Sets the variables for the test's duration; restores (unsets) them after.
class Environment {
 public:
  explicit Environment(Vars vars) : vars_(std::move(vars)) {
    for (const auto& [name, value] : vars_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~Environment() {
    for (const auto& [name, value] : vars_) ::unsetenv(name.c_str());
  }
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

 private:
  Vars vars_;
};

std::string InitializeError() {
  try {
    distributed::initialize();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DistributedInitialize, RefusesAnIncompleteOrInvalidEnvironment) {
  {
    Environment env(Vars{{"LAZYRT_WORLD_SIZE", "2"}});
    EXPECT_THAT(InitializeError(), HasSubstr("a world of 2 processes but no rank: set LAZYRT_RANK"));
  }
  {
    Environment env(Vars{{"LAZYRT_WORLD_SIZE", "2"}, {"LAZYRT_RANK", "2"}});
    EXPECT_THAT(InitializeError(), HasSubstr("rank 2 is outside a world of 2 processes (ranks 0 to 1)"));
  }
  {
    Environment env(Vars{{"WORLD_SIZE", "2"}, {"RANK", "x1"}});
    EXPECT_THAT(InitializeError(), HasSubstr("RANK=x1 is not an integer in [0, 4095]"));
  }
  {
    Environment env(Vars{{"LAZYRT_WORLD_SIZE", "0"}});
    EXPECT_THAT(InitializeError(), HasSubstr("LAZYRT_WORLD_SIZE=0"));
  }
  {
    Environment env(Vars{{"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"MASTER_ADDR", "h"}});
    EXPECT_THAT(InitializeError(), AllOf(HasSubstr("rank 1 of 3 has no coordinator: set LAZYRT_COORDINATOR"),
                                         HasSubstr("MASTER_ADDR/MASTER_PORT need a TCP store")));
  }
  {
    Environment env(Vars{{"LAZYRT_WORLD_SIZE", "2"}, {"LAZYRT_RANK", "0"}, {"LAZYRT_COORDINATOR", "tcp://h:1"}});
    EXPECT_THAT(InitializeError(), HasSubstr("LAZYRT_COORDINATOR='tcp://h:1' is not file:///absolute/dir"));
  }
  // None of them joined a job.
  EXPECT_FALSE(distributed::initialized());
  EXPECT_EQ(distributed::world_size(), 1);
  EXPECT_EQ(distributed::rank(), 0);
}

TEST(DistributedInitialize, AWorldOfOneIsThisProcessAlone) {
  distributed::initialize();
  distributed::initialize();  // idempotent
  EXPECT_FALSE(distributed::initialized());
  EXPECT_EQ(distributed::world_size(), 1);
  EXPECT_EQ(distributed::collective_stats().calls, 0);
}

TEST(MakeArrayFromProcessLocalData, InOneProcessEachDeviceGetsItsRowsOfTheWholeArray) {
  Mesh mesh({4}, {"data"});
  std::vector<float> values(8 * 3);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 3.0f;
  Tensor local = Tensor::FromData(values, {8, 3});
  Tensor global = distributed::make_array_from_process_local_data(local, mesh, {"data", {}});
  EXPECT_EQ(global.dim(0), 8);
  EXPECT_EQ(global.dim(1), 3);
  const detail::TensorImpl& impl = detail::ImplOf(global, "test", SourceLocation::current());
  ASSERT_NE(impl.sharded, nullptr);
  ASSERT_EQ(impl.sharded->shards.size(), 4u);
  for (size_t p = 0; p < 4; ++p) {  // device p holds rows 2p and 2p + 1
    std::vector<float> piece(6);
    ASSERT_TRUE(impl.sharded->shards[p]->ToHost(piece.data(), piece.size() * 4).ok());
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(piece[i], values[p * 6 + i]) << "partition " << p;
  }
  // Used in a computation over the mesh, it is the whole array.
  Tensor doubled = global * 2.0;
  sync();
  const std::vector<float> got = doubled.to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(got[i], values[i] * 2.0f);
}

TEST(MakeArrayFromProcessLocalData, RefusesTwoSplitDims) {
  Mesh mesh({2, 2}, {"data", "model"});
  Tensor local = Tensor::FromData(std::vector<float>(16, 1.0f), {4, 4});
  try {
    distributed::make_array_from_process_local_data(local, mesh, {"data", "model"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("splits dims 0 and 1; at most one dim is split"));
  }
}

}  // namespace distributed_test
}  // namespace lazyrt
