#include "lazy/distributed.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gloo/allgather.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "ir/graph_signature.h"
#include "lazy/distributed_internal.h"
#include "lazy/options.h"
#include "lazy/runtime.h"
#include "lazy/sync.h"
#include "lazy/tracing.h"
#include "lowering/dtype.h"
#include "pjrt_sim/gloo_communicator.h"

namespace lazyrt {
namespace detail {
namespace {

using Store = ::gloo::rendezvous::Store;

// The job this process belongs to, set once by distributed::initialize().
struct Job {
  int rank = 0;
  int world = 1;
  std::string host;
  std::chrono::milliseconds timeout{60'000};
  std::shared_ptr<Store> store;
  std::shared_ptr<::gloo::transport::Device> control_device;
  // All ranks, rank = process rank: the graph-key exchange before each cross-process execution.
  std::shared_ptr<::gloo::rendezvous::Context> control;
  std::unique_ptr<pjrt::GlooCommunicator> communicator;
  std::vector<std::pair<long, std::string>> peers;  // (pid, host) by rank
  std::atomic<int64_t> executions{0};               // cross-process executions started
  std::atomic<uint64_t> last_key{0};
};

std::atomic<Job*> g_job{nullptr};
std::mutex g_init_mu;

std::string ThisHost() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

std::vector<char> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

// How a process of this host is: "has exited", "is stopped (SIGSTOP)", or "" (running, or unknown).
std::string LocalProcessState(long pid) {
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return "has exited";
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return "";
  switch (line[paren + 2]) {
    case 'T':
    case 't': return "is stopped (SIGSTOP or a debugger)";
    case 'Z':
    case 'X': return "has exited (killed or crashed)";
    default: return "";
  }
}

// The ranks of this host that have exited or stopped, as "; rank 1 (pid 42 on vm) has exited", or "".
std::string BlameLocalRanks(const Job& job) {
  std::string blame;
  for (int r = 0; r < job.world; ++r) {
    if (r == job.rank || static_cast<size_t>(r) >= job.peers.size()) continue;
    const auto& [pid, host] = job.peers[static_cast<size_t>(r)];
    if (host != job.host) continue;
    const std::string state = LocalProcessState(pid);
    if (!state.empty()) absl::StrAppend(&blame, "; rank ", r, " (pid ", pid, " on ", host, ") ", state);
  }
  return blame;
}

// What this rank knows of the others when a collective fails: where it was, and which ranks of this
// host have exited or stopped (ranks on other hosts cannot be looked at from here).
std::string DescribeJob(const Job& job) {
  std::string note = absl::StrCat("rank ", job.rank, " of ", job.world, " was at cross-process execution ",
                                  job.executions.load(), " (graph ", ir::HashToHex(job.last_key.load()), ")");
  // A killed peer's sockets close before the kernel shows it exited: look again for a moment.
  std::string blame = BlameLocalRanks(job);
  for (int tries = 0; blame.empty() && tries < 25; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    blame = BlameLocalRanks(job);
  }
  if (blame.empty()) blame = "; no rank on this host has exited or stopped (one on another host may have)";
  return note + blame;
}

// An integer environment variable in [min, max], or nullopt when unset.
std::optional<int> EnvInt(const char* name, int min, int max, const SourceLocation& loc) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::nullopt;
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    throw Error(
        absl::StrCat("distributed::initialize: ", name, "=", text, " is not an integer in [", min, ", ", max, "]"),
        loc);
  }
  return value;
}

void Join(Job& job, const std::string& coordinator, const SourceLocation& loc) {
  constexpr absl::string_view kFile = "file://";
  if (!absl::StartsWith(coordinator, kFile) || coordinator.size() <= kFile.size() || coordinator[kFile.size()] != '/') {
    throw Error(absl::StrCat("distributed::initialize: LAZYRT_COORDINATOR='", coordinator,
                             "' is not file:///absolute/dir (a directory every rank reaches, fresh for each job; "
                             "this Gloo has no TCP store)"),
                loc);
  }
  const std::string dir = coordinator.substr(kFile.size());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(absl::StrCat("distributed::initialize: cannot create ", dir, ": ", ec.message()), loc);
  const std::string where = absl::StrCat("rank ", job.rank, " of ", job.world, " meeting through ", coordinator);
  try {
    job.store = std::make_shared<::gloo::rendezvous::FileStore>(dir);
    ::gloo::transport::tcp::attr attr;
    attr.hostname = job.host;
    job.control_device = ::gloo::transport::tcp::CreateDevice(attr);
    job.store->set(absl::StrCat("lazyrt/process/", job.rank), Bytes(absl::StrCat(getpid(), " ", job.host)));
    job.control = std::make_shared<::gloo::rendezvous::Context>(job.rank, job.world);
    job.control->setTimeout(job.timeout);
    ::gloo::rendezvous::PrefixStore control_store("lazyrt/control", *job.store);
    job.control->connectFullMesh(control_store, job.control_device);
    for (int r = 0; r < job.world; ++r) {
      const std::string key = absl::StrCat("lazyrt/process/", r);
      job.store->wait({key}, job.timeout);
      const std::vector<char> value = job.store->get(key);
      const std::vector<std::string> parts = absl::StrSplit(std::string(value.begin(), value.end()), ' ');
      long pid = 0;
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &pid)) {
        throw Error(absl::StrCat("distributed::initialize: ", where, ": rank ", r, " wrote a malformed entry"), loc);
      }
      job.peers.emplace_back(pid, parts[1]);
    }
  } catch (const ::gloo::Exception& e) {
    throw Error(absl::StrCat("distributed::initialize: ", where, ": not every rank arrived within ",
                             job.timeout.count(), " ms (LAZYRT_COLLECTIVE_TIMEOUT_MS): ", e.what()),
                loc);
  }
  job.communicator = std::make_unique<pjrt::GlooCommunicator>(job.store, job.host, job.timeout);
  job.communicator->set_failure_note([&job] { return DescribeJob(job); });
}

