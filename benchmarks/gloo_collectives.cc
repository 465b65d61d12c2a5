// The cost of GlooCommunicator's collectives over TCP on this host: members are threads, each with a
// communicator of its own (as processes have), meeting through a Gloo HashStore. Gives the latency
// and bandwidth of the cost model in benchmarks/RESULTS.md ("Data parallel across processes").
#include <benchmark/benchmark.h>

#include <memory>
#include <thread>
#include <vector>

#include "gloo/rendezvous/hash_store.h"
#include "pjrt_sim/client.h"
#include "pjrt_sim/gloo_communicator.h"

namespace lazyrt::pjrt {
namespace {

// ALL_REDUCE (sum, f32) of state.range(1) elements over state.range(0) members, timed as the slowest
// member's wall time per call.
void BM_GlooAllReduce(benchmark::State& state) {
  const int members = static_cast<int>(state.range(0));
  const int64_t count = state.range(1);
  auto client = *Client::Create({.num_devices = members, .device_memory_bytes = int64_t{1} << 30});
  auto store = std::make_shared<::gloo::rendezvous::HashStore>();
  std::vector<std::unique_ptr<GlooCommunicator>> comms;
  std::vector<DeviceMemory> send, recv;
  for (int r = 0; r < members; ++r) {
    comms.push_back(std::make_unique<GlooCommunicator>(store, "127.0.0.1", std::chrono::seconds(60)));
    send.push_back(*client->device(r)->Allocate(count * 4));
    recv.push_back(*client->device(r)->Allocate(count * 4));
  }
  std::vector<int64_t> group(static_cast<size_t>(members));
  for (int r = 0; r < members; ++r) group[static_cast<size_t>(r)] = r;
  uint64_t run = 0;
  auto once = [&] {
    ++run;
    std::vector<std::thread> threads;
    for (int r = 0; r < members; ++r) {
      threads.emplace_back([&, r] {
        const CollectiveCall call{run, 0, group, r, client->devices(), "all_reduce 'bench' (kernel 0)"};
        const size_t m = static_cast<size_t>(r);
        (void)comms[m]->AllReduce(call, PrimitiveType::kF32, Combiner::kSum, count, send[m].data(), recv[m].data());
      });
    }
    for (std::thread& t : threads) t.join();
  };
  once();  // the group's connections
  for (auto _ : state) once();
  state.SetBytesProcessed(state.iterations() * count * 4);
}
BENCHMARK(BM_GlooAllReduce)
    ->ArgsProduct({{2, 4}, {1, 1 << 10, 1 << 16, 1 << 20}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace lazyrt::pjrt

BENCHMARK_MAIN();
