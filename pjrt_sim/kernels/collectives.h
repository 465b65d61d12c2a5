// The COLLECTIVE kernel: one of ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, PARTITION_SLICE run
// by one partition. It lays its operand out as the contiguous pieces a Communicator takes (and its
// result back from them), and calls the execution's Communicator; a group of one moves nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/kernels/kernels.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

// Validates `kernel` (opcode, combiner, replica groups of `num_partitions`, axes, shapes) and builds it.
absl::StatusOr<std::unique_ptr<Kernel>> BuildCollectiveKernel(const proto::Kernel& kernel,
                                                              std::span<const ArrayShape> inputs,
                                                              const ArrayShape& output, int64_t num_partitions);

}  // namespace lazyrt::pjrt
