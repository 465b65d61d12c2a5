// Tensor::to(Device): moving a tensor's data to another device, asynchronously.
#include "absl/strings/str_cat.h"
#include "lazy/autograd.h"
#include "lazy/diagnostics_internal.h"
#include "lazy/metrics.h"
#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lazy/tracing.h"

namespace lazyrt {

using detail::ImplOf;
using detail::TensorImpl;

Tensor Tensor::to(Device device, SourceLocation loc) const {
  TensorImpl& src = ImplOf(*this, "to", loc);
  detail::Runtime& rt = detail::Runtime::Get();
  pjrt::Device& dst = *rt.device_state(device, loc).device;  // an unknown device throws, naming the valid ones
  if (device.index == src.device) return *this;
  // A graph runs on one device: moving a pending value means computing it where it was traced (as
  // PyTorch/XLA materializes a tensor it moves between devices). The sync only enqueues that graph; the
  // copy below queues behind it on the same stream, so the host waits for neither.
  if (is_pending()) detail::Sync({src.device}, SyncCause::kToDevice, loc);
  if (src.buffer == nullptr) throw Error("to: the tensor holds no data", loc);
  pjrt::Device& src_device = *src.buffer->device();
  absl::StatusOr<std::shared_ptr<pjrt::Buffer>> copy = src.buffer->CopyToDevice(&dst);
  ThrowIfError(copy.status(), absl::StrCat("to(", device.ToString(), ") of ", src.shape.ToString()), loc);
  static std::atomic<int64_t>& transfers = Counter(counters::kTransfersBetweenDevices);  // looked up once
  transfers.fetch_add(1);
  detail::RecordMemorySample(dst);
  if (detail::TimingEnabled()) {
    // In order after the copy on the source's stream: both devices once the source has been read.
    src_device.stream().Enqueue([&src_device, &dst] {
      detail::RecordMemorySample(src_device);
      detail::RecordMemorySample(dst);
    });
  }
  Tensor out = detail::NewTensor(src.shape, device.index, loc);
  out.impl()->buffer = *std::move(copy);
  return detail::Record(
      std::move(out), "to", {*this},
      [source = Device{src.device}, loc](const Tensor& grad, const Tensor&, const std::vector<Tensor>&) {
        return std::vector<Tensor>{grad.to(source, loc)};
      },
      loc);
}

}  // namespace lazyrt
