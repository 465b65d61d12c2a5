#include "lazy/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lazy/diagnostics_internal.h"
#include "lazy/diagnostics_stacks.h"
#include "pjrt_sim/communicator.h"
#include "pjrt_sim/kernels/gemm.h"

namespace lazyrt {
namespace detail {
namespace {

std::mutex& InitMutex() {
  static std::mutex mu;
  return mu;
}
std::atomic<Runtime*> g_runtime{nullptr};

// SplitMix64: advances the per-step seed.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

TensorImpl::~TensorImpl() {
  if (registered) Runtime::Get().device_state({device}, SourceLocation::current()).Unregister(this);
}

void Retain(TensorImpl* impl) noexcept { impl->refs.fetch_add(1, std::memory_order_relaxed); }

void Release(TensorImpl* impl) noexcept {
  // Acquire-release: whatever other holders wrote happens before the deletion.
  if (impl->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete impl;
}

void DeviceState::Register(TensorImpl* t) {
  std::lock_guard<SpinMutex> lock(mu);
  if (t->registered) return;
  t->registered = true;
  t->prev = tail;
  t->next = nullptr;
  (tail ? tail->next : head) = t;
  tail = t;
}

void DeviceState::Unregister(TensorImpl* t) {
  std::lock_guard<SpinMutex> lock(mu);
  Unlink(t);
}

void DeviceState::UnregisterSynced(const std::vector<Tensor>& synced) {
  std::lock_guard<SpinMutex> lock(mu);
  for (const Tensor& t : synced) {
    if (t.impl()->registered) Unlink(t.impl());
  }
}

void DeviceState::Unlink(TensorImpl* t) {
  (t->prev ? t->prev->next : head) = t->next;
  (t->next ? t->next->prev : tail) = t->prev;
  t->prev = t->next = nullptr;
  t->registered = false;
}

std::vector<Tensor> DeviceState::LiveTensors() {
  std::vector<Tensor> out;  // released after the lock: a last release unregisters, which takes it
  std::lock_guard<SpinMutex> lock(mu);
  size_t registered = 0;
  for (TensorImpl* t = head; t != nullptr; t = t->next) ++registered;
  out.reserve(registered);  // before any reference is taken: nothing below can throw
  for (TensorImpl* t = head; t != nullptr; t = t->next) {
    // A tensor whose last reference is being dropped right now (none left) waits for this lock to
    // unregister: skip it. Otherwise take a reference (acquiring: what its other holders did with it
    // happens before the sync that uses it).
    int64_t refs = t->refs.load(std::memory_order_relaxed);
    while (refs > 0 &&
           !t->refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
    }
    if (refs > 0) out.push_back(AdoptTensor(t));
  }
  return out;
}

ir::Value DeviceState::SeedValue() {
  if (!seed_value) {
    const uint64_t step_seed = Mix(rng_seed ^ Mix(rng_step));
    // The seed is a parameter (i64[]), so its value never enters the graph's hash.
    seed_value =
        ir::Value{ir::MakeNode(ir::OpKind::kDeviceData, ir::OperandList{}, ir::OneShape(Shape(DType::kI64, {})),
                               ir::Attributes{}, std::make_shared<ScalarLeaf>(static_cast<double>(step_seed >> 11)))};
  }
  return seed_value;
}

void DeviceState::AdvanceRng() {
  ++rng_step;
  rng_stream_ = 0;
  seed_value = {};
}

void DeviceState::Seed(uint64_t seed) {
  rng_seed = seed;
  rng_step = 0;
  rng_stream_ = 0;
  seed_value = {};
}

// At process exit: tensors still pending (in static storage: main's locals are gone) are synced
// with cause `exit`, every device finishes its work, then the diagnostics asked for are written.
// All on a thread of its own: by the time exit handlers run, the exiting thread's thread_local
// objects (the kernels' scratch among them) are already destroyed, and compiling or running a kernel
// on it would use freed memory. Skipped in a fork()ed child, which has none of the runtime's threads.
void Runtime::AtExit() {
  // Registered again after libraries create statics (SetLibraryStaticsHook): the last registration runs.
  static std::atomic<bool> ran{false};
  if (ran.exchange(true)) return;
  Runtime* rt = g_runtime.load(std::memory_order_acquire);
  if (rt == nullptr || getpid() != rt->creator_pid_) return;
  std::thread([rt] {
    for (int d = 0; d < rt->num_devices(); ++d) {
      try {
        Sync(Device{d}, SyncCause::kExit, SourceLocation{});
        rt->devices_[static_cast<size_t>(d)]->device->stream().Synchronize();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "lazyrt: warning: at exit, lazy:%d: %s\n", d, e.what());
      }
    }
    WriteDiagnosticsAtExit();  // whichever of LAZYRT_DEBUG, LAZYRT_REPORT, LAZYRT_TRACE asks
  }).join();
}

Runtime::Runtime(Options options) : options_(std::move(options)) {
  absl::StatusOr<std::unique_ptr<pjrt::Client>> client =
      pjrt::Client::Create({.num_devices = options_.devices, .device_memory_bytes = options_.device_memory_bytes});
  if (!client.ok()) throw Error(absl::StrCat("cannot create the device client: ", client.status().message()));
  client_ = *std::move(client);
  pjrt::InProcessCommunicator::Default().set_timeout(
      std::chrono::milliseconds(static_cast<int64_t>(std::min(options_.collective_timeout_ms, 1e15))));
  // Here, with the runtime's other start-up costs, rather than in the first step, and before AtExit is
  // registered: the exit handlers and statics the libraries create as they start then go after it (see
  // PrepareGemmLibraries). (On a device's stream it overlapped the host, but a process exiting meanwhile
  // destroyed oneDNN's statics under the call.)
  pjrt::PrepareGemmLibraries();
  std::atexit(&AtExit);
  pjrt::SetLibraryStaticsHook([] { std::atexit(&AtExit); });  // see the hook's comment in gemm.h
  // Call stacks cost a few microseconds per op: only when someone will read the diagnostics.
  if (options_.debug > 0 || !options_.report.empty() || !options_.trace.empty()) EnableCallStacks();
  for (pjrt::Device* d : client_->devices()) {
    auto state = std::make_unique<DeviceState>();
    state->device = d;
    const bool profile = options_.debug >= 3 || options_.kernel_profile > 0;
    d->set_kernel_profiling(!profile                         ? pjrt::KernelProfiling::kOff
                            : options_.kernel_profile_reruns ? pjrt::KernelProfiling::kTimesAndReruns
                                                             : pjrt::KernelProfiling::kTimes);
    state->rng_seed = options_.seed;
    devices_.push_back(std::move(state));
  }
}

Runtime& Runtime::Get() {
  if (Runtime* r = g_runtime.load(std::memory_order_acquire)) return *r;
  std::lock_guard<std::mutex> lock(InitMutex());
  if (Runtime* r = g_runtime.load(std::memory_order_relaxed)) return *r;
  absl::StatusOr<Options> env = Options::FromEnvironment();
  if (!env.ok()) throw Error(std::string(env.status().message()));
  // Never destroyed: tensors in static storage may outlive any destruction order we could pick.
  Runtime* r = new Runtime(*std::move(env));
  g_runtime.store(r, std::memory_order_release);
  return *r;
}

DeviceState& Runtime::device_state(Device device, const SourceLocation& loc) {
  if (device.index < 0 || device.index >= num_devices()) {
    throw Error(
        absl::StrCat("device ", device.ToString(), " does not exist; this runtime has ", num_devices(),
                     " device(s), lazy:0 to lazy:", num_devices() - 1, " (set LAZYRT_DEVICES or Options::devices)"),
        loc);
  }
  return *devices_[static_cast<size_t>(device.index)];
}

}  // namespace detail

void configure(const Options& options) {
  std::lock_guard<std::mutex> lock(detail::InitMutex());
  if (detail::g_runtime.load() != nullptr) {
    throw Error("configure() must be called before the runtime is first used");
  }
  // The options in code win over the environment, but a LAZYRT_* variable that names no setting (or
  // holds no valid value) is still a mistake to report: a typo must not pass unnoticed.
  if (absl::StatusOr<Options> env = Options::FromEnvironment(); !env.ok())
    throw Error(std::string(env.status().message()));
  if (absl::Status status = options.Check(); !status.ok()) throw Error(std::string(status.message()));
  detail::g_runtime.store(new detail::Runtime(options), std::memory_order_release);
}

const Options& options() { return detail::Runtime::Get().options(); }

}  // namespace lazyrt