// A node's line in a graph's fingerprint: hash, op, creation site.
std::string Fingerprint(const ir::PostOrder& order) {
  std::string out;
  for (const ir::Node* node : order.nodes()) {
    absl::StrAppend(&out, ir::HashToHex(node->hash()), "\t", ir::OpKindName(node->op()), "\t",
                    ir::LocationText(node->created_at()), "\n");
  }
  return out;
}

}  // namespace

int GlobalDeviceCount() {
  const Job* job = g_job.load();
  const int local = Runtime::Get().num_devices();
  return job == nullptr ? local : job->world * local;
}

pjrt::Device* LocalDevice(Runtime& rt, int64_t id) {
  const Job* job = g_job.load();
  if (job == nullptr) return rt.client().device(static_cast<int>(id));
  const int local = rt.num_devices();
  if (id / local != job->rank) return nullptr;
  return rt.client().device(static_cast<int>(id % local));
}

pjrt::Communicator* CrossProcessCommunicator() {
  Job* job = g_job.load();
  return job == nullptr ? nullptr : job->communicator.get();
}

void AgreeOnGraph(ir::HashValue key, const ir::PostOrder& order, const SourceLocation& loc) {
  Job* job = g_job.load();
  if (job == nullptr) return;
  const int64_t execution = job->executions.fetch_add(1) + 1;
  job->last_key.store(key);
  std::vector<uint64_t> mine = {static_cast<uint64_t>(execution), key};
  std::vector<uint64_t> all(2 * static_cast<size_t>(job->world));
  try {
    ::gloo::AllgatherOptions opts(job->control);
    opts.setInput(mine.data(), mine.size());
    opts.setOutput(all.data(), all.size());
    opts.setTimeout(job->timeout);
    ::gloo::allgather(opts);
  } catch (const ::gloo::Exception& e) {
    throw Error(absl::StrCat("sync: exchanging graph keys before cross-process execution ", execution,
                             " failed: ", e.what(), "; ", DescribeJob(*job)),
                loc);
  }
  int other = -1;
  for (int r = 0; r < job->world && other < 0; ++r) {
    if (all[2 * static_cast<size_t>(r)] != mine[0] || all[2 * static_cast<size_t>(r) + 1] != mine[1]) other = r;
  }
  if (other < 0) return;
  // Every rank saw the mismatch: each publishes its graph's fingerprint, then compares with one other.
  const std::string fingerprint_key = absl::StrCat("lazyrt/graph/", execution, "/");
  std::vector<std::string> theirs;
  try {
    job->store->set(absl::StrCat(fingerprint_key, job->rank), Bytes(Fingerprint(order)));
    job->store->wait({absl::StrCat(fingerprint_key, other)}, job->timeout);
    const std::vector<char> bytes = job->store->get(absl::StrCat(fingerprint_key, other));
    theirs = absl::StrSplit(std::string(bytes.begin(), bytes.end()), '\n', absl::SkipEmpty());
  } catch (const ::gloo::Exception& e) {
    theirs.clear();
  }
  const std::vector<std::string> ours = absl::StrSplit(Fingerprint(order), '\n', absl::SkipEmpty());
  size_t i = 0;
  auto hash_of = [](const std::string& line) { return line.substr(0, line.find('\t')); };
  while (i < ours.size() && i < theirs.size() && hash_of(ours[i]) == hash_of(theirs[i])) ++i;
  auto describe = [](const std::vector<std::string>& lines, size_t n) -> std::string {
    if (n >= lines.size()) return "no such node (its graph is shorter)";
    const std::vector<std::string> parts = absl::StrSplit(lines[n], '\t');
    return parts.size() == 3 ? absl::StrCat(parts[1], " created at ", parts[2]) : lines[n];
  };
  const size_t o = static_cast<size_t>(other);
  throw Error(
      absl::StrCat("sync: the ranks traced different graphs for cross-process execution ", execution, ": rank ",
                   job->rank, " has graph ", ir::HashToHex(key), " (execution ", execution, ", ", order.size(),
                   " nodes), rank ", other, " has graph ", ir::HashToHex(all[2 * o + 1]), " (execution ", all[2 * o],
                   theirs.empty() ? ", its nodes unknown" : absl::StrCat(", ", theirs.size(), " nodes"),
                   "); the first differing node, #", i, " in post order: on rank ", job->rank, " ", describe(ours, i),
                   "; on rank ", other, " ", theirs.empty() ? "unknown" : describe(theirs, i),
                   ". Every rank must trace the same graph each step (no rank-dependent shapes, branches or "
                   "static scalars)"),
      loc);
}

}  // namespace detail

