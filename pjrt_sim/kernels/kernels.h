// The kernels an executable is made of, built from their serialized description at load time. Each
// checks at build time everything it can (shapes, indices, bounds), so running one can only fail on
// data (an out-of-range gather index), which it reports as a status.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "pjrt_sim/executable.pb.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

// The variants of a DOT kernel (proto::Kernel::variant), chosen by autotuning.
inline constexpr int64_t kDotSerial = 0;        // each product on one thread
inline constexpr int64_t kDotColumnPanels = 1;  // columns of the product split over the device's pool
inline constexpr int64_t kDotRowPanels = 2;     // rows split over the pool

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Computes the outputs from the inputs (device memory of the shapes given at build time): the
  // kernel's output, then its extra outputs in order.
  virtual absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const = 0;
};

// Validates `kernel` against the shapes of its input and output slots (`extra_outputs`: those of
// kernel.extra_outputs()) and builds it.
absl::StatusOr<std::unique_ptr<Kernel>> BuildKernel(const proto::Kernel& kernel, std::span<const ArrayShape> inputs,
                                                    const ArrayShape& output,
                                                    std::span<const ArrayShape> extra_outputs = {});

}  // namespace lazyrt::pjrt
