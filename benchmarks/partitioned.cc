// One partitioned executable on N simulated devices sharing this machine's cores: each partition
// multiplies its own [256x256] matrices and the products are summed by ALL_REDUCE, so the work grows
// with N. On a machine of C cores, N partitions should take about N/C times one partition's time (the
// devices share the one kernel pool); more means the partitions' threads fight over the cores.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "pjrt_sim/client.h"
#include "pjrt_sim/compiler.h"
#include "pjrt_sim/executable.h"
#include "pjrt_sim/module.pb.h"
#include "pjrt_sim/opcode.h"

namespace {

using lazyrt::pjrt::Buffer;
using lazyrt::pjrt::Opcode;
namespace proto = lazyrt::pjrt::proto;

constexpr int64_t kSize = 256;

proto::Instruction* Add(proto::Module& m, Opcode op, std::vector<int64_t> operands) {
  proto::Instruction* inst = m.add_instructions();
  inst->set_opcode(static_cast<int32_t>(op));
  for (int64_t o : operands) inst->add_operands(o);
  inst->mutable_shape()->set_type(proto::F32);
  inst->mutable_shape()->add_dims(kSize);
  inst->mutable_shape()->add_dims(kSize);
  return inst;
}

void BM_PartitionedGemmAllReduce(benchmark::State& state) {
  const int partitions = static_cast<int>(state.range(0));
  auto client = lazyrt::pjrt::Client::Create({.num_devices = partitions});
  proto::Module m;
  m.set_name("gemm_all_reduce");
  m.set_num_partitions(partitions);
  Add(m, Opcode::kParameter, {})->set_parameter_number(0);
  Add(m, Opcode::kParameter, {})->set_parameter_number(1);
  Add(m, Opcode::kDot, {0, 1});
  Add(m, Opcode::kAllReduce, {2});
  m.add_outputs(3);
  auto exe = (*client)->Compile(m, {});
  if (!exe.ok()) {
    state.SkipWithError(std::string(exe.status().message()).c_str());
    return;
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> data(kSize * kSize);
  for (float& x : data) x = dist(rng);
  std::vector<std::vector<std::shared_ptr<Buffer>>> args(static_cast<size_t>(partitions));
  for (int p = 0; p < partitions; ++p) {
    for (int i = 0; i < 2; ++i) {
      args[static_cast<size_t>(p)].push_back(*(*client)->BufferFromHost(
          data.data(), {lazyrt::pjrt::PrimitiveType::kF32, {kSize, kSize}}, (*client)->device(p)));
    }
  }
  for (auto _ : state) {
    auto results = (*exe)->ExecutePartitioned(args, (*client)->devices());
    for (const auto& partition : *results) {
      if (!partition[0]->AwaitReady().ok()) state.SkipWithError("execution failed");
    }
  }
  state.counters["partitions"] = partitions;
}
BENCHMARK(BM_PartitionedGemmAllReduce)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
