#include "pjrt_sim/kernels/collectives.h"

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pjrt_sim/collective_trace.h"
#include "pjrt_sim/communicator.h"
#include "pjrt_sim/device.h"
#include "pjrt_sim/replica_groups.h"
#include "pjrt_sim/status_macros.h"

namespace lazyrt::pjrt {
namespace {

// Memory for the contiguous pieces a communicator takes: from the partition's device (so it is counted
// there like any other), or from the host for a run on no device.
class Staging {
 public:
  static absl::StatusOr<Staging> Make(const PartitionContext& where, int64_t bytes) {
    Staging s;
    if (where.partition < static_cast<int64_t>(where.devices.size())) {
      ASSIGN_OR_RETURN(s.device_, where.devices[static_cast<size_t>(where.partition)]->Allocate(bytes));
      s.data_ = s.device_.data();
    } else {
      s.host_.resize(static_cast<size_t>(bytes));
      s.data_ = s.host_.data();
    }
    return s;
  }
  void* data() const { return data_; }

 private:
  DeviceMemory device_;
  std::vector<char> host_;
  void* data_ = nullptr;
};

// [outer, pieces * n, inner] -> [pieces, outer, n, inner]: piece g of the array along the axis becomes
// the g-th contiguous block.
void SplitPieces(const void* src, const AxisSplit& a, int64_t pieces, int64_t width, void* dst) {
  const int64_t n = a.size / pieces;
  const int64_t run = n * a.inner * width;
  for (int64_t g = 0; g < pieces; ++g) {
    for (int64_t o = 0; o < a.outer; ++o) {
      std::memcpy(static_cast<char*>(dst) + (g * a.outer + o) * run,
                  static_cast<const char*>(src) + (o * a.size + g * n) * a.inner * width, static_cast<size_t>(run));
    }
  }
}

// The inverse, from blocks of `piece` ([outer, n, inner]) to [outer, pieces * n, inner].
void JoinPieces(const void* src, const AxisSplit& piece, int64_t pieces, int64_t width, void* dst) {
  const int64_t run = piece.size * piece.inner * width;
  for (int64_t g = 0; g < pieces; ++g) {
    for (int64_t o = 0; o < piece.outer; ++o) {
      std::memcpy(static_cast<char*>(dst) + (o * pieces + g) * run,
                  static_cast<const char*>(src) + (g * piece.outer + o) * run, static_cast<size_t>(run));
    }
  }
}

class CollectiveKernel final : public Kernel {
 public:
  CollectiveKernel(Opcode op, Combiner combiner, ArrayShape input, ArrayShape output, int64_t axis, int64_t concat_axis,
                   ReplicaGroups groups, std::string label)
      : op_(op),
        combiner_(combiner),
        input_(std::move(input)),
        output_(std::move(output)),
        axis_(axis),
        concat_axis_(concat_axis),
        groups_(std::move(groups)),
        label_(std::move(label)) {}

  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    return RunOn(PartitionContext{}, inputs, outputs);
  }

