#include "lazy/sharding.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lazy/diagnostics_internal.h"
#include "lazy/distributed_internal.h"
#include "lazy/runtime.h"
#include "lazy/tracing.h"

namespace lazyrt {
namespace {

// The number of devices a mesh of `shape` needs (sizes >= 1), saturated at a bound no runtime reaches.
int64_t DevicesNeeded(const std::vector<int64_t>& shape) {
  constexpr int64_t kBound = int64_t{1} << 32;
  int64_t product = 1;
  for (int64_t size : shape) product = std::min(product * std::min(size, kBound), kBound);
  return product;
}

void ValidateAxes(const std::vector<int64_t>& shape, const std::vector<std::string>& names, const SourceLocation& loc) {
  if (shape.empty()) throw Error("Mesh: the mesh needs at least one axis", loc);
  if (names.size() != shape.size()) {
    throw Error(absl::StrCat("Mesh: ", shape.size(), " axis sizes [", absl::StrJoin(shape, ","), "] but ", names.size(),
                             " axis names [", absl::StrJoin(names, ","), "]"),
                loc);
  }
  for (size_t a = 0; a < shape.size(); ++a) {
    if (shape[a] < 1) {
      throw Error(absl::StrCat("Mesh: axis '", names[a], "' has size ", shape[a], " (sizes must be at least 1)"), loc);
    }
    if (names[a].empty()) throw Error(absl::StrCat("Mesh: axis ", a, " has an empty name"), loc);
    if (std::find(names.begin(), names.begin() + static_cast<ptrdiff_t>(a), names[a]) !=
        names.begin() + static_cast<ptrdiff_t>(a)) {
      throw Error(absl::StrCat("Mesh: the axis name '", names[a], "' appears twice in [", absl::StrJoin(names, ","),
                               "] (names must be unique)"),
                  loc);
    }
  }
}

std::vector<int64_t> AllDevices(const std::vector<int64_t>& shape, const std::vector<std::string>& names,
                                const SourceLocation& loc) {
  ValidateAxes(shape, names, loc);
  const int available = detail::GlobalDeviceCount();
  const int64_t needed = DevicesNeeded(shape);
  if (needed != available) {
    throw Error(absl::StrCat("Mesh: a mesh of shape [", absl::StrJoin(shape, ","), "] needs ", needed,
                             " devices but this runtime has ", available,
                             " (the product of the shape must be the device count; set LAZYRT_DEVICES or "
                             "Options::devices, or give the mesh's device ids)"),
                loc);
  }
  std::vector<int64_t> ids(static_cast<size_t>(available));
  for (int d = 0; d < available; ++d) ids[static_cast<size_t>(d)] = d;
  return ids;
}

void Validate(const std::vector<int64_t>& shape, const std::vector<std::string>& names, const std::vector<int64_t>& ids,
              const SourceLocation& loc) {
  ValidateAxes(shape, names, loc);
  const int64_t needed = DevicesNeeded(shape);
  if (needed != static_cast<int64_t>(ids.size())) {
    throw Error(absl::StrCat("Mesh: a mesh of shape [", absl::StrJoin(shape, ","), "] needs ", needed,
                             " devices but was given ", ids.size(), " [", absl::StrJoin(ids, ","), "]"),
                loc);
  }
  const int available = detail::GlobalDeviceCount();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= available) {
      throw Error(absl::StrCat("Mesh: device ", ids[i], " does not exist; this runtime has ", available,
                               " device(s), 0 to ", available - 1),
                  loc);
    }
    if (std::find(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(i), ids[i]) !=
        ids.begin() + static_cast<ptrdiff_t>(i)) {
      throw Error(absl::StrCat("Mesh: device ", ids[i], " appears twice in [", absl::StrJoin(ids, ","), "]"), loc);
    }
  }
}

