// Many devices, one program: a device mesh and sharding annotations, in the spirit of JAX's Mesh and
// PartitionSpec and torch_xla's SPMD. The program keeps the global view (ops on a sharded tensor trace as on
// one big tensor); the compiler's SPMD partitioner splits the graph over the mesh and inserts the
// collectives it needs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lazy/tensor.h"

namespace lazyrt {

// A grid of the runtime's devices with named axes: Mesh({4}, {"data"}), Mesh({2, 2}, {"data", "model"}).
// Partition p (row-major over the grid) runs on device_ids()[p].
class Mesh {
 public:
  // Over all the runtime's devices lazy:0 ... lazy:N-1, whose number must be the product of `shape`.
  Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names, LAZYRT_HERE);
  // Over the given devices, each once, as many as the product of `shape`.
  Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names, std::vector<int64_t> device_ids, LAZYRT_HERE);

  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return axis_names_; }
  const std::vector<int64_t>& device_ids() const { return device_ids_; }
  int64_t size() const { return static_cast<int64_t>(device_ids_.size()); }
  // The index of the axis called `name`, or nullopt.
  std::optional<int64_t> axis_index(const std::string& name) const;
  // "{data=2, model=2} on lazy:0..3"
  std::string ToString() const;

  friend bool operator==(const Mesh&, const Mesh&) = default;

 private:
  std::vector<int64_t> shape_;
  std::vector<std::string> axis_names_;
  std::vector<int64_t> device_ids_;
};

// For each dim of a tensor, the mesh axis it is split over, or none ({} / std::nullopt) when every device
// holds the whole dim: {"data", {}} splits dim 0 over "data" and keeps dim 1 whole. Empty: replicated.
using PartitionSpec = std::vector<std::optional<std::string>>;

// Lays `tensor` out over `mesh` as `spec` says, in place (torch_xla's mark_sharding), and returns it: its
// value and every later use of it are sharded. The spec has one entry per dim (or none), names axes of the
// mesh, each at most once, and each split dim's size is divisible by its axis' size.
Tensor mark_sharding(const Tensor& tensor, const Mesh& mesh, const PartitionSpec& spec, LAZYRT_HERE);

}  // namespace lazyrt
