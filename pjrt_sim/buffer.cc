#include "pjrt_sim/buffer.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "pjrt_sim/status_macros.h"

namespace lazyrt::pjrt {

Buffer::Buffer(Device* device, ArrayShape shape, std::shared_ptr<DeviceMemory> memory, std::shared_ptr<Event> ready)
    : device_(device), shape_(std::move(shape)), ready_(std::move(ready)), memory_(std::move(memory)) {}

absl::Status Buffer::ToHost(void* dst, size_t dst_bytes) const {
  if (dst_bytes != static_cast<size_t>(shape_.byte_size())) {
    return absl::InvalidArgumentError(absl::StrCat("copying ", shape_.ToString(), " (", shape_.byte_size(),
                                                   " bytes) to a host region of ", dst_bytes, " bytes"));
  }
  absl::Status status = ready_->Wait();
  if (!status.ok()) return status;
  ASSIGN_OR_RETURN(std::shared_ptr<DeviceMemory> mem, memory());
  if (dst_bytes > 0) std::memcpy(dst, mem->data(), dst_bytes);
  return absl::OkStatus();
}

void Buffer::Delete() {
  std::lock_guard<std::mutex> lock(mu_);
  memory_.reset();
}

bool Buffer::IsDeleted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return memory_ == nullptr;
}

absl::StatusOr<std::shared_ptr<DeviceMemory>> Buffer::memory() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (memory_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("use of a deleted ", shape_.ToString(), " buffer on ", device_->DebugString()));
  }
  return memory_;
}

}  // namespace lazyrt::pjrt