namespace distributed {

void initialize(SourceLocation loc) {
  std::lock_guard<std::mutex> lock(detail::g_init_mu);
  static bool done = false;
  if (done) return;
  // From the environment, not the runtime's options: a program learns its world size here before it
  // configures the runtime's devices.
  absl::StatusOr<Options> from_environment = Options::FromEnvironment();
  ThrowIfError(from_environment.status(), "distributed::initialize", loc);
  const Options& options = *from_environment;
  int world = options.world_size;
  if (world == 0) world = detail::EnvInt("WORLD_SIZE", 1, kMaxProcesses, loc).value_or(0);
  if (world == 0) world = detail::EnvInt("OMPI_COMM_WORLD_SIZE", 1, kMaxProcesses, loc).value_or(1);
  int rank = options.rank;
  if (rank < 0) rank = detail::EnvInt("RANK", 0, kMaxProcesses - 1, loc).value_or(-1);
  if (rank < 0) rank = detail::EnvInt("OMPI_COMM_WORLD_RANK", 0, kMaxProcesses - 1, loc).value_or(-1);
  if (rank < 0 && world == 1) rank = 0;
  if (rank < 0) {
    throw Error(absl::StrCat("distributed::initialize: a world of ", world,
                             " processes but no rank: set LAZYRT_RANK (or RANK, or run under mpirun)"),
                loc);
  }
  if (rank >= world) {
    throw Error(absl::StrCat("distributed::initialize: rank ", rank, " is outside a world of ", world,
                             " processes (ranks 0 to ", world - 1, ")"),
                loc);
  }
  if (world == 1) {
    done = true;
    return;
  }
  // A peer that dies closes its sockets; writing to one must fail the collective (an error naming the
  // rank), not kill this process with SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  if (options.coordinator.empty()) {
    throw Error(absl::StrCat("distributed::initialize: rank ", rank, " of ", world,
                             " has no coordinator: set LAZYRT_COORDINATOR=file:///dir, a directory every rank "
                             "reaches, fresh for each job",
                             std::getenv("MASTER_ADDR") != nullptr
                                 ? " (torchrun's MASTER_ADDR/MASTER_PORT need a TCP store, which this Gloo has not)"
                                 : ""),
                loc);
  }
  auto job = std::make_unique<detail::Job>();
  job->rank = rank;
  job->world = world;
  job->host = detail::ThisHost();
  job->timeout =
      std::chrono::milliseconds(static_cast<int64_t>(std::min(options.collective_timeout_ms, 24.0 * 3600 * 1000)));
  detail::Join(*job, options.coordinator, loc);
  done = true;
  detail::g_job.store(job.release());  // lives as long as the process: stream threads may use it at exit
}