std::string SpecText(const PartitionSpec& spec) {
  return absl::StrCat("{",
                      absl::StrJoin(spec, ", ",
                                    [](std::string* out, const std::optional<std::string>& axis) {
                                      absl::StrAppend(out, axis ? absl::StrCat("\"", *axis, "\"") : "none");
                                    }),
                      "}");
}

}  // namespace

Mesh::Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names, SourceLocation loc)
    : Mesh(shape, axis_names, AllDevices(shape, axis_names, loc), loc) {}

Mesh::Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names, std::vector<int64_t> device_ids,
           SourceLocation loc)
    : shape_(std::move(shape)), axis_names_(std::move(axis_names)), device_ids_(std::move(device_ids)) {
  Validate(shape_, axis_names_, device_ids_, loc);
}

std::optional<int64_t> Mesh::axis_index(const std::string& name) const {
  auto it = std::find(axis_names_.begin(), axis_names_.end(), name);
  if (it == axis_names_.end()) return std::nullopt;
  return it - axis_names_.begin();
}

std::string Mesh::ToString() const {
  std::vector<std::string> axes;
  for (size_t a = 0; a < shape_.size(); ++a) axes.push_back(absl::StrCat(axis_names_[a], "=", shape_[a]));
  return absl::StrCat("{", absl::StrJoin(axes, ", "), "} on devices [", absl::StrJoin(device_ids_, ","), "]");
}

Tensor mark_sharding(const Tensor& tensor, const Mesh& mesh, const PartitionSpec& spec, SourceLocation loc) {
  detail::TensorImpl& impl = detail::ImplOf(tensor, "mark_sharding", loc);
  const int64_t rank = impl.shape.rank();
  const std::string where = absl::StrCat("a tensor of ", impl.shape.ToString(), " over mesh ", mesh.ToString());
  if (!spec.empty() && static_cast<int64_t>(spec.size()) != rank) {
    throw Error(absl::StrCat("mark_sharding: the spec ", SpecText(spec), " has ", spec.size(), " entries for ", where,
                             " (one per dim, ", rank, ", or none to replicate)"),
                loc);
  }
  std::vector<int64_t> dim_axes(static_cast<size_t>(rank), -1);
  for (size_t d = 0; d < spec.size(); ++d) {
    if (!spec[d]) continue;
    const std::optional<int64_t> axis = mesh.axis_index(*spec[d]);
    if (!axis) {
      throw Error(absl::StrCat("mark_sharding: dim ", d, " names the axis '", *spec[d], "', which ", where,
                               " does not have (axes: ", absl::StrJoin(mesh.axis_names(), ", "), ")"),
                  loc);
    }
    if (std::find(dim_axes.begin(), dim_axes.end(), *axis) != dim_axes.end()) {
      throw Error(absl::StrCat("mark_sharding: the axis '", *spec[d], "' splits two dims in ", SpecText(spec), " for ",
                               where, " (each axis splits at most one dim)"),
                  loc);
    }
    const int64_t pieces = mesh.shape()[static_cast<size_t>(*axis)];
    if (impl.shape.dim(static_cast<int64_t>(d)) % pieces != 0) {
      throw Error(absl::StrCat("mark_sharding: dim ", d, " of size ", impl.shape.dim(static_cast<int64_t>(d)),
                               " cannot be split into ", pieces, " equal pieces over axis '", *spec[d], "' of size ",
                               pieces, " (", where, ")"),
                  loc);
    }
    dim_axes[d] = *axis;
  }
  detail::RememberMeshAxisNames(mesh.shape(), mesh.device_ids(), mesh.axis_names());
  impl.sharding = ir::Attributes{{ir::AttrKey::kMeshShape, mesh.shape()},
                                 {ir::AttrKey::kMeshDevices, mesh.device_ids()},
                                 {ir::AttrKey::kShardAxes, std::move(dim_axes)}};
  if (impl.ir && impl.ir.node->op() != ir::OpKind::kDeviceData) impl.ir = detail::Sharded(impl.ir, impl);
  return tensor;
}

}  // namespace lazyrt
