#include "lazy/sharded_data.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lowering/dtype.h"

namespace lazyrt::detail {
namespace {

// The coordinates of partition p in the mesh (row-major).
std::vector<int64_t> MeshCoordinates(int64_t p, const std::vector<int64_t>& mesh_shape) {
  std::vector<int64_t> c(mesh_shape.size());
  for (size_t a = mesh_shape.size(); a-- > 0;) {
    c[a] = p % mesh_shape[a];
    p /= mesh_shape[a];
  }
  return c;
}

// Calls copy(global element index, local element index) for each element of partition p's piece of a
// global array of `dims` split as `dim_axes`.
template <typename Copy>
void ForEachPieceElement(const std::vector<int64_t>& dims, const std::vector<int64_t>& dim_axes,
                         const std::vector<int64_t>& mesh_shape, int64_t p, Copy&& copy) {
  const std::vector<int64_t> coords = MeshCoordinates(p, mesh_shape);
  std::vector<int64_t> local = dims;
  for (size_t d = 0; d < dim_axes.size(); ++d) {
    if (dim_axes[d] >= 0) local[d] /= mesh_shape[static_cast<size_t>(dim_axes[d])];
  }
  int64_t n = 1;
  for (int64_t s : local) n *= s;
  std::vector<int64_t> at(dims.size(), 0);  // the local coordinates of element i
  for (int64_t i = 0; i < n; ++i) {
    int64_t g = 0;
    for (size_t d = 0; d < dims.size(); ++d) {
      const int64_t offset =
          d < dim_axes.size() && dim_axes[d] >= 0 ? coords[static_cast<size_t>(dim_axes[d])] * local[d] : 0;
      g = g * dims[d] + offset + at[d];
    }
    copy(g, i);
    for (size_t d = dims.size(); d-- > 0;) {  // the next local coordinates, row-major
      if (++at[d] < local[d]) break;
      at[d] = 0;
    }
  }
}

}  // namespace

bool ShardedData::SameLayout(const std::vector<int64_t>& shape, const std::vector<int64_t>& devices,
                             const std::vector<int64_t>& axes) const {
  const bool replicated = std::all_of(axes.begin(), axes.end(), [](int64_t a) { return a < 0; });
  const bool mine_replicated = std::all_of(dim_axes.begin(), dim_axes.end(), [](int64_t a) { return a < 0; });
  return mesh_shape == shape && mesh_devices == devices && (replicated ? mine_replicated : dim_axes == axes);
}

std::vector<unsigned char> ShardBytes(const std::vector<unsigned char>& global, const std::vector<int64_t>& dims,
                                      int64_t width, const std::vector<int64_t>& dim_axes,
                                      const std::vector<int64_t>& mesh_shape, int64_t p) {
  int64_t pieces = 1;
  for (size_t d = 0; d < dim_axes.size(); ++d) {
    if (dim_axes[d] >= 0) pieces *= mesh_shape[static_cast<size_t>(dim_axes[d])];
  }
  std::vector<unsigned char> piece(global.size() / static_cast<size_t>(pieces));
  const size_t w = static_cast<size_t>(width);
  ForEachPieceElement(dims, dim_axes, mesh_shape, p, [&](int64_t g, int64_t l) {
    std::memcpy(piece.data() + static_cast<size_t>(l) * w, global.data() + static_cast<size_t>(g) * w, w);
  });
  return piece;
}

absl::StatusOr<std::vector<unsigned char>> AssembleOnHost(const ShardedData& data, const ir::Shape& shape) {
  std::vector<unsigned char> global(static_cast<size_t>(shape.byte_size()));
  const int64_t width = pjrt::ByteWidth(lowering::DeviceType(shape.dtype()));
  const std::vector<int64_t> dims(shape.dims().begin(), shape.dims().end());
  // Each piece from the first partition that holds it (the others hold the same: replicas).
  std::vector<int64_t> seen_pieces;
  int64_t pieces = 1;
  for (int64_t axis : data.dim_axes) {
    if (axis >= 0) pieces *= data.mesh_shape[static_cast<size_t>(axis)];
  }
  for (size_t p = 0; p < data.shards.size(); ++p) {
    if (data.shards[p] == nullptr) continue;  // a partition of another process
    const std::vector<int64_t> coords = MeshCoordinates(static_cast<int64_t>(p), data.mesh_shape);
    int64_t piece = 0;
    for (int64_t axis : data.dim_axes) {
      if (axis >= 0) piece = piece * data.mesh_shape[static_cast<size_t>(axis)] + coords[static_cast<size_t>(axis)];
    }
    if (std::find(seen_pieces.begin(), seen_pieces.end(), piece) != seen_pieces.end()) continue;
    seen_pieces.push_back(piece);
    const pjrt::Buffer& shard = *data.shards[p];
    std::vector<unsigned char> local(static_cast<size_t>(shard.shape().byte_size()));
    absl::Status read = shard.ToHost(local.data(), local.size());
    if (!read.ok()) return read;
    const size_t w = static_cast<size_t>(width);
    ForEachPieceElement(dims, data.dim_axes, data.mesh_shape, static_cast<int64_t>(p), [&](int64_t g, int64_t l) {
      std::memcpy(global.data() + static_cast<size_t>(g) * w, local.data() + static_cast<size_t>(l) * w, w);
    });
  }
  if (static_cast<int64_t>(seen_pieces.size()) != pieces) {
    return absl::FailedPreconditionError(
        absl::StrCat("only ", seen_pieces.size(), " of the ", pieces,
                     " pieces of the value are in this process (the others are other ranks')"));
  }
  return global;
}

}  // namespace lazyrt::detail
