// The kernels an executable is made of, built from their serialized description at load time. Each
// checks at build time everything it can (shapes, indices, bounds), so running one can only fail on
// data (an out-of-range gather index), which it reports as a status.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/kernels/gemm.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

// The variants of a DOT kernel (proto::Kernel::variant), chosen by autotuning.
inline constexpr int64_t kDotSerial = 0;        // each product on one thread
inline constexpr int64_t kDotColumnPanels = 1;  // columns of the product split over the device's pool
inline constexpr int64_t kDotRowPanels = 2;     // rows split over the pool

// Whether a DOT of `operand` arrays on `library` multiplies them natively in 16 bits (bf16 on oneDNN where
// the CPU has AVX512-BF16 or AMX). Such a product is cut into kDotFixedTiles tiles fixed by its shape,
// which every variant runs (in order, or over the pool): its row and column variants are the same.
inline constexpr int64_t kDotFixedTiles = 2;
bool DotHasFixedTiles(PrimitiveType operand, GemmLibrary library);

// An array's dims seen around one axis: [outer, size, inner] elements.
struct AxisSplit {
  int64_t outer = 1, size = 1, inner = 1;
  AxisSplit(const std::vector<int64_t>& dims, int64_t axis) {
    for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
      (d < axis ? outer : d == axis ? size : inner) *= dims[static_cast<size_t>(d)];
    }
  }
};

class Communicator;
class Device;

// Where an execution runs: which partition, on which device, meeting the others through which
// communicator. Only collectives read it; a run without one is partition 0 of 1, on no device.
struct PartitionContext {
  int64_t partition = 0;
  std::span<Device* const> devices;  // every partition's device, by partition
  Communicator* communicator = nullptr;
  uint64_t run_id = 0;  // the execution, the same on every partition
  int64_t kernel = 0;   // the kernel running (set by the executable for each)
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Computes the outputs from the inputs (device memory of the shapes given at build time): the
  // kernel's output, then its extra outputs in order.
  virtual absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const = 0;
  // The same as run by partition `where` of an execution: kernels whose result depends on the
  // partition (collectives) override it.
  virtual absl::Status RunOn(const PartitionContext& where, std::span<const void* const> inputs,
                             std::span<void* const> outputs) const {
    (void)where;
    return Run(inputs, outputs);
  }
  // Whether Run may hand tasks to the ThreadPool. False only where it never does (a serial loop or
  // reduction, a product whole), so that the pool's other threads are known to idle while it runs.
  virtual bool SplitsOverPool() const { return true; }
};

// Validates `kernel` against the shapes of its input and output slots (`extra_outputs`: those of
// kernel.extra_outputs()) and builds it. A COLLECTIVE kernel is built by BuildCollectiveKernel
// (kernels/collectives.h), which needs the executable's partition count.
absl::StatusOr<std::unique_ptr<Kernel>> BuildKernel(const proto::Kernel& kernel, std::span<const ArrayShape> inputs,
                                                    const ArrayShape& output,
                                                    std::span<const ArrayShape> extra_outputs = {});

// The shape `kernel` reads input `i` as, given its slot's shape: its operand view's dims, or the slot's.
ArrayShape InputShape(const proto::Kernel& kernel, int i, const ArrayShape& slot);

}  // namespace lazyrt::pjrt
