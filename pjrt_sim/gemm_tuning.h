// The machine's GEMM tuning record: for each product shape on this CPU, the GEMM library measured
// fastest the first time any process on the machine compiled it. GEMM libraries round differently, so a
// choice by timing made afresh in each compile would let two processes compute different bits; made once
// per machine and read by every later compile (whatever its executable cache directory), it is as stable
// as a choice by the CPU's features. The chosen library is stored in each executable (Kernel.gemm_library),
// so a loaded executable never consults the record.
//
// One text file, one entry a line, tab-separated:
//   lazyrt-gemm-tuning 4
//   <HostIsa()> <dtype> <m> <n> <k> <transpose_lhs 0/1> <transpose_rhs 0/1> <library name>
// Writes are atomic (a temporary file renamed over it) under a lock file with a bounded wait; a writer
// re-reads the file under the lock and keeps every entry already there, so the first writer of an
// entry wins and everyone adopts its choice. Every value read is bounded and validated: a damaged file
// or line is a warning naming the file and the line, then ignored (the shape is measured again). A record of
// an older version (1: before the libraries onednn_matmul and libxsmm; 2: before libraries were timed only in
// the variants computing their whole product's bits) is ignored without a warning.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/kernels/gemm.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

// One product shape: C[m,n] = op(A)[m,k] op(B)[k,n] in `type`.
struct GemmShape {
  PrimitiveType type;
  int64_t m, n, k;
  bool transpose_lhs, transpose_rhs;
};

// The product whose GEMM library a kernel of `exe` runs on, the key of its entry in the record: a DOT's
// product; an ATTENTION or ATTENTION_GRAD kernel's scores of one step (q k^T: kAttentionBlock queries by
// min(S, kAttentionKeyChunk) keys over E, k transposed), for its block products all run on one library. The key is
// the product's alone: forward and backward kernels share it, and a DOT of that very shape too, whichever
// the machine measured first. Nothing for other kernels. `exe` is the compiler's own or one that loaded
// (its slot indices valid).
std::optional<GemmShape> TunedGemmShape(const proto::Executable& exe, const proto::Kernel& kernel);

class GemmTuningRecord {
 public:
  explicit GemmTuningRecord(std::string path) : path_(std::move(path)) {}

  // Where the machine's record lives unless configured (LAZYRT_GEMM_TUNING_FILE, lazy/options.h):
  // $XDG_CACHE_HOME/lazyrt-machine/gemm_tuning.txt, else ~/.cache/lazyrt-machine/gemm_tuning.txt: beside,
  // never inside, the executable cache directories, so that programs with different cache directories
  // share it. An instrumented build's is its own, gemm_tuning-<BuildFlavor()>.txt (pjrt_sim/cpu_isa.h). Empty
  // when none of these is set.
  static std::string DefaultPath();

  const std::string& path() const { return path_; }

  // The library recorded for `shape` on this CPU, if any.
  std::optional<GemmLibrary> Lookup(const GemmShape& shape) const;

  // Records `measured` for `shape` unless the file already names a library for it, and returns the one
  // recorded (first writer wins). When the file cannot be written, a warning, and `measured`.
  GemmLibrary Record(const GemmShape& shape, GemmLibrary measured) const;

 private:
  std::string path_;
};

}  // namespace lazyrt::pjrt
