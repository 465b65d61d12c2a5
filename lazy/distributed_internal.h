// What the rest of lazy/ needs from the distributed runtime (lazy/distributed.h). Internal.
#pragma once

#include <cstdint>

#include "ir/hash.h"
#include "ir/post_order.h"
#include "lazy/error.h"
#include "pjrt_sim/communicator.h"
#include "pjrt_sim/device.h"

namespace lazyrt::detail {

class Runtime;

// The devices of the global mesh: every process's local devices (this process's alone before
// distributed::initialize()).
int GlobalDeviceCount();
// Global device `id` when it is one of this process's devices, else nullptr (it lives on another rank).
pjrt::Device* LocalDevice(Runtime& rt, int64_t id);
// The communicator between processes, or nullptr in a job of one process.
pjrt::Communicator* CrossProcessCommunicator();
// Before each cross-process execution: every rank must be about to run the same graph. Exchanges
// (execution number, graph key) with every rank; on a mismatch throws an Error naming both ranks' keys
// and the first differing node's op and creation site on each.
void AgreeOnGraph(ir::HashValue key, const ir::PostOrder& order, const SourceLocation& loc);

}  // namespace lazyrt::detail
