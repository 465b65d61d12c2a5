// Several processes, one program: data parallel across processes and hosts, as jax.distributed and
// torch.distributed do. Each process (a rank) has LAZYRT_DEVICES local devices; together they form one
// global mesh of world_size() x LAZYRT_DEVICES devices, device g living on rank g / LAZYRT_DEVICES.
// The program keeps the global view: it builds the same Mesh and traces the same graph on every rank;
// the compiler partitions it for the global mesh, each rank runs its own partitions, and the
// collectives of the compiled step (the gradients' all-reduce) go between processes through Gloo.
//
//   LAZYRT_WORLD_SIZE=2 LAZYRT_RANK=0 LAZYRT_COORDINATOR=file:///tmp/job program &
//   LAZYRT_WORLD_SIZE=2 LAZYRT_RANK=1 LAZYRT_COORDINATOR=file:///tmp/job program
//
// (tools/run_distributed.sh N program ... does this.) Without LAZYRT_RANK / LAZYRT_WORLD_SIZE, torchrun's
// RANK / WORLD_SIZE and Open MPI's OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE are read.
#pragma once

#include <string>
#include <vector>

#include "lazy/sharding.h"
#include "lazy/tensor.h"

namespace lazyrt::distributed {

// Joins the job the environment describes: rank, world size and the coordinator (LAZYRT_COORDINATOR,
// "file:///dir", a directory every rank reaches and no earlier job used), validated with errors
// naming the variable. Waits (bounded by LAZYRT_COLLECTIVE_TIMEOUT_MS) until every rank has joined.
// Idempotent; with a world of one it does nothing. It reads LAZYRT_* from the environment, not the
// runtime's options, so that a program can learn world_size() first and then configure() its local
// devices; call it before any tensor.
void initialize(LAZYRT_HERE);
// Whether initialize() joined a job of more than one process.
bool initialized();
// This process's rank and the number of processes (0 and 1 before initialize()).
int rank();
int world_size();

// The global array of which `local` is this process's part, laid out over `mesh` as `spec` says
// (JAX's make_array_from_process_local_data). At most one dim is split; along it, this process's
// partitions hold consecutive pieces, and `local` is those pieces in order: a global batch of B rows
// split over "data" is given as each rank's B / world_size() rows. Unsplit dims are the same
// everywhere (each rank passes the whole). In one process it is mark_sharding(local, mesh, spec).
Tensor make_array_from_process_local_data(const Tensor& local, const Mesh& mesh, const PartitionSpec& spec,
                                          LAZYRT_HERE);

// What this process's partitions did in cross-process collectives so far (zeros in one process).
struct CollectiveStats {
  int64_t calls = 0;
  int64_t bytes_received = 0;  // from other partitions, over the transport
  double seconds = 0;          // in the calls, waits for slower ranks included
};
CollectiveStats collective_stats();

}  // namespace lazyrt::distributed
