#include "pjrt_sim/client.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "pjrt_sim/status_macros.h"
#include "pjrt_sim/version.h"

namespace lazyrt::pjrt {

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  if (options.num_devices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a client needs at least one device, asked for ", options.num_devices));
  }
  if (options.device_memory_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative device memory capacity ", options.device_memory_bytes));
  }
  return std::unique_ptr<Client>(new Client(options));
}

Client::Client(ClientOptions options) {
  for (int i = 0; i < options.num_devices; ++i) {
    devices_.push_back(std::make_unique<Device>(i, options.device_memory_bytes));
    device_ptrs_.push_back(devices_.back().get());
  }
}

Client::~Client() {
  // Let in-flight work finish before devices (and their memory accounting) go away.
  for (auto& d : devices_) d->stream().Synchronize();
}

absl::string_view Client::platform_version() const { return kCompilerVersion; }

Device* Client::device(int id) const {
  return id >= 0 && id < static_cast<int>(devices_.size()) ? device_ptrs_[static_cast<size_t>(id)] : nullptr;
}

absl::StatusOr<std::shared_ptr<Buffer>> Client::BufferFromHost(const void* data, const ArrayShape& shape,
                                                               Device* device) {
  ASSIGN_OR_RETURN(DeviceMemory memory, device->Allocate(shape.byte_size()));
  if (shape.byte_size() > 0) std::memcpy(memory.data(), data, static_cast<size_t>(shape.byte_size()));
  return std::make_shared<Buffer>(device, shape, std::make_shared<DeviceMemory>(std::move(memory)), Event::Ready());
}

absl::StatusOr<std::shared_ptr<Buffer>> Client::BufferFromHostInPlace(const void* data, const ArrayShape& shape,
                                                                      Device* device,
                                                                      std::shared_ptr<const void> owner) {
  if (device == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("no device for ", shape.ToString(), " used in place"));
  }
  if (owner == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(shape.ToString(), " used in place needs an owner that keeps its bytes alive"));
  }
  if (data == nullptr && shape.byte_size() > 0) {
    return absl::InvalidArgumentError(absl::StrCat("no host bytes for ", shape.ToString()));
  }
  // Kernels load elements through typed pointers: a copy could start anywhere, the array read in place not.
  const auto address = reinterpret_cast<uintptr_t>(data);
  if (address % static_cast<uintptr_t>(ByteWidth(shape.type)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("host bytes for ", shape.ToString(), " at 0x", absl::Hex(address),
                                                   " are not aligned to its ", ByteWidth(shape.type),
                                                   "-byte elements: copy them (BufferFromHost)"));
  }
  return std::make_shared<Buffer>(
      device, shape, std::make_shared<DeviceMemory>(DeviceMemory::Borrowed(data, shape.byte_size(), std::move(owner))),
      Event::Ready());
}

absl::StatusOr<std::shared_ptr<Executable>> Client::Compile(const proto::Module& module, const CompileOptions& options,
                                                            Device* device) {
  return pjrt::Compile(module, options, device != nullptr ? device : devices_[0].get());
}

absl::StatusOr<std::shared_ptr<Executable>> Client::LoadSerializedExecutable(absl::string_view bytes) {
  ASSIGN_OR_RETURN(proto::Executable parsed, Executable::Parse(bytes));
  // An arena no device can hold would fail every execution with an out-of-memory error that blames
  // the device; it is the executable that is wrong.
  int64_t largest = 0;
  for (const auto& device : devices_) largest = std::max(largest, device->memory_stats().bytes_limit);
  if (parsed.arena_bytes() > largest) {
    return absl::InvalidArgumentError(absl::StrCat("invalid executable: an arena of ", HumanBytes(parsed.arena_bytes()),
                                                   ", more than any device's memory (", HumanBytes(largest), ")"));
  }
  return Executable::Load(std::move(parsed));
}

}  // namespace lazyrt::pjrt
