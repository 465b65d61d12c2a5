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

namespace {
// A copy this small whose source is ready runs on the calling thread when the source stream is idle:
// waking the stream thread would cost more than the memcpy. Larger copies never block the host.
constexpr int64_t kMaxInlineCopyBytes = int64_t{64} << 10;
}  // namespace

absl::StatusOr<std::shared_ptr<Buffer>> Buffer::CopyToDevice(Device* dst) const {
  ASSIGN_OR_RETURN(std::shared_ptr<DeviceMemory> src_memory, memory());
  ASSIGN_OR_RETURN(DeviceMemory allocated, dst->Allocate(shape_.byte_size()));
  auto dst_memory = std::make_shared<DeviceMemory>(std::move(allocated));
  auto copy = std::make_shared<Buffer>(dst, shape_, dst_memory, std::make_shared<Event>());
  const bool inline_ok = shape_.byte_size() <= kMaxInlineCopyBytes && ready_->IsReady();
  // On the source's stream: in order after the work that produces the source. Consumers on `dst` wait
  // for the copy's ready event, as they wait for any argument.
  device_->stream().Submit(
      inline_ok, [src_ready = ready_, src_memory = std::move(src_memory), dst_memory, done = copy->ready()]() mutable {
        absl::Status status = src_ready->Wait();
        if (status.ok() && dst_memory->size() > 0) {
          std::memcpy(dst_memory->data(), src_memory->data(), static_cast<size_t>(dst_memory->size()));
        }
        src_memory.reset();  // a source dropped meanwhile is freed before anyone learns the copy ended
        dst_memory.reset();
        done->Set(std::move(status));
      });
  return copy;
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
