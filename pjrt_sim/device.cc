#include "pjrt_sim/device.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pjrt_sim/status_macros.h"

namespace lazyrt::pjrt {

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : device_(std::exchange(other.device_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      arena_(std::exchange(other.arena_, false)),
      owner_(std::move(other.owner_)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    Release();
    device_ = std::exchange(other.device_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    arena_ = std::exchange(other.arena_, false);
    owner_ = std::move(other.owner_);
  }
  return *this;
}

DeviceMemory::~DeviceMemory() { Release(); }

DeviceMemory DeviceMemory::Borrowed(const void* data, int64_t size, std::shared_ptr<const void> owner) {
  DeviceMemory memory(nullptr, const_cast<void*>(data), size);  // read-only: see the declaration
  memory.owner_ = std::move(owner);
  return memory;
}

void DeviceMemory::Release() {
  if (device_ != nullptr) device_->Free(data_, size_, arena_);
  device_ = nullptr;
  data_ = nullptr;
  size_ = 0;
  arena_ = false;
  owner_.reset();
}

namespace {
// Host bytes the pool may keep for reuse per device.
constexpr int64_t kMaxCachedBytes = int64_t{1} << 30;
}  // namespace

Device::Device(int id, int64_t memory_capacity) : id_(id), pool_(kMaxCachedBytes) {
  stats_.bytes_limit = memory_capacity;
}

Device::~Device() {
  stream_.Synchronize();  // work still queued binds and frees blocks of the pool
}

std::string Device::DebugString() const { return absl::StrCat("SIM:", id_); }

absl::StatusOr<DeviceMemory> Device::Allocate(int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("negative allocation size ", bytes));
  {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(CountLocked(bytes, bytes, ""));
  }
  DeviceMemory memory(this, nullptr, bytes);
  RETURN_IF_ERROR(memory.Bind());  // else the bytes are released on return
  return memory;
}

absl::StatusOr<DeviceMemory> Device::ReserveArena(int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("negative allocation size ", bytes));
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t counted = ArenaBytesLocked();
  RETURN_IF_ERROR(CountLocked(bytes, std::max(counted, bytes) - counted,
                              absl::StrCat(" (an arena; those of the work queued count as the largest of them, ",
                                           HumanBytes(counted), " now)")));
  queued_arenas_.push_back(bytes);
  DeviceMemory memory(this, nullptr, bytes);
  memory.arena_ = true;
  return memory;
}

absl::Status Device::CountLocked(int64_t requested, int64_t delta, absl::string_view note) {
  if (delta > stats_.bytes_limit - stats_.bytes_in_use) {
    return absl::ResourceExhaustedError(absl::StrCat(
        DebugString(), " is out of memory: requested ", HumanBytes(requested), " (", requested, " bytes)", note,
        " with ", HumanBytes(stats_.bytes_in_use), " in use of a ", HumanBytes(stats_.bytes_limit), " limit"));
  }
  stats_.bytes_in_use += delta;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  stats_.num_allocs += 1;
  stats_.live_allocations += 1;
  stats_.largest_alloc_size = std::max(stats_.largest_alloc_size, requested);
  return absl::OkStatus();
}

absl::Status DeviceMemory::Bind() {
  if (data_ != nullptr) return absl::OkStatus();
  if (device_ == nullptr) return absl::FailedPreconditionError("binding memory of no device (moved from?)");
  ASSIGN_OR_RETURN(data_, device_->TakeBlock(size_, arena_));
  return absl::OkStatus();
}

absl::StatusOr<void*> Device::TakeBlock(int64_t bytes, bool arena) {
  std::lock_guard<std::mutex> lock(mu_);
  // What lets arenas count as the largest of them (ReserveArena): checked, not assumed.
  if (arena && arena_bound_) {
    return absl::FailedPreconditionError(
        absl::StrCat(DebugString(), ": an arena bound while another is (its stream binds one at a time)"));
  }
  void* data = pool_.Take(bytes);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(DebugString(), ": the host could not provide ", HumanBytes(bytes)));
  }
  if (arena) arena_bound_ = true;
  return data;
}

void Device::Free(void* data, int64_t size, bool arena) {
  std::lock_guard<std::mutex> lock(mu_);
  if (arena) {
    const int64_t counted = ArenaBytesLocked();
    const auto queued = std::ranges::find(queued_arenas_, size);  // reserved by ReserveArena with this size
    if (queued != queued_arenas_.end()) queued_arenas_.erase(queued);
    stats_.bytes_in_use -= counted - ArenaBytesLocked();
    if (data != nullptr) arena_bound_ = false;
  } else {
    stats_.bytes_in_use -= size;
  }
  stats_.live_allocations -= 1;
  pool_.Give(data, size);
}

void Device::RecordReceived(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.collective_bytes_received += bytes;
}

void Device::RecordCollective(int64_t nanoseconds) {
  collective_calls_.fetch_add(1, std::memory_order_relaxed);
  collective_ns_.fetch_add(nanoseconds, std::memory_order_relaxed);
}

void Device::RecordCollectiveWait(int64_t nanoseconds) {
  collective_wait_ns_.fetch_add(nanoseconds, std::memory_order_relaxed);
}

CollectiveStats Device::collective_stats() const {
  return {.calls = collective_calls_.load(std::memory_order_relaxed),
          .nanoseconds = collective_ns_.load(std::memory_order_relaxed),
          .wait_nanoseconds = collective_wait_ns_.load(std::memory_order_relaxed)};
}

MemoryStats Device::memory_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats s = stats_;
  s.arena_bytes = ArenaBytesLocked();
  s.bytes_cached = pool_.cached_bytes();
  return s;
}

int64_t Device::ArenaBytesLocked() const {
  return queued_arenas_.empty() ? 0 : *std::ranges::max_element(queued_arenas_);
}

void Device::ResetPeakMemory() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

std::string HumanBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.2f %s", v, units[u]);
}

}  // namespace lazyrt::pjrt
