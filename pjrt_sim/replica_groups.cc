#include "pjrt_sim/replica_groups.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lazyrt::pjrt {

absl::StatusOr<ReplicaGroups> CheckReplicaGroups(const google::protobuf::RepeatedPtrField<proto::ReplicaGroup>& groups,
                                                 int64_t num_partitions) {
  if (num_partitions < 0 || num_partitions > kMaxPartitions) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_partitions ", num_partitions, " is outside [0, ", kMaxPartitions, "]"));
  }
  const int64_t n = std::max<int64_t>(num_partitions, 1);
  ReplicaGroups out;
  if (groups.empty()) {
    out.emplace_back(static_cast<size_t>(n));
    std::iota(out[0].begin(), out[0].end(), int64_t{0});
    return out;
  }
  if (static_cast<int64_t>(groups.size()) > n) {
    return absl::InvalidArgumentError(absl::StrCat(groups.size(), " replica groups for ", n, " partitions"));
  }
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (const proto::ReplicaGroup& group : groups) {
    if (group.partitions_size() != groups[0].partitions_size() || group.partitions_size() == 0) {
      return absl::InvalidArgumentError("replica groups must be non-empty and of one size");
    }
    std::vector<int64_t>& members = out.emplace_back();
    for (int64_t p : group.partitions()) {
      if (p < 0 || p >= n) {
        return absl::InvalidArgumentError(
            absl::StrCat("replica group member ", p, " is not a partition in [0, ", n, ")"));
      }
      if (seen[static_cast<size_t>(p)]) {
        return absl::InvalidArgumentError(absl::StrCat("partition ", p, " is in more than one replica group"));
      }
      seen[static_cast<size_t>(p)] = true;
      members.push_back(p);
    }
  }
  if (const auto missing = std::find(seen.begin(), seen.end(), false); missing != seen.end()) {
    return absl::InvalidArgumentError(absl::StrCat("partition ", missing - seen.begin(), " is in no replica group"));
  }
  return out;
}

GroupPosition FindPartition(const ReplicaGroups& groups, int64_t partition) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto it = std::find(groups[g].begin(), groups[g].end(), partition);
    if (it != groups[g].end()) return {static_cast<int64_t>(g), it - groups[g].begin()};
  }
  return {};  // unreachable for checked groups: every partition is in one
}

absl::StatusOr<std::vector<int64_t>> CollectiveResultDims(Opcode op, std::span<const int64_t> operand_dims,
                                                          int64_t axis, int64_t concat_axis, int64_t group_size) {
  std::vector<int64_t> dims(operand_dims.begin(), operand_dims.end());
  const int64_t rank = static_cast<int64_t>(dims.size());
  auto in_range = [&](int64_t a, const char* what) -> absl::Status {
    if (a >= 0 && a < rank) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(what, " ", a, " is out of range for rank ", rank));
  };
  auto split = [&](int64_t a, const char* what) -> absl::Status {
    if (absl::Status s = in_range(a, what); !s.ok()) return s;
    if (group_size <= 0 || dims[static_cast<size_t>(a)] % group_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", a, " of size ", dims[static_cast<size_t>(a)],
                                                     " does not split into ", group_size,
                                                     " equal pieces (the group size)"));
    }
    dims[static_cast<size_t>(a)] /= group_size;
    return absl::OkStatus();
  };
  auto grow = [&](int64_t a, const char* what) -> absl::Status {
    if (absl::Status s = in_range(a, what); !s.ok()) return s;
    if (dims[static_cast<size_t>(a)] > (int64_t{1} << 40) / std::max<int64_t>(group_size, 1)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", a, " grows too large"));
    }
    dims[static_cast<size_t>(a)] *= group_size;
    return absl::OkStatus();
  };
  absl::Status status = absl::OkStatus();
  if (op == Opcode::kAllGather) {
    status = grow(axis, "axis");
  } else if (op == Opcode::kReduceScatter || op == Opcode::kPartitionSlice) {
    status = split(axis, "axis");
  } else if (op == Opcode::kAllToAll) {
    status = split(axis, "split dimension");
    if (status.ok()) status = grow(concat_axis, "concat dimension");
  } else if (op != Opcode::kAllReduce) {
    status = absl::InvalidArgumentError(absl::StrCat(OpcodeName(op), " is not a collective"));
  }
  if (!status.ok()) return status;
  return dims;
}

std::string ReplicaGroupsText(const ReplicaGroups& groups) {
  return absl::StrJoin(groups, ",", [](std::string* out, const std::vector<int64_t>& group) {
    absl::StrAppend(out, "{", absl::StrJoin(group, ","), "}");
  });
}

}  // namespace lazyrt::pjrt
