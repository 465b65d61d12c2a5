// The SPMD partitioner: the compiler pass that turns a global program annotated with shardings over a
// device mesh into one program of N partitions (GSPMD's scheme, as XLA runs it for JAX and torch_xla).
//
// 1. Propagation: the annotated values (and the parameters, which arrive as annotated, replicated when not)
//    give their neighbours a sharding through the op between them, forward and backward, through
//    elementwise ops, broadcast, transpose, reshape (where a split dim survives), dot, reduce, the row-wise
//    ops (normalization, cumsum, argsort, argmax), slice and concatenate (along whole dims), the indexing ops
//    and their gradients (split everywhere but along the indexed dim) and attention (split over its batch
//    dims: a GPT's batch and heads). Random numbers stay replicated (every partition draws the
//    global stream, so sharded or not they are the same numbers). What is left unsharded is replicated.
// 2. Partitioning: each instruction is rewritten to its per-partition shape, its operands resharded to what
//    its rule needs: a split dim a consumer needs whole is ALL_GATHERed, a whole dim it needs split is taken
//    by PARTITION_SLICE (no communication), a split that moves to another dim goes by one ALL_TO_ALL; a dot contracting
//    a dim split on both sides leaves partial sums, ALL_REDUCEd (or REDUCE_SCATTERed when the result is wanted split);
//    a reduction over a split dim is ALL_REDUCEd. An op without a rule is computed replicated from gathered operands:
//    correct, never wrong, and counted.
//
// Avoidable reshardings are recorded for the runtime's diagnostics (a Resharding each): a collective that
// another layout of the value would have avoided, with the value's origin, the layout it had, the one its
// consumer needed and the bytes moved per run. Exactly these: (a) a PARAMETER (a value the program reads,
// laid out by the caller) all-gathered for a consumer with a partitioning rule: laid out as the consumer
// needs, it would arrive so every run; (b) a computed value all-gathered and then sliced along another dim
// (RESLICED) for a consumer with a rule or for its own sharding annotation: all of it moved so that each
// partition keeps a piece. Not recorded: partial sums combined (ALL_REDUCE, REDUCE_SCATTER: a data-parallel
// gradient or a split contraction needs them), a computed value gathered whole because its consumer needs
// that dim whole (the op needs it), and the operands gathered for an op without a rule (counted as
// replicated_fallbacks: the partitioner's gap, not the layout's).
//
// Partition p is the row-major position of its coordinates in the mesh; a collective over a set of mesh
// axes runs in groups of the partitions that differ only in those axes' coordinates, ordered by them.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/module.pb.h"

namespace lazyrt::pjrt {

struct SpmdPartitioned {
  // num_partitions = the mesh's size, per-partition shapes, the collectives; the mesh kept (the devices to
  // run on), the shardings gone.
  proto::Module module;
  // How each parameter (by number) arrives and each output leaves: split over the mesh as these say.
  std::vector<proto::Sharding> parameter_shardings;
  std::vector<proto::Sharding> output_shardings;
  // Instructions computed replicated for want of a partitioning rule, and the collectives inserted.
  int64_t replicated_fallbacks = 0;
  int64_t collectives = 0;
  // The avoidable reshardings, in the order the partitioner made them.
  std::vector<proto::Resharding> reshardings;
};

// Partitions `module`, which VerifyModule accepted and which has a mesh.
absl::StatusOr<SpmdPartitioned> PartitionSpmd(const proto::Module& module);

}  // namespace lazyrt::pjrt
