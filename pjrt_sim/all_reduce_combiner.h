// Gradient bucketing: combines independent ALL_REDUCEs into one collective, as PyTorch DDP's buckets
// and XLA's AllReduceCombiner do. A data-parallel step all-reduces every gradient; each collective
// pays the communicator's latency (a rendezvous in process, a round trip on Gloo) whatever its size,
// so one collective over all the gradients costs about what one over the smallest does.
#pragma once

#include <cstdint>

#include "pjrt_sim/hlo.h"

namespace lazyrt::pjrt {

// The default bucket bound (PyTorch DDP's is 25 MB, XLA's 30 MB), and the largest accepted: a bucket
// that big already pays its latency once per 4 GiB.
inline constexpr int64_t kDefaultAllReduceCombineBytes = int64_t{32} << 20;
inline constexpr int64_t kMaxAllReduceCombineBytes = int64_t{4} << 30;

// Replaces ALL_REDUCEs with the same combiner, element type and replica groups, none depending on
// another's result, by one ALL_REDUCE of their operands flattened and concatenated (at most
// `threshold_bytes` of operands each; 0 combines nothing), whose result is sliced and reshaped back.
// Each element is still the combination of the members' same element in member order: the bits do
// not change. The combined collective runs once all its operands are computed (instructions are
// reordered, stably, so that operands stay before users); the replaced ALL_REDUCEs are left dead.
// Returns how many ALL_REDUCEs fewer the module runs.
int64_t CombineAllReduces(HloModule& module, int64_t threshold_bytes);

}  // namespace lazyrt::pjrt
