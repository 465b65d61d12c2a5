// The data of a tensor laid out over a mesh: one buffer per partition (partition p on the mesh's p-th
// device), each the piece of the global value the layout gives that partition. Internal to lazy/.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ir/shape.h"
#include "pjrt_sim/buffer.h"

namespace lazyrt::detail {

struct ShardedData {
  std::vector<int64_t> mesh_shape;
  std::vector<int64_t> mesh_devices;
  // For each dim of the global value, the mesh axis it is split over, or -1 (none: replicated).
  std::vector<int64_t> dim_axes;
  std::vector<std::shared_ptr<pjrt::Buffer>> shards;  // by partition; null: another process's

  // Whether `other` describes the same layout (then shards can be passed on as they are).
  bool SameLayout(const std::vector<int64_t>& shape, const std::vector<int64_t>& devices,
                  const std::vector<int64_t>& axes) const;
};

// Partition p's piece of a global row-major array of `dims` with elements of `width` bytes, split as
// `dim_axes` (empty: replicated) over a mesh of `mesh_shape`.
std::vector<unsigned char> ShardBytes(const std::vector<unsigned char>& global, const std::vector<int64_t>& dims,
                                      int64_t width, const std::vector<int64_t>& dim_axes,
                                      const std::vector<int64_t>& mesh_shape, int64_t p);
// The global value of `data` (of global `shape`), read from its shards.
absl::StatusOr<std::vector<unsigned char>> AssembleOnHost(const ShardedData& data, const ir::Shape& shape);

}  // namespace lazyrt::detail
