// The resharding view of diagnostics: the collectives an SPMD executable runs every step that another
// layout of a value would avoid (the partitioner's Resharding records, see pjrt_sim/spmd_partitioner.h), as
// findings naming the line that created the value, the layout it had, the one its consumer needed and
// the mark_sharding() that would avoid the collective. Recorded once per executable (its first run names
// the values by its graph; a cache hit carries the records too), counted at every run.
#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/graph_signature.h"
#include "lazy/diagnostics_internal.h"
#include "lazy/diagnostics_stacks.h"
#include "lazy/runtime.h"
#include "pjrt_sim/device.h"
#include "pjrt_sim/hlo.h"

namespace lazyrt::detail {
namespace {

// Executables whose reshardings are tracked; a program compiling more is reported for the first.
constexpr size_t kMaxExecutables = 256;

using MeshKey = std::pair<std::vector<int64_t>, std::vector<int64_t>>;  // shape, device ids

// One record, named: the finding without its count.
struct Named {
  pjrt::proto::Resharding record;
  std::string location;            // where the value was created
  std::vector<std::string> stack;  // the user's frames of that place, when captured
  std::string consumer_location;   // where its consumer was created ("" when unknown)
};

struct Executable {
  std::vector<Named> reshardings;
  std::vector<int64_t> mesh_shape;
  std::vector<std::string> axis_names;
  int64_t runs = 0;
};

struct ReshardingLog {
  std::mutex mu;
  std::map<MeshKey, std::vector<std::string>> axis_names;
  std::map<uint64_t, Executable> executables;  // by graph key
};

ReshardingLog& GetReshardingLog() {
  static ReshardingLog* s = new ReshardingLog;  // never destroyed: the exit sync records after static destructors
  return *s;
}

// Where node `origin` (a post-order position plus 1) of `order` was created: the user's line, or for a
// node lazyrt made inside a helper (an nn layer's weight), the user's frame that called it.
void NameOrigin(const ir::PostOrder& order, int64_t origin, std::string& location, std::vector<std::string>* stack) {
  if (origin < 1 || origin > static_cast<int64_t>(order.size())) return;
  const ir::Node& node = *order.nodes()[static_cast<size_t>(origin - 1)];
  location = ir::LocationText(node.created_at());
  std::vector<std::string> frames = UserFrames(node.creation_context());
  if (InLazyrt(location) && !frames.empty()) location = frames.front();
  if (stack != nullptr) *stack = std::move(frames);
}

std::vector<int64_t> AxesOf(const pjrt::proto::Sharding& s, size_t rank) {
  if (s.dim_axes().empty()) return std::vector<int64_t>(rank, -1);
  return {s.dim_axes().begin(), s.dim_axes().end()};
}

std::string AxisName(const std::vector<std::string>& names, int64_t axis) {
  return axis >= 0 && axis < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(axis)]
                                                                : absl::StrCat("axis", axis);
}

// The PartitionSpec a mark_sharding() call would take: {"data", {}}; {} when replicated.
std::string SpecText(const std::vector<int64_t>& axes, const std::vector<std::string>& names) {
  if (std::all_of(axes.begin(), axes.end(), [](int64_t a) { return a < 0; })) return "{}";
  return absl::StrCat("{",
                      absl::StrJoin(axes, ", ",
                                    [&](std::string* out, int64_t a) {
                                      absl::StrAppend(out, a < 0 ? "{}" : absl::StrCat("\"", AxisName(names, a), "\""));
                                    }),
                      "}");
}

// The bytes of one device's piece of a value of `shape` laid out as `axes` over a mesh of `mesh_shape`.
int64_t PieceBytes(const pjrt::proto::Shape& shape, const std::vector<int64_t>& axes,
                   const std::vector<int64_t>& mesh_shape) {
  int64_t elements = 1;
  for (int d = 0; d < shape.dims_size(); ++d) {
    const int64_t a = axes[static_cast<size_t>(d)];
    elements *= a >= 0 && a < static_cast<int64_t>(mesh_shape.size())
                    ? shape.dims(d) / mesh_shape[static_cast<size_t>(a)]
                    : shape.dims(d);
  }
  return elements * pjrt::ByteWidth(pjrt::FromProto(shape.type()));
}

std::string ShapeText(const pjrt::proto::Shape& shape) {
  return absl::StrCat(pjrt::PrimitiveTypeName(pjrt::FromProto(shape.type())), "[", absl::StrJoin(shape.dims(), ","),
                      "]");
}

// What the finding says, and the layout that avoids the collective.
struct Advice {
  std::string had, needed, suggestion, text;
};

Advice AdviceFor(const Named& n, const Executable& exe) {
  const pjrt::proto::Resharding& r = n.record;
  const size_t rank = static_cast<size_t>(r.shape().dims_size());
  const std::vector<int64_t> had = AxesOf(r.had(), rank), needed = AxesOf(r.needed(), rank);
  Advice a;
  a.had = SpecText(had, exe.axis_names);
  a.needed = SpecText(needed, exe.axis_names);
  const std::string gathered = pjrt::HumanBytes(r.bytes_per_partition());
  const std::string consumer =
      n.consumer_location.empty() ? r.consumer() : absl::StrCat(r.consumer(), " created at ", n.consumer_location);
  const std::string value = absl::StrCat(ShapeText(r.shape()), " created at ", n.location);
  if (r.kind() == pjrt::proto::Resharding::PARAMETER) {
    a.suggestion = absl::StrCat("mark_sharding(tensor, mesh, ", a.needed, ")");
    a.text = absl::StrCat(
        "the tensor ", value, " enters each step split as ", a.had, " but the ", consumer, " needs it as ", a.needed,
        ": it is all-gathered every step, ", gathered, " received by each device. Lay it out as its consumer needs, ",
        a.suggestion, " (", pjrt::HumanBytes(PieceBytes(r.shape(), needed, exe.mesh_shape)),
        " held per device instead of ", pjrt::HumanBytes(PieceBytes(r.shape(), had, exe.mesh_shape)),
        ", nothing gathered), unless it is split to save memory (FSDP-style), which costs this gather.");
  } else if (r.consumer() == "sharding annotation") {
    a.suggestion = absl::StrCat("mark_sharding(tensor, mesh, ", a.had, ")");
    a.text = absl::StrCat("the value ", value, " is computed split as ", a.had, " but its mark_sharding() asks for ",
                          a.needed, ": every step it is all-gathered (", gathered,
                          " received by each device) and sliced again. Annotate it as it is computed, ", a.suggestion,
                          ", or split its inputs so that it is computed as ", a.needed, ".");
  } else {
    a.suggestion = absl::StrCat("mark_sharding(tensor, mesh, ", a.needed, ")");
    const bool exchanged = r.kind() == pjrt::proto::Resharding::EXCHANGED;
    a.text = absl::StrCat(
        "the value ", value, " is computed split as ", a.had, " but the ", consumer, " needs it as ", a.needed,
        exchanged ? ": every step its pieces are exchanged all-to-all (" : ": every step it is all-gathered (",
        gathered, exchanged ? " received by each device). " : " received by each device) and sliced again. ",
        "Have it computed as its consumer needs: ", a.suggestion, " where it is created.");
  }
  return a;
}

}  // namespace

