// Collectives on the Chrome trace (a track per device), and the collective timeout setting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "lazy/diagnostics.h"
#include "lazy/options.h"
#include "pjrt_sim/client.h"
#include "pjrt_sim/module.pb.h"
#include "pjrt_sim/opcode.h"

namespace lazyrt {
namespace collective_trace_test {

using ::testing::HasSubstr;

TEST(CollectiveTrace, EachPartitionsCollectiveIsASpanOnItsDevicesTrack) {
  auto client = pjrt::Client::Create({.num_devices = 2, .device_memory_bytes = int64_t{1} << 26});
  ASSERT_TRUE(client.ok()) << client.status();
  pjrt::proto::Module m;
  m.set_name("trace_all_reduce");
  m.set_num_partitions(2);
  for (pjrt::Opcode op : {pjrt::Opcode::kParameter, pjrt::Opcode::kAllReduce}) {
    pjrt::proto::Instruction* inst = m.add_instructions();
    inst->set_opcode(static_cast<int32_t>(op));
    inst->mutable_shape()->set_type(pjrt::proto::F32);
    inst->mutable_shape()->add_dims(4);
    if (op == pjrt::Opcode::kAllReduce) inst->add_operands(0);
  }
  m.add_outputs(1);
  auto exe = (*client)->Compile(m, {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  const float data[4] = {1, 2, 3, 4};
  std::vector<std::vector<std::shared_ptr<pjrt::Buffer>>> args(2);
  for (int p = 0; p < 2; ++p) {
    auto b = (*client)->BufferFromHost(data, {pjrt::PrimitiveType::kF32, {4}}, (*client)->device(p));
    ASSERT_TRUE(b.ok());
    args[static_cast<size_t>(p)] = {*b};
  }
  auto results = (*exe)->ExecutePartitioned(args, (*client)->devices());
  ASSERT_TRUE(results.ok()) << results.status();
  float sum[4];
  ASSERT_TRUE((*results)[1][0]->ToHost(sum, sizeof(sum)).ok());
  EXPECT_EQ(sum[3], 8);
  ASSERT_TRUE((*results)[0][0]->AwaitReady().ok());

  const std::string path = ::testing::TempDir() + "collective_trace.json";
  write_trace(path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  for (int d = 0; d < 2; ++d) {
    EXPECT_THAT(text.str(), HasSubstr("\"name\":\"device " + std::to_string(d) + " collectives\""));
    EXPECT_THAT(text.str(), HasSubstr("\"args\":{\"device\":" + std::to_string(d) + "}"));
  }
  EXPECT_THAT(text.str(), HasSubstr("all_reduce 'all_reduce(parameter)' (kernel 0)"));
}

TEST(CollectiveTrace, TimeoutIsASetting) {
  Options o;
  EXPECT_EQ(o.collective_timeout_ms, 60'000);
  ASSERT_TRUE(o.Set("LAZYRT_COLLECTIVE_TIMEOUT_MS", "250").ok());
  EXPECT_EQ(o.collective_timeout_ms, 250);
  EXPECT_THAT(std::string(o.Set("LAZYRT_COLLECTIVE_TIMEOUT_MS", "soon").message()),
              HasSubstr("LAZYRT_COLLECTIVE_TIMEOUT_MS=soon"));
}

}  // namespace collective_trace_test
}  // namespace lazyrt
