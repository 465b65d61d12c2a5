// Replica groups: which partitions of a partitioned module take part in one collective together.
// Checked the same way by the module verifier and by the executable loader.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "pjrt_sim/module.pb.h"
#include "pjrt_sim/opcode.h"

namespace lazyrt::pjrt {

// The most partitions a module may have: far above any mesh of simulated devices, and small enough
// that a group of every partition is a cheap vector.
inline constexpr int64_t kMaxPartitions = 4096;

using ReplicaGroups = std::vector<std::vector<int64_t>>;

// The groups of a collective in a module of `num_partitions` (0 and 1 both mean one) partitions: an
// empty list is one group of all partitions in order. INVALID_ARGUMENT, saying which rule was broken,
// unless every partition in [0, num_partitions) is in exactly one group and all groups have one size.
absl::StatusOr<ReplicaGroups> CheckReplicaGroups(const google::protobuf::RepeatedPtrField<proto::ReplicaGroup>& groups,
                                                 int64_t num_partitions);

// Where `partition` sits: its group's index and its position in that group (groups as checked above).
struct GroupPosition {
  int64_t group = 0;
  int64_t rank = 0;
};
GroupPosition FindPartition(const ReplicaGroups& groups, int64_t partition);

// The per-partition result dims of collective `op` over groups of `group_size` on an operand of
// `operand_dims` (`axis`: the gathered, scattered or sliced dim, ALL_TO_ALL's split dim; `concat_axis`:
// ALL_TO_ALL's concat dim). INVALID_ARGUMENT for an axis out of range or a dim that does not split into
// group_size equal pieces.
absl::StatusOr<std::vector<int64_t>> CollectiveResultDims(Opcode op, std::span<const int64_t> operand_dims,
                                                          int64_t axis, int64_t concat_axis, int64_t group_size);

// "{0,1},{2,3}"
std::string ReplicaGroupsText(const ReplicaGroups& groups);

}  // namespace lazyrt::pjrt