void RememberMeshAxisNames(const std::vector<int64_t>& shape, const std::vector<int64_t>& devices,
                           const std::vector<std::string>& names) {
  ReshardingLog& s = GetReshardingLog();
  std::lock_guard<std::mutex> lock(s.mu);
  s.axis_names[{shape, devices}] = names;
}

void RecordReshardings(uint64_t graph_key, const pjrt::proto::Executable& exe, const ir::PostOrder& order) {
  if (exe.reshardings().empty()) return;
  ReshardingLog& s = GetReshardingLog();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.executables.find(graph_key);
  if (it != s.executables.end()) {
    ++it->second.runs;
    return;
  }
  if (s.executables.size() >= kMaxExecutables) return;
  Executable& e = s.executables[graph_key];
  e.runs = 1;
  e.mesh_shape.assign(exe.mesh().shape().begin(), exe.mesh().shape().end());
  const std::vector<int64_t> devices(exe.mesh().device_ids().begin(), exe.mesh().device_ids().end());
  auto names = s.axis_names.find({e.mesh_shape, devices});
  if (names != s.axis_names.end()) e.axis_names = names->second;
  for (const pjrt::proto::Resharding& r : exe.reshardings()) {
    Named& n = e.reshardings.emplace_back();
    n.record = r;
    n.location = "(unknown)";
    NameOrigin(order, r.origin(), n.location, &n.stack);
    NameOrigin(order, r.consumer_origin(), n.consumer_location, nullptr);
    if (Runtime::Get().options().debug >= 1) DebugLine(absl::StrCat("warning: resharding: ", AdviceFor(n, e).text));
  }
}

void AddReshardingFindings(std::vector<Finding>& out) {
  ReshardingLog& s = GetReshardingLog();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const auto& [key, e] : s.executables) {
    for (const Named& n : e.reshardings) {
      Advice a = AdviceFor(n, e);
      Finding f;
      f.kind = FindingKind::kResharding;
      f.severity = e.runs >= 2 ? Severity::kWarning : Severity::kInfo;  // repeated every step, or a one-off
      f.location = n.location;
      f.stack = n.stack;
      f.count = e.runs;
      f.sharding = std::move(a.had);
      f.needed = std::move(a.needed);
      f.suggestion = std::move(a.suggestion);
      f.bytes_per_step = n.record.bytes_per_partition();
      f.message = absl::StrCat(a.text, " Seen in ", e.runs, " step(s).");
      out.push_back(std::move(f));
    }
  }
}

}  // namespace lazyrt::detail
