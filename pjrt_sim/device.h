// A simulated accelerator: an id, a memory capacity with accounting, and an in-order stream.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "pjrt_sim/block_pool.h"
#include "pjrt_sim/stream.h"

namespace lazyrt::pjrt {

// How executions time their kernels: not at all; each kernel as it runs; or each as it runs and again right after,
// a second time on the data it just used (but its first run, a collective, and a kernel that writes what it reads:
// Executable::RunKernels). The second run finds the kernel's data in its cores' caches and the pool's threads
// awake; what the first takes beyond it went on such things: data that earlier kernels left in another core's
// cache or in memory, threads waking, cold translation and branch state.
enum class KernelProfiling { kOff, kTimes, kTimesAndReruns };

// What a device's memory looks like now (PJRT's Device::GetAllocatorStats, reduced).
struct MemoryStats {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t num_allocs = 0;        // allocations made since the device was created
  int64_t live_allocations = 0;  // allocations not yet freed
  int64_t largest_alloc_size = 0;
  int64_t bytes_limit = 0;
  int64_t bytes_cached = 0;  // freed blocks kept for reuse (not in use, not counted against the limit)
  int64_t arena_bytes = 0;   // of bytes_in_use: the largest arena of the executions queued or running (ReserveArena)
  int64_t collective_bytes_received = 0;  // copied in from other devices' memory by collectives
};

// The time a device's partitions spent inside collective calls, each from the call to its return: moving
// and combining bytes, and waiting at the rendezvous for the other members (a partition that arrives
// first sleeps there).
struct CollectiveStats {
  int64_t calls = 0;
  int64_t nanoseconds = 0;
  // Of which waiting at the rendezvous for the other members to arrive (as the communicator reports it:
  // the in-process one does; 0 from one that does not).
  int64_t wait_nanoseconds = 0;
};

class Device;

// Device memory owned by one holder; returns its bytes to the device when destroyed. An arena reserved by
// Device::ReserveArena has no memory (data() is null) until bound.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  ~DeviceMemory();

  // Host bytes used in place (PJRT's kImmutableZeroCopy host buffers, which its CPU client reads where
  // they are): `owner` is held until this is destroyed, and the bytes are neither the device's nor
  // counted as its. Executions only read them: a kernel writes only arena and output slots (checked when
  // an executable is loaded).
  static DeviceMemory Borrowed(const void* data, int64_t size, std::shared_ptr<const void> owner);

  // Takes the memory of an arena reserved by Device::ReserveArena (nothing to do where it has it). Fails where the
  // host cannot provide the block (the bytes then stay reserved until this is destroyed), and on memory
  // of no device (moved from, or default).
  absl::Status Bind();

  void* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  friend class Device;
  DeviceMemory(Device* device, void* data, int64_t size) : device_(device), data_(data), size_(size) {}
  void Release();

  Device* device_ = nullptr;  // null for borrowed bytes
  void* data_ = nullptr;
  int64_t size_ = 0;
  bool arena_ = false;                 // reserved by ReserveArena
  std::shared_ptr<const void> owner_;  // of borrowed bytes
};

class Device {
 public:
  Device(int id, int64_t memory_capacity);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int id() const { return id_; }
  // The platform's device kind, part of every executable's identity.
  static constexpr absl::string_view kKind = "lazyrt-sim-v1";
  // "SIM:0"
  std::string DebugString() const;

  // Reserves `bytes` (64-byte aligned) with their memory. Exceeding the capacity is RESOURCE_EXHAUSTED
  // naming the request, the bytes in use and the limit; the device stays usable.
  absl::StatusOr<DeviceMemory> Allocate(int64_t bytes);
  // The arena of an execution submitted to this device's stream: counted against the capacity now, with
  // Allocate's errors, and its memory taken only when DeviceMemory::Bind is called, by the stream's work as
  // it starts the execution (binding a second arena while one is bound fails).
  // - The stream runs one execution at a time and each frees its arena before the next binds one, so the
  //   arenas of the executions queued or running count as the largest of them (MemoryStats::arena_bytes),
  //   not their sum: two steps in flight held two arenas' bytes where one is ever used (as a stream-ordered
  //   allocator reuses a finished kernel's memory for the next).
  // - Freed blocks are reused last in, first out, so back-to-back executions of one executable run in one
  //   arena, whose pages and most recently touched lines the last run left in the TLB and the caches. Bound
  //   at submission, with two steps in flight, they alternated between two arenas, each last touched a
  //   whole step before: the GPT's layer norms, GELUs and transposes ran up to 1.8x slower, its step 6%
  //   (f32) and 7% (bf16) (benchmarks/RESULTS.md, session 34).
  absl::StatusOr<DeviceMemory> ReserveArena(int64_t bytes);
  MemoryStats memory_stats() const;
  // Starts a new peak: peak_bytes_in_use becomes bytes_in_use (to measure one phase of a program).
  void ResetPeakMemory();
  // Counts `bytes` a collective copied into this device's memory from another device's.
  void RecordReceived(int64_t bytes);
  // Counts one collective call of `nanoseconds` on this device (CollectiveSpan: two clock reads a call).
  void RecordCollective(int64_t nanoseconds);
  // Counts `nanoseconds` a collective call of this device waited for the other members to arrive.
  void RecordCollectiveWait(int64_t nanoseconds);
  CollectiveStats collective_stats() const;
  // Work on this device runs in order on this stream.
  Stream& stream() { return stream_; }
  // How executions on this device time their kernels (Executable::kernel_times): two clock reads per kernel, and
  // with reruns every kernel run twice.
  void set_kernel_profiling(KernelProfiling how) { kernel_profiling_.store(how, std::memory_order_relaxed); }
  KernelProfiling kernel_profiling() const { return kernel_profiling_.load(std::memory_order_relaxed); }

 private:
  friend class DeviceMemory;
  void Free(void* data, int64_t size, bool arena);
  // Counts `delta` more bytes in use for a request of `requested` (RESOURCE_EXHAUSTED past the limit, the
  // message with `note` after the request).
  absl::Status CountLocked(int64_t requested, int64_t delta, absl::string_view note);
  int64_t ArenaBytesLocked() const;
  // A block for `bytes` bytes from the pool. Fails where the host has none, and for an arena while another
  // is bound.
  absl::StatusOr<void*> TakeBlock(int64_t bytes, bool arena);

  const int id_;
  mutable std::mutex mu_;
  MemoryStats stats_;
  // Training steps allocate the same sizes every step; reusing freed blocks spares the host's page faults
  // and zeroing of fresh memory (as a device's pooling allocator does).
  BlockPool pool_;
  // The sizes of the arenas reserved and not yet released: a step or two in flight (inline, no allocation
  // on the launch path).
  absl::InlinedVector<int64_t, 4> queued_arenas_;
  bool arena_bound_ = false;  // one of them has its memory
  std::atomic<KernelProfiling> kernel_profiling_{KernelProfiling::kOff};
  std::atomic<int64_t> collective_calls_{0}, collective_ns_{0}, collective_wait_ns_{0};
  Stream stream_;
};

// "1.50 MiB"
std::string HumanBytes(int64_t bytes);

}  // namespace lazyrt::pjrt
