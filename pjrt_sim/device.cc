#include "pjrt_sim/device.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
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
size_t RoundedSize(int64_t bytes) { return (static_cast<size_t>(bytes) + 63) / 64 * 64; }
// Blocks of a huge page or more start on one, and are advised to be made of huge pages (THP, where the
// kernel allows them on request): the arena and large arrays, which kernels stream through. With 4 KiB
// pages a stream missed the TLB every 1024 floats, and the CPU's prefetchers stop at page boundaries
// (on a Zen 3 BM_Gelu ran 8-18% and BM_AdamWUpdate/2048 16-29% faster: benchmarks/RESULTS.md). Only the
// alignment costs address space; a block's last partial huge page is ordinary pages.
constexpr size_t kHugePage = size_t{2} << 20;
void* AllocateBlock(size_t size) {
  if (size < kHugePage) return std::aligned_alloc(64, size);
  void* data = nullptr;
  if (posix_memalign(&data, kHugePage, size) != 0) return nullptr;
  madvise(data, size, MADV_HUGEPAGE);  // advice: without THP the pages are ordinary ones
  return data;
}
}  // namespace

Device::Device(int id, int64_t memory_capacity) : id_(id) { stats_.bytes_limit = memory_capacity; }

Device::~Device() {
  stream_.Synchronize();  // work still queued binds and frees blocks of the pool freed below
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, blocks] : free_blocks_) {
    for (void* b : blocks) std::free(b);
  }
  free_blocks_.clear();
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
  // Round up to the alignment: aligned_alloc requires a multiple of it; a zero-size request still gets
  // a distinct pointer.
  const size_t rounded = std::max<size_t>(64, RoundedSize(bytes));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (arena) {
      // What lets arenas count as the largest of them (ReserveArena): checked, not assumed.
      if (arena_bound_) {
        return absl::FailedPreconditionError(
            absl::StrCat(DebugString(), ": an arena bound while another is (its stream binds one at a time)"));
      }
      arena_bound_ = true;
    }
    auto it = free_blocks_.find(rounded);
    if (it != free_blocks_.end() && !it->second.empty()) {
      void* reused = it->second.back();
      it->second.pop_back();
      stats_.bytes_cached -= static_cast<int64_t>(rounded);
      return reused;
    }
  }
  void* data = AllocateBlock(rounded);
  if (data != nullptr) return data;
  std::lock_guard<std::mutex> lock(mu_);
  if (arena) arena_bound_ = false;
  return absl::ResourceExhaustedError(absl::StrCat(DebugString(), ": the host could not provide ", HumanBytes(bytes)));
}

void Device::Free(void* data, int64_t size, bool arena) {
  const size_t rounded = std::max<size_t>(64, RoundedSize(size));
  {
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
    if (data != nullptr && stats_.bytes_cached + static_cast<int64_t>(rounded) <= kMaxCachedBytes) {
      free_blocks_[rounded].push_back(data);
      stats_.bytes_cached += static_cast<int64_t>(rounded);
      return;
    }
  }
  std::free(data);
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