  absl::Status RunOn(const PartitionContext& where, std::span<const void* const> inputs,
                     std::span<void* const> outputs) const override {
    const std::string what = absl::StrCat(OpcodeName(op_), " '", label_, "' (kernel ", where.kernel, ")");
    if (where.partition < 0 || (where.partition > 0 && where.partition >= static_cast<int64_t>(where.devices.size()))) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": partition ", where.partition, " of ", where.devices.size(), " runs it"));
    }
    const GroupPosition at = FindPartition(groups_, where.partition);
    const std::vector<int64_t>& group = groups_[static_cast<size_t>(at.group)];
    const int64_t size = static_cast<int64_t>(group.size());
    const void* in = inputs[0];
    void* out = outputs[0];
    // A group of one exchanges nothing, and every collective's result is then its operand.
    if (size == 1) {
      if (output_.byte_size() > 0) std::memcpy(out, in, static_cast<size_t>(output_.byte_size()));
      return absl::OkStatus();
    }
    const int64_t width = ByteWidth(input_.type);
    if (op_ == Opcode::kPartitionSlice) {
      // Piece `rank` along the axis, copied from the partition's own operand.
      const AxisSplit a(input_.dims, axis_);
      const int64_t n = a.size / size;
      const int64_t run = n * a.inner * width;
      for (int64_t o = 0; o < a.outer; ++o) {
        std::memcpy(static_cast<char*>(out) + o * run,
                    static_cast<const char*>(in) + (o * a.size + at.rank * n) * a.inner * width,
                    static_cast<size_t>(run));
      }
      return absl::OkStatus();
    }
    if (where.communicator == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(what, " exchanges data between ", size,
                                                        " partitions: run the executable with ExecutePartitioned"));
    }
    const CollectiveCall call{where.run_id, where.kernel, group, at.rank, where.devices, what};
    Device* device = where.devices[static_cast<size_t>(where.partition)];
    const CollectiveSpan span(device, what);
    Communicator& comm = *where.communicator;
    if (op_ == Opcode::kAllReduce) return comm.AllReduce(call, input_.type, combiner_, input_.numel(), in, out);
    if (op_ == Opcode::kAllGather) {
      const AxisSplit a(input_.dims, axis_);
      if (a.outer == 1) return comm.AllGather(call, input_.type, input_.numel(), in, out);
      ASSIGN_OR_RETURN(Staging gathered, Staging::Make(where, output_.byte_size()));
      RETURN_IF_ERROR(comm.AllGather(call, input_.type, input_.numel(), in, gathered.data()));
      JoinPieces(gathered.data(), a, size, width, out);
      return absl::OkStatus();
    }
    if (op_ == Opcode::kReduceScatter) {
      const AxisSplit a(input_.dims, axis_);
      if (a.outer == 1) return comm.ReduceScatter(call, input_.type, combiner_, output_.numel(), in, out);
      ASSIGN_OR_RETURN(Staging pieces, Staging::Make(where, input_.byte_size()));
      SplitPieces(in, a, size, width, pieces.data());
      return comm.ReduceScatter(call, input_.type, combiner_, output_.numel(), pieces.data(), out);
    }
    if (op_ == Opcode::kAllToAll) {
      const AxisSplit split(input_.dims, axis_);
      std::vector<int64_t> piece_dims = input_.dims;
      piece_dims[static_cast<size_t>(axis_)] /= size;
      const AxisSplit piece(piece_dims, concat_axis_);
      std::optional<Staging> send, recv;
      const void* send_ptr = in;
      void* recv_ptr = out;
      if (split.outer != 1) {
        ASSIGN_OR_RETURN(send, Staging::Make(where, input_.byte_size()));
        SplitPieces(in, split, size, width, send->data());
        send_ptr = send->data();
      }
      if (piece.outer != 1) {
        ASSIGN_OR_RETURN(recv, Staging::Make(where, output_.byte_size()));
        recv_ptr = recv->data();
      }
      RETURN_IF_ERROR(comm.AllToAll(call, input_.type, input_.numel() / size, send_ptr, recv_ptr));
      if (recv.has_value()) JoinPieces(recv_ptr, piece, size, width, out);
      return absl::OkStatus();
    }
    return absl::InternalError(absl::StrCat(what, ": not a collective"));  // refused at build
  }

 private:
  Opcode op_;
  Combiner combiner_;
  ArrayShape input_, output_;
  int64_t axis_, concat_axis_;
  ReplicaGroups groups_;
  std::string label_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> BuildCollectiveKernel(const proto::Kernel& k,
                                                              std::span<const ArrayShape> inputs,
                                                              const ArrayShape& output, int64_t num_partitions) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("kernel '", k.label(), "' (COLLECTIVE): ", what));
  };
  const std::optional<Opcode> op = OpcodeFromNumber(k.opcode());
  if (!op.has_value() || ClassOf(*op) != OpClass::kCollective) return fail(absl::StrCat("opcode ", k.opcode()));
  if (inputs.size() != 1 || inputs[0].type != output.type || k.extra_outputs_size() > 0) {
    return fail("needs one operand of the result's type and one result");
  }
  absl::StatusOr<ReplicaGroups> groups = CheckReplicaGroups(k.replica_groups(), num_partitions);
  if (!groups.ok()) return fail(std::string(groups.status().message()));
  const int64_t size = static_cast<int64_t>((*groups)[0].size());
  Combiner combiner = Combiner::kSum;
  if (*op == Opcode::kAllReduce || *op == Opcode::kReduceScatter) {
    const std::optional<Combiner> c = CombinerFromNumber(k.combiner());
    if (!c.has_value() || !Accepts(TypeClassOf(*c), output.type)) return fail("bad combiner");
    combiner = *c;
  }
  absl::StatusOr<std::vector<int64_t>> dims =
      CollectiveResultDims(*op, inputs[0].dims, k.axis(), k.concat_axis(), size);
  if (!dims.ok()) return fail(std::string(dims.status().message()));
  if (*dims != output.dims) return fail("the result's dims do not follow from the operand's");
  return std::make_unique<CollectiveKernel>(*op, combiner, inputs[0], output, k.axis(), k.concat_axis(),
                                            *std::move(groups), k.label());
}

}  // namespace lazyrt::pjrt
