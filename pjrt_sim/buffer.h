// An array resident in a device's memory. Its contents may still be being computed: readiness is an
// event you can wait on (PJRT's GetReadyFuture).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>

#include "absl/status/status.h"
#include "pjrt_sim/device.h"
#include "pjrt_sim/event.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

class Buffer {
 public:
  Buffer(Device* device, ArrayShape shape, std::shared_ptr<DeviceMemory> memory, std::shared_ptr<Event> ready);

  Device* device() const { return device_; }
  const ArrayShape& shape() const { return shape_; }
  // Completes when the contents have been computed, with the error if computing them failed.
  const std::shared_ptr<Event>& ready() const { return ready_; }
  absl::Status AwaitReady() const { return ready_->Wait(); }

  // Waits until ready, then copies the contents (exactly shape().byte_size() bytes) to `dst`.
  absl::Status ToHost(void* dst, size_t dst_bytes) const;
  // A copy of this buffer on `dst` (PJRT's CopyToDevice), returned at once: its memory is allocated
  // (and counted on `dst`) now, and its ready event fires once the copy has run on this buffer's
  // device stream, after the work already queued there (the producer), with the producer's error if it
  // failed. (A copy of at most 64 KiB of a ready buffer runs on the calling thread when the stream is
  // idle: cheaper than waking the stream.) This buffer's memory stays alive until the copy has read it,
  // even if deleted meanwhile.
  // RESOURCE_EXHAUSTED when `dst` cannot hold it; FAILED_PRECONDITION when this buffer is deleted.
  absl::StatusOr<std::shared_ptr<Buffer>> CopyToDevice(Device* dst) const;
  // Gives the memory back (once work using it has finished). Later use of the buffer is an error.
  void Delete();
  bool IsDeleted() const;
  // The memory, for the executor; FAILED_PRECONDITION once deleted.
  absl::StatusOr<std::shared_ptr<DeviceMemory>> memory() const;

 private:
  Device* const device_;
  const ArrayShape shape_;
  const std::shared_ptr<Event> ready_;
  mutable std::mutex mu_;
  std::shared_ptr<DeviceMemory> memory_;  // shared with executions in flight
};

}  // namespace lazyrt::pjrt
