// The entry point of the simulated PJRT plugin: devices, buffers, compilation and loading.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pjrt_sim/buffer.h"
#include "pjrt_sim/compiler.h"
#include "pjrt_sim/device.h"
#include "pjrt_sim/executable.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

struct ClientOptions {
  int num_devices = 1;
  int64_t device_memory_bytes = int64_t{16} << 30;
};

class Client {
 public:
  // INVALID_ARGUMENT for a device count < 1 or a capacity < 0.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options = {});
  ~Client();

  static constexpr absl::string_view kPlatformName = "lazyrt-sim";
  absl::string_view platform_name() const { return kPlatformName; }
  // The plugin's version, which also versions the executables it compiles.
  absl::string_view platform_version() const;

  std::span<Device* const> devices() const { return device_ptrs_; }
  // nullptr when out of range.
  Device* device(int id) const;

  // Copies `shape.byte_size()` bytes from `data` into a new buffer on `device`; ready at return.
  absl::StatusOr<std::shared_ptr<Buffer>> BufferFromHost(const void* data, const ArrayShape& shape, Device* device);
  // A buffer on `device` that is `shape.byte_size()` bytes at `data`, used in place (PJRT's
  // kImmutableZeroCopy semantics, which its CPU client honours by reading them where they are); ready at
  // return. `owner` (not null) is held until the buffer and every execution reading it are done (so its
  // last reference may go on the device's stream thread); the bytes, aligned to the element type, must not
  // change meanwhile. They are not the device's memory and do not count as its.
  absl::StatusOr<std::shared_ptr<Buffer>> BufferFromHostInPlace(const void* data, const ArrayShape& shape,
                                                                Device* device, std::shared_ptr<const void> owner);

  // Compiles `module` (autotuning on `device`, device 0 if null).
  absl::StatusOr<std::shared_ptr<Executable>> Compile(const proto::Module& module, const CompileOptions& options,
                                                      Device* device = nullptr);
  // Loads bytes made by Executable::Serialize(): validates them and builds kernels, running no
  // compiler pass (PJRT's LoadSerializedExecutable; the entry point that deserializes *and* loads).
  absl::StatusOr<std::shared_ptr<Executable>> LoadSerializedExecutable(absl::string_view bytes);

 private:
  explicit Client(ClientOptions options);

  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<Device*> device_ptrs_;
};

}  // namespace lazyrt::pjrt