bool initialized() { return detail::g_job.load() != nullptr; }
int rank() { return initialized() ? detail::g_job.load()->rank : 0; }
int world_size() { return initialized() ? detail::g_job.load()->world : 1; }

CollectiveStats collective_stats() {
  const detail::Job* job = detail::g_job.load();
  if (job == nullptr) return {};
  const pjrt::GlooCommunicator::Stats stats = job->communicator->stats();
  return {stats.calls, stats.bytes_received, std::chrono::duration<double>(stats.time).count()};
}

Tensor make_array_from_process_local_data(const Tensor& local, const Mesh& mesh, const PartitionSpec& spec,
                                          SourceLocation loc) {
  constexpr const char* kOp = "make_array_from_process_local_data";
  detail::Runtime& rt = detail::Runtime::Get();
  detail::TensorImpl& impl = detail::ImplOf(local, kOp, loc);
  if (local.is_pending()) detail::Sync({impl.device}, SyncCause::kToHost, loc);
  if (impl.buffer == nullptr) {
    throw Error(absl::StrCat(kOp, ": `local` must be a tensor of one device (got one laid out over a mesh)"), loc);
  }
  const ir::Shape& shape = impl.shape;
  std::vector<unsigned char> bytes(static_cast<size_t>(shape.byte_size()));
  ThrowIfError(impl.buffer->ToHost(bytes.data(), bytes.size()), kOp, loc);

  // The split dim (at most one) and which of its pieces this process's partitions hold.
  std::vector<int64_t> dim_axes(static_cast<size_t>(shape.rank()), -1);
  int64_t split_dim = -1;
  for (size_t d = 0; d < spec.size() && d < dim_axes.size(); ++d) {
    if (!spec[d]) continue;
    const std::optional<int64_t> axis = mesh.axis_index(*spec[d]);
    if (!axis) break;  // mark_sharding below names the error
    if (split_dim >= 0) {
      throw Error(absl::StrCat(kOp, ": the spec splits dims ", split_dim, " and ", d, "; at most one dim is split"),
                  loc);
    }
    split_dim = static_cast<int64_t>(d);
    dim_axes[d] = *axis;
  }
  const std::vector<int64_t>& mesh_shape = mesh.shape();
  std::vector<size_t> local_partitions;
  std::vector<int64_t> pieces_here;
  for (size_t p = 0; p < mesh.device_ids().size(); ++p) {
    if (detail::LocalDevice(rt, mesh.device_ids()[p]) == nullptr) continue;
    local_partitions.push_back(p);
    if (split_dim < 0) continue;
    // The partition's coordinate along the split axis (row-major mesh).
    int64_t rest = static_cast<int64_t>(p), coord = 0;
    for (size_t a = mesh_shape.size(); a-- > 0;) {
      if (static_cast<int64_t>(a) == dim_axes[static_cast<size_t>(split_dim)]) coord = rest % mesh_shape[a];
      rest /= mesh_shape[a];
    }
    if (std::find(pieces_here.begin(), pieces_here.end(), coord) == pieces_here.end()) pieces_here.push_back(coord);
  }
  if (local_partitions.empty()) {
    throw Error(absl::StrCat(kOp, ": no device of mesh ", mesh.ToString(), " is on rank ", distributed::rank()), loc);
  }
  std::vector<int64_t> dims(shape.dims().begin(), shape.dims().end());
  int64_t first_piece = 0;
  if (split_dim >= 0) {
    std::sort(pieces_here.begin(), pieces_here.end());
    const int64_t held = static_cast<int64_t>(pieces_here.size());
    first_piece = pieces_here.front();
    if (pieces_here.back() - first_piece + 1 != held) {
      throw Error(absl::StrCat(kOp, ": rank ", distributed::rank(), "'s partitions of mesh ", mesh.ToString(),
                               " hold pieces that are not consecutive along dim ", split_dim),
                  loc);
    }
    const int64_t d = dims[static_cast<size_t>(split_dim)];
    if (d % held != 0) {
      throw Error(absl::StrCat(kOp, ": dim ", split_dim, " of the local ", shape.ToString(),
                               " cannot be split into the ", held, " pieces this rank's partitions hold"),
                  loc);
    }
    dims[static_cast<size_t>(split_dim)] =
        d / held * mesh_shape[static_cast<size_t>(dim_axes[static_cast<size_t>(split_dim)])];
  }
  // The global array with this process's part in place (the rest is never read: it is other ranks').
  const ir::Shape global_shape(shape.dtype(), dims);
  const int64_t width = pjrt::ByteWidth(lowering::DeviceType(shape.dtype()));
  std::vector<unsigned char> global(static_cast<size_t>(global_shape.byte_size()));
  if (split_dim < 0) {
    global = bytes;
  } else {
    int64_t outer = 1, inner = width;
    for (int64_t d = 0; d < split_dim; ++d) outer *= dims[static_cast<size_t>(d)];
    for (size_t d = static_cast<size_t>(split_dim) + 1; d < dims.size(); ++d) inner *= dims[d];
    const int64_t local_rows = shape.dim(split_dim);
    const int64_t global_rows = dims[static_cast<size_t>(split_dim)];
    const int64_t offset =
        first_piece * (global_rows / mesh_shape[static_cast<size_t>(dim_axes[static_cast<size_t>(split_dim)])]);
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(global.data() + (o * global_rows + offset) * inner, bytes.data() + o * local_rows * inner,
                  static_cast<size_t>(local_rows * inner));
    }
  }
  auto data = std::make_shared<detail::ShardedData>();
  data->mesh_shape = mesh_shape;
  data->mesh_devices = mesh.device_ids();
  data->dim_axes = dim_axes;
  data->shards.resize(mesh.device_ids().size());
  for (size_t p : local_partitions) {
    std::vector<int64_t> piece_dims = dims;
    if (split_dim >= 0) {
      piece_dims[static_cast<size_t>(split_dim)] /=
          mesh_shape[static_cast<size_t>(dim_axes[static_cast<size_t>(split_dim)])];
    }
    const std::vector<unsigned char> piece =
        detail::ShardBytes(global, dims, width, dim_axes, mesh_shape, static_cast<int64_t>(p));
    absl::StatusOr<std::shared_ptr<pjrt::Buffer>> buffer =
        rt.client().BufferFromHost(piece.data(), pjrt::ArrayShape{lowering::DeviceType(shape.dtype()), piece_dims},
                                   detail::LocalDevice(rt, mesh.device_ids()[p]));
    ThrowIfError(buffer.status(), kOp, loc);
    data->shards[p] = *std::move(buffer);
  }
  Tensor out = detail::NewTensor(global_shape, 0, loc);
  out.impl()->sharded = std::move(data);
  return mark_sharding(out, mesh, spec, loc);
}

}  // namespace distributed
}  // namespace lazyrt
