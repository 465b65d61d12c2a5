#include "pjrt_sim/executable.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message.h"
#include "google/protobuf/wire_format_lite.h"
#include "pjrt_sim/communicator.h"
#include "pjrt_sim/cpu_isa.h"
#include "pjrt_sim/device.h"
#include "pjrt_sim/hlo.h"
#include "pjrt_sim/kernels/collectives.h"
#include "pjrt_sim/kernels/strided_view.h"
#include "pjrt_sim/module_verifier.h"
#include "pjrt_sim/replica_groups.h"
#include "pjrt_sim/status_macros.h"
#include "pjrt_sim/thread_pool.h"
#include "pjrt_sim/version.h"

namespace lazyrt::pjrt {
namespace {

constexpr char kMagic[8] = {'L', 'Z', 'R', 'T', 'E', 'X', 'E', '\n'};
constexpr size_t kHeaderBytes = 8 + 4 + 8;
constexpr int64_t kMaxBytes = int64_t{1} << 40;

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("invalid executable: ", what));
}

constexpr absl::string_view kProducerFormatSeparator = "; executable format ";

// Parsing allocates an object for every message in the bytes, and an empty message takes two bytes
// on the wire but a hundred or more in memory: a small payload can make protobuf allocate gigabytes
// and abort. So the bytes are walked first, charging each message its in-memory size and each
// repeated element 8 bytes, and refused beyond this many bytes.
constexpr uint64_t kMaxParsedBytes = uint64_t{256} << 20;
// No executable the compiler writes is near this; the bound comes before any walk or parse.
constexpr uint64_t kMaxSerializedBytes = uint64_t{128} << 20;
constexpr int kMaxNesting = 32;

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

// Adds to `charged` what parsing the message `type` in `in` (up to its limit) would allocate; false
// as soon as that passes kMaxParsedBytes or the bytes are not wire format.
bool ChargeParse(google::protobuf::io::CodedInputStream& in, const Descriptor* type, int depth, uint64_t& charged) {
  if (depth > kMaxNesting) return false;
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return true;  // the end (or an error, which the parse itself reports)
    const FieldDescriptor* field = type == nullptr ? nullptr : type->FindFieldByNumber(static_cast<int>(tag >> 3));
    const bool repeated = field != nullptr && field->is_repeated();
    switch (WireFormatLite::GetTagWireType(tag)) {
      case WireFormatLite::WIRETYPE_VARINT: {
        uint64_t ignored;
        if (!in.ReadVarint64(&ignored)) return false;
        if (repeated) charged += 8;
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED64:
        if (!in.Skip(8)) return false;
        if (repeated) charged += 8;
        break;
      case WireFormatLite::WIRETYPE_FIXED32:
        if (!in.Skip(4)) return false;
        if (repeated) charged += 8;
        break;
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t length;
        if (!in.ReadVarint32(&length)) return false;
        if (field != nullptr && field->type() == FieldDescriptor::TYPE_MESSAGE) {
          const Descriptor* sub = field->message_type();
          charged += google::protobuf::MessageFactory::generated_factory()->GetPrototype(sub)->SpaceUsedLong();
          if (charged > kMaxParsedBytes) return false;
          const auto limit = in.PushLimit(static_cast<int>(length));
          if (!ChargeParse(in, sub, depth + 1, charged) || !in.ConsumedEntireMessage()) return false;
          in.PopLimit(limit);
        } else {
          // A packed list holds at most one element per byte; strings and unknown fields are copied.
          charged +=
              repeated && field->type() != FieldDescriptor::TYPE_STRING && field->type() != FieldDescriptor::TYPE_BYTES
                  ? uint64_t{8} * length
                  : length;
          if (!in.Skip(static_cast<int>(length))) return false;
        }
        break;
      }
      default: return false;  // groups: never written
    }
    if (charged > kMaxParsedBytes) return false;
  }
}

absl::Status CheckShape(const proto::Shape& s, const std::string& what) {
  if (!proto::ElementType_IsValid(s.type()) || s.dims_size() > 16) return Invalid(absl::StrCat(what, ": bad shape"));
  for (int64_t d : s.dims()) {
    if (d < 0 || d > kMaxElements) return Invalid(absl::StrCat(what, ": bad dimension"));
  }
  if (!DimsInRange({s.dims().data(), static_cast<size_t>(s.dims_size())})) {
    return Invalid(absl::StrCat(what, ": too large"));
  }
  return absl::OkStatus();
}

// The slot whose bytes `slot` uses: itself, or what its aliases name (each an earlier slot: checked).
int64_t Storage(const proto::Executable& e, int64_t slot) {
  while (e.slots(static_cast<int>(slot)).kind() == proto::Slot::ALIAS) slot = e.slots(static_cast<int>(slot)).index();
  return slot;
}

// The arena bytes of `slot` (aliases resolved) as [begin, end), or nothing for memory of its own.
std::optional<std::pair<int64_t, int64_t>> ArenaBytes(const proto::Executable& e, int64_t slot,
                                                      std::span<const ArrayShape> slot_shapes) {
  slot = Storage(e, slot);
  const proto::Slot& s = e.slots(static_cast<int>(slot));
  if (s.kind() != proto::Slot::ARENA) return std::nullopt;
  return std::pair{s.offset(), s.offset() + slot_shapes[static_cast<size_t>(slot)].byte_size()};
}

// Buffer assignment never lets the arrays a kernel writes share arena bytes with each other or with those it
// reads (their lives meet at the kernel). Where they did, a kernel would copy between overlapping bytes
// (memcpy) and its threads write what others read: refused. Slot indices are checked.
absl::Status CheckArenaBytesApart(const proto::Executable& e, int k, std::span<const ArrayShape> slot_shapes) {
  const proto::Kernel& kernel = e.kernels(k);
  std::vector<int64_t> writes = {kernel.output()};
  writes.insert(writes.end(), kernel.extra_outputs().begin(), kernel.extra_outputs().end());
  for (size_t w = 0; w < writes.size(); ++w) {
    const auto out = ArenaBytes(e, writes[w], slot_shapes);
    if (!out) continue;
    std::vector<int64_t> others(kernel.inputs().begin(), kernel.inputs().end());
    others.insert(others.end(), writes.begin() + static_cast<std::ptrdiff_t>(w) + 1, writes.end());
    for (int64_t other : others) {
      const auto bytes = ArenaBytes(e, other, slot_shapes);
      if (bytes && out->first < bytes->second && bytes->first < out->second) {
        return Invalid(absl::StrCat("kernel ", k, " writes slot ", writes[w], ", whose arena bytes overlap slot ",
                                    other, "'s, which it also reads or writes"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<proto::Executable> Executable::Parse(absl::string_view bytes) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, 8) != 0) {
    return Invalid("not a serialized lazyrt executable (bad magic)");
  }
  uint32_t version;
  uint64_t length;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&length, bytes.data() + 12, 8);
  if (version != kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("executable format version ", version, ", this runtime reads ", kFormatVersion));
  }
  if (length != bytes.size() - kHeaderBytes) {
    return Invalid(
        absl::StrCat("length ", length, " does not match the ", bytes.size() - kHeaderBytes, " bytes present"));
  }
  if (length > kMaxSerializedBytes) {
    return Invalid(absl::StrCat("a body of ", length, " bytes; no executable is over ", kMaxSerializedBytes));
  }
  {
    google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data() + kHeaderBytes),
                                              static_cast<int>(length));
    uint64_t charged = 0;
    if (!ChargeParse(in, proto::Executable::descriptor(), 0, charged)) {
      return Invalid(charged > kMaxParsedBytes
                         ? absl::StrCat("parsing would allocate more than ", kMaxParsedBytes, " bytes")
                         : std::string("unparsable body"));
    }
  }
  proto::Executable exe;
  if (!exe.ParseFromArray(bytes.data() + kHeaderBytes, static_cast<int>(length))) return Invalid("unparsable body");
  return exe;
}

std::string Executable::ProducerVersion() { return pjrt::ProducerVersion::Current().ToString(); }

std::string ProducerVersion::ToString() const {
  return absl::StrCat(compiler, kProducerFormatSeparator, executable_format);
}

std::optional<ProducerVersion> ProducerVersion::Parse(absl::string_view text) {
  const size_t separator = text.find(kProducerFormatSeparator);
  if (separator == absl::string_view::npos || separator == 0) return std::nullopt;
  ProducerVersion version{std::string(text.substr(0, separator)), 0};
  if (!absl::SimpleAtoi(text.substr(separator + kProducerFormatSeparator.size()), &version.executable_format)) {
    return std::nullopt;
  }
  return version;
}

std::string Executable::Serialize() const {
  // Deterministic, so that one executable always has the same bytes: protobuf otherwise writes map
  // entries (the op histogram) in an order seeded per process.
  std::string body;
  {
    google::protobuf::io::StringOutputStream stream(&body);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    proto_.SerializeToCodedStream(&coded);
  }
  std::string out(kHeaderBytes, '\0');
  std::memcpy(out.data(), kMagic, 8);
  const uint32_t version = kFormatVersion;
  const uint64_t length = body.size();
  std::memcpy(out.data() + 8, &version, 4);
  std::memcpy(out.data() + 12, &length, 8);
  return out + body;
}

namespace {

// An SPMD executable's mesh has its partitions, and each parameter and result sharding one mesh axis (or
// none) per dim of that value, each axis at most once.
absl::Status CheckShardings(const proto::Executable& p) {
  const bool spmd = !p.mesh().shape().empty();
  if (!spmd && p.parameter_shardings().empty() && p.output_shardings().empty()) return absl::OkStatus();
  int64_t partitions = 1;
  for (int64_t size : p.mesh().shape()) {
    if (size < 1 || size > kMaxPartitions) return absl::InvalidArgumentError("mesh axis size out of range");
    partitions *= size;
    if (partitions > kMaxPartitions) return absl::InvalidArgumentError("mesh too large");
  }
  if (!spmd || partitions != std::max<int64_t>(p.num_partitions(), 1) || p.mesh().device_ids_size() != partitions ||
      p.parameter_shardings_size() != p.parameters_size() || p.output_shardings_size() != p.outputs_size()) {
    return absl::InvalidArgumentError("mesh and shardings do not match the partitions, parameters and results");
  }
  auto check = [&](const proto::Sharding& s) {
    std::vector<bool> used(static_cast<size_t>(p.mesh().shape_size()), false);
    for (int64_t axis : s.dim_axes()) {
      if (axis == -1) continue;
      if (axis < -1 || axis >= p.mesh().shape_size() || used[static_cast<size_t>(axis)]) return false;
      used[static_cast<size_t>(axis)] = true;
    }
    return true;
  };
  for (int i = 0; i < p.parameters_size(); ++i) {
    const proto::Sharding& s = p.parameter_shardings(i);
    if (!check(s) || (!s.dim_axes().empty() && s.dim_axes_size() != p.parameters(i).dims_size())) {
      return absl::InvalidArgumentError(absl::StrCat("parameter ", i, "'s sharding is invalid"));
    }
  }
  for (const proto::Sharding& s : p.output_shardings()) {
    if (!check(s) || s.dim_axes_size() > 64) return absl::InvalidArgumentError("a result's sharding is invalid");
  }
  // The diagnostics' records: shardings of their value's rank, sizes that cannot be negative.
  for (const proto::Resharding& r : p.reshardings()) {
    auto fits = [&](const proto::Sharding& s) {
      return check(s) && (s.dim_axes().empty() || s.dim_axes_size() == r.shape().dims_size());
    };
    if (!CheckShape(r.shape(), "a resharded value").ok() || !fits(r.had()) || !fits(r.needed()) || r.origin() < 0 ||
        r.consumer_origin() < 0 || r.bytes_per_partition() < 0 || r.consumer().size() > 256) {
      return absl::InvalidArgumentError("a resharding record is invalid");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<Executable>> Executable::Load(proto::Executable p) {
  if (p.compiler_version() != kCompilerVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("executable compiled by '", p.compiler_version(), "', this runtime is '", kCompilerVersion, "'"));
  }
  if (p.device_kind() != Device::kKind) {
    return absl::FailedPreconditionError(
        absl::StrCat("executable built for device kind '", p.device_kind(), "', not '", Device::kKind, "'"));
  }
  // Tuned choices (the GEMM library and panels of each DOT) are measurements of kernels the libraries
  // pick by the CPU's features: refused on other features rather than re-tuned, since loading never
  // runs a compiler pass. The caller compiles again (a persistent-cache miss with this reason).
  if (p.cpu_isa() != HostIsa()) {
    return absl::FailedPreconditionError(absl::StrCat("executable tuned on a CPU with '", p.cpu_isa().substr(0, 200),
                                                      "', this CPU has '", HostIsa(), "'"));
  }
  if (p.arena_bytes() < 0 || p.arena_bytes() > kMaxBytes) return Invalid("arena size out of range");
  if (p.num_partitions() < 0 || p.num_partitions() > kMaxPartitions) {
    return Invalid(absl::StrCat("num_partitions ", p.num_partitions(), " is outside [0, ", kMaxPartitions, "]"));
  }
  RETURN_IF_ERROR(CheckShardings(p));
  std::shared_ptr<Executable> exe(new Executable(std::move(p)));
  const proto::Executable& e = exe->proto_;
  for (int i = 0; i < e.parameters_size(); ++i) {
    RETURN_IF_ERROR(CheckShape(e.parameters(i), absl::StrCat("parameter ", i)));
    exe->parameter_shapes_.push_back(FromProto(e.parameters(i)));
  }
  std::vector<ArrayShape> slot_shapes;
  std::vector<bool> written(static_cast<size_t>(e.slots_size()), false);
  std::vector<bool> output_claimed(static_cast<size_t>(e.outputs_size()), false);
  for (int s = 0; s < e.slots_size(); ++s) {
    const proto::Slot& slot = e.slots(s);
    const std::string what = absl::StrCat("slot ", s);
    RETURN_IF_ERROR(CheckShape(slot.shape(), what));
    const ArrayShape shape = FromProto(slot.shape());
    switch (slot.kind()) {
      case proto::Slot::PARAMETER:
        if (slot.index() < 0 || slot.index() >= e.parameters_size() ||
            !(FromProto(e.parameters(static_cast<int>(slot.index()))) == shape)) {
          return Invalid(absl::StrCat(what, ": bad parameter"));
        }
        written[static_cast<size_t>(s)] = true;
        break;
      case proto::Slot::ALIAS:
        if (slot.index() < 0 || slot.index() >= s ||
            slot_shapes[static_cast<size_t>(slot.index())].byte_size() != shape.byte_size()) {
          return Invalid(absl::StrCat(what, ": bad alias"));
        }
        break;
      case proto::Slot::ARENA:
        if (slot.offset() < 0 || slot.offset() > e.arena_bytes() - shape.byte_size()) {
          return Invalid(absl::StrCat(what, ": outside the arena"));
        }
        // Buffer assignment places every value on a 64-byte boundary; kernels rely on aligned elements.
        if (slot.offset() % 64 != 0) return Invalid(absl::StrCat(what, ": misaligned arena offset ", slot.offset()));
        break;
      case proto::Slot::OUTPUT:
        if (slot.index() < 0 || slot.index() >= e.outputs_size() || e.outputs(static_cast<int>(slot.index())) != s ||
            output_claimed[static_cast<size_t>(slot.index())]) {
          return Invalid(absl::StrCat(what, ": bad result index"));
        }
        output_claimed[static_cast<size_t>(slot.index())] = true;
        break;
      default: return Invalid(absl::StrCat(what, ": unknown kind"));
    }
    slot_shapes.push_back(shape);
  }
  // Elements times program steps over all kernels, counted up to where inlining is out of the question.
  constexpr int64_t kMostElementSteps = Stream::kMaxWakeNs / kNsPerElementStep + 1;
  int64_t element_steps = 0;
  bool any_gemm = false;
  for (int k = 0; k < e.kernels_size(); ++k) {
    const proto::Kernel& kernel = e.kernels(k);
    std::vector<ArrayShape> inputs;
    for (int64_t in : kernel.inputs()) {
      if (in < 0 || in >= e.slots_size() || !written[static_cast<size_t>(Storage(e, in))]) {
        return Invalid(absl::StrCat("kernel ", k, " reads slot ", in, " before it is written"));
      }
      inputs.push_back(slot_shapes[static_cast<size_t>(in)]);
    }
    const auto writable = [&](int64_t slot) {
      return slot >= 0 && slot < e.slots_size() &&
             (e.slots(static_cast<int>(slot)).kind() == proto::Slot::ARENA ||
              e.slots(static_cast<int>(slot)).kind() == proto::Slot::OUTPUT);
    };
    const int64_t out = kernel.output();
    if (!writable(out)) return Invalid(absl::StrCat("kernel ", k, " writes a slot it may not"));
    if (kernel.operand_views_size() > 0 && !ReadsOperandViews(kernel.kind())) {
      return Invalid(
          absl::StrCat("kernel ", k, " (", proto::Kernel::Kind_Name(kernel.kind()),
                       ") has operand views, which only ATTENTION, ATTENTION_GRAD, CONCATENATE and DOT read"));
    }
    if (kernel.result_views_size() > 0 && kernel.kind() != proto::Kernel::ATTENTION_GRAD) {
      return Invalid(absl::StrCat("kernel ", k, " (", proto::Kernel::Kind_Name(kernel.kind()),
                                  ") has result views, which only ATTENTION_GRAD writes through"));
    }
    std::vector<ArrayShape> extra_outputs;
    for (int64_t extra : kernel.extra_outputs()) {
      if (!writable(extra)) return Invalid(absl::StrCat("kernel ", k, " writes a slot it may not"));
      extra_outputs.push_back(slot_shapes[static_cast<size_t>(extra)]);
    }
    RETURN_IF_ERROR(CheckArenaBytesApart(e, k, slot_shapes));
    absl::StatusOr<std::unique_ptr<Kernel>> built =
        kernel.kind() == proto::Kernel::COLLECTIVE
            ? BuildCollectiveKernel(kernel, inputs, slot_shapes[static_cast<size_t>(out)], e.num_partitions())
            : BuildKernel(kernel, inputs, slot_shapes[static_cast<size_t>(out)], extra_outputs);
    if (!built.ok()) return Invalid(std::string(built.status().message()));
    // Checked by the kinds that have one; counted below for any kind that carries one.
    if (kernel.has_iteration_shape()) {
      RETURN_IF_ERROR(CheckShape(kernel.iteration_shape(), absl::StrCat("kernel ", k, "'s iteration space")));
    }
    // A loop's iteration space; otherwise the largest array the kernel touches (an argmax reads far more
    // than it writes).
    int64_t elements = kernel.has_iteration_shape() ? FromProto(kernel.iteration_shape()).numel()
                                                    : slot_shapes[static_cast<size_t>(out)].numel();
    for (const ArrayShape& in : inputs) elements = std::max(elements, in.numel());
    element_steps =
        std::min(element_steps + std::clamp<int64_t>(elements, 1, kMostElementSteps) * (kernel.program_size() + 1),
                 kMostElementSteps);
    any_gemm = any_gemm || kernel.kind() == proto::Kernel::DOT || kernel.kind() == proto::Kernel::ATTENTION ||
               kernel.kind() == proto::Kernel::ATTENTION_GRAD;
    exe->checks_indices_ = exe->checks_indices_ || kernel.site() > 0;
    exe->kernels_.push_back(*std::move(built));
    written[static_cast<size_t>(out)] = true;
    for (int64_t extra : kernel.extra_outputs()) written[static_cast<size_t>(extra)] = true;
  }
  for (int j = 0; j < e.outputs_size(); ++j) {
    const int64_t s = e.outputs(j);
    if (s < 0 || s >= e.slots_size() || !written[static_cast<size_t>(Storage(e, s))]) {
      return Invalid(absl::StrCat("result ", j, " is never computed"));
    }
    exe->output_shapes_.push_back(slot_shapes[static_cast<size_t>(s)]);
  }
  exe->inline_ns_ = any_gemm ? kNeverInline : element_steps * kNsPerElementStep;
  bool split_before = false;
  for (size_t k = 0; ThreadPool::Get().size() > 1 && k < exe->kernels_.size() && exe->spare_core_kernel_ < 0; ++k) {
    const bool splits = exe->kernels_[k]->SplitsOverPool();
    if (!splits && split_before) exe->spare_core_kernel_ = static_cast<int64_t>(k);
    split_before = split_before || splits;
  }
  exe->kernel_times_ = std::make_unique<AtomicKernelTime[]>(exe->kernels_.size());
  return exe;
}

std::vector<void*> Executable::SlotPointers(std::span<void* const> params, void* arena,
                                            std::span<void* const> outputs) const {
  std::vector<void*> ptrs(static_cast<size_t>(proto_.slots_size()), nullptr);
  for (int s = 0; s < proto_.slots_size(); ++s) {
    const proto::Slot& slot = proto_.slots(s);
    switch (slot.kind()) {
      case proto::Slot::PARAMETER: ptrs[static_cast<size_t>(s)] = params[static_cast<size_t>(slot.index())]; break;
      case proto::Slot::ALIAS: ptrs[static_cast<size_t>(s)] = ptrs[static_cast<size_t>(slot.index())]; break;
      case proto::Slot::ARENA: ptrs[static_cast<size_t>(s)] = static_cast<char*>(arena) + slot.offset(); break;
      case proto::Slot::OUTPUT: ptrs[static_cast<size_t>(s)] = outputs[static_cast<size_t>(slot.index())]; break;
      case proto::Slot_Kind_Slot_Kind_INT_MIN_SENTINEL_DO_NOT_USE_:
      case proto::Slot_Kind_Slot_Kind_INT_MAX_SENTINEL_DO_NOT_USE_: break;  // Load refused them
    }
  }
  return ptrs;
}

namespace {
// A kernel's index error, prefixed by the op that indexed: the caller's name for its site, else the
// kernel's opcode.
absl::Status NameIndexError(absl::Status status, const proto::Kernel& kernel, const Executable::SiteNamer& name_site) {
  if (!absl::IsOutOfRange(status)) return status;
  std::string op = kernel.site() > 0 && name_site ? name_site(kernel.site()) : "";
  if (op.empty()) {
    op = kernel.kind() == proto::Kernel::INDEX_SELECT    ? "index_select"
         : kernel.kind() == proto::Kernel::GATHER        ? "gather"
         : OpcodeFromNumber(kernel.opcode()).has_value() ? OpcodeName(static_cast<Opcode>(kernel.opcode()))
                                                         : proto::Kernel::Kind_Name(kernel.kind());
  }
  return absl::OutOfRangeError(absl::StrCat(op, ": ", status.message()));
}
}  // namespace

absl::Status Executable::RunKernels(std::span<void* const> slot_ptrs, KernelProfiling profile,
                                    const SiteNamer& name_site, const PartitionContext* where,
                                    Event* spare_core) const {
  using Clock = std::chrono::steady_clock;
  PartitionContext at = where != nullptr ? *where : PartitionContext{};
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::optional<Clock::time_point> spare_core_start;
  for (size_t k = 0; k < kernels_.size(); ++k) {
    const proto::Kernel& kernel = proto_.kernels(static_cast<int>(k));
    if (spare_core != nullptr && static_cast<int64_t>(k) == spare_core_kernel_) {
      spare_core_start = Clock::now();
      spare_core->Set(absl::OkStatus());
    }
    inputs.clear();
    for (int64_t in : kernel.inputs()) inputs.push_back(slot_ptrs[static_cast<size_t>(in)]);
    outputs.assign(1, slot_ptrs[static_cast<size_t>(kernel.output())]);
    for (int64_t extra : kernel.extra_outputs()) outputs.push_back(slot_ptrs[static_cast<size_t>(extra)]);
    const bool timed = profile != KernelProfiling::kOff;
    const Clock::time_point start = timed ? Clock::now() : Clock::time_point{};
    at.kernel = static_cast<int64_t>(k);
    if (absl::Status s = kernels_[k]->RunOn(at, inputs, outputs); !s.ok())
      return NameIndexError(std::move(s), kernel, name_site);
    if (!timed) continue;
    const auto ns_since = [](Clock::time_point from) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - from).count();
    };
    const int64_t ns = ns_since(start);
    const bool first = kernel_times_[k].runs.fetch_add(1, std::memory_order_relaxed) == 0;
    if (first) kernel_times_[k].first_ns.store(ns, std::memory_order_relaxed);
    kernel_times_[k].total_ns.fetch_add(ns, std::memory_order_relaxed);
    // Again on the same slots, after every run but the first (which pays its one-off costs). Every kernel
    // computes its outputs from its inputs alone, and its arena outputs share no bytes with its inputs (checked
    // at load: CheckArenaBytesApart), so a second run computes the same bits; a kernel that reads an array it
    // writes (in place: a scatter-add into its own input) is not run again, nor a collective, which the other
    // partitions would have to join.
    const auto writes_what_it_reads = [&] {
      return std::ranges::any_of(outputs, [&](void* out) { return std::ranges::find(inputs, out) != inputs.end(); });
    };
    if (profile == KernelProfiling::kTimesAndReruns && !first && kernel.kind() != proto::Kernel::COLLECTIVE &&
        !writes_what_it_reads()) {
      const Clock::time_point again = Clock::now();
      if (absl::Status s = kernels_[k]->RunOn(at, inputs, outputs); !s.ok())
        return NameIndexError(std::move(s), kernel, name_site);
      kernel_times_[k].reruns.fetch_add(1, std::memory_order_relaxed);
      kernel_times_[k].rerun_ns.fetch_add(ns_since(again), std::memory_order_relaxed);
    }
  }
  // With reruns the rest of the execution ran twice: not what the host can count on.
  if (spare_core_start && profile != KernelProfiling::kTimesAndReruns) {
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - *spare_core_start).count();
    // Racing updates by executions on several devices may lose one, which an average can afford.
    const int64_t old = after_spare_core_ns_.load(std::memory_order_relaxed);
    after_spare_core_ns_.store(old < 0 ? ns : (3 * old + ns) / 4, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

std::vector<Executable::KernelTime> Executable::kernel_times() const {
  std::vector<KernelTime> times(kernels_.size());
  for (size_t k = 0; k < kernels_.size(); ++k) {
    times[k] = {kernel_times_[k].runs.load(std::memory_order_relaxed),
                kernel_times_[k].total_ns.load(std::memory_order_relaxed),
                kernel_times_[k].first_ns.load(std::memory_order_relaxed),
                kernel_times_[k].reruns.load(std::memory_order_relaxed),
                kernel_times_[k].rerun_ns.load(std::memory_order_relaxed)};
  }
  return times;
}

std::string KernelIterationText(const proto::Executable& exe, const proto::Kernel& kernel) {
  if (kernel.kind() == proto::Kernel::DOT) {
    return absl::StrFormat("%d x [%dx%d]x[%dx%d]", kernel.batch(), kernel.m(), kernel.k(), kernel.k(), kernel.n());
  }
  const bool written = !kernel.has_iteration_shape() && kernel.output() >= 0 && kernel.output() < exe.slots_size();
  const proto::Shape& shape = written ? exe.slots(static_cast<int>(kernel.output())).shape() : kernel.iteration_shape();
  if (shape.dims().empty()) return "scalar";
  return absl::StrJoin(shape.dims(), "x");
}

absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> Executable::Execute(std::span<const std::shared_ptr<Buffer>> args,
                                                                         Device* device, SiteNamer name_site,
                                                                         std::shared_ptr<Event> spare_core) const {
  if (num_partitions() != 1) {
    return absl::FailedPreconditionError(absl::StrCat("executable '", proto_.module_name(), "' runs as ",
                                                      num_partitions(), " partitions: use ExecutePartitioned"));
  }
  const std::vector<std::shared_ptr<Buffer>> partition_args(args.begin(), args.end());
  ASSIGN_OR_RETURN(std::vector<std::vector<std::shared_ptr<Buffer>>> results,
                   ExecutePartitioned(std::span(&partition_args, 1), std::span(&device, 1), nullptr,
                                      std::move(name_site), std::move(spare_core)));
  return std::move(results[0]);
}

namespace {
// A unique id per partitioned execution in this process: the key under which its partitions meet.
std::atomic<uint64_t> g_next_run_id{1};
// Held while one partitioned execution enqueues its partitions. Streams run in order, so executions
// enqueued whole, one after another, are in the same order on every device; two enqueued at once on
// shared devices could each be first on a different device and wait for each other there.
std::mutex g_partitioned_submit_mu;
}  // namespace

absl::StatusOr<std::vector<std::vector<std::shared_ptr<Buffer>>>> Executable::ExecutePartitioned(
    std::span<const std::vector<std::shared_ptr<Buffer>>> args, std::span<Device* const> devices,
    Communicator* communicator, SiteNamer name_site, std::shared_ptr<Event> spare_core) const {
  const size_t partitions = static_cast<size_t>(num_partitions());
  if (devices.size() != partitions || args.size() != partitions) {
    return absl::InvalidArgumentError(absl::StrCat("executable '", proto_.module_name(), "' runs as ", partitions,
                                                   " partition(s): got ", devices.size(), " device(s) and ",
                                                   args.size(), " argument list(s)"));
  }
  size_t elsewhere = 0;
  for (size_t p = 0; p < partitions; ++p) {
    if (devices[p] == nullptr) {
      if (communicator == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("partition ", p, ": no device (and no communicator to reach it)"));
      }
      ++elsewhere;
      continue;
    }
    for (size_t q = 0; q < p; ++q) {
      if (devices[q] == devices[p]) {
        return absl::InvalidArgumentError(absl::StrCat("partitions ", q, " and ", p, " both on ",
                                                       devices[p]->DebugString(),
                                                       ": each partition needs a device of its own"));
      }
    }
  }
  if (elsewhere == partitions) return absl::InvalidArgumentError("no partition runs here: every device is null");
  // Everything is checked and allocated (the arena reserved: Device::ReserveArena) for every partition before
  // any starts, so that a failure leaves no partition waiting at a collective for the others; a host that
  // cannot provide a reserved arena's block fails the run as it starts, and its collectives abort.
  struct Partition {
    std::vector<std::shared_ptr<DeviceMemory>> arg_memory;
    std::vector<std::shared_ptr<Event>> arg_ready;
    std::shared_ptr<DeviceMemory> arena;
    std::vector<std::shared_ptr<DeviceMemory>> out_memory;
    // One event for all of a partition's results: they are ready (or failed) together, and a step
    // with 23 results made and set 23 events, each a mutex and a condition variable.
    std::shared_ptr<Event> done = std::make_shared<Event>();
  };
  std::vector<Partition> runs(partitions);
  std::vector<std::vector<std::shared_ptr<Buffer>>> results(partitions);
  for (size_t p = 0; p < partitions; ++p) {
    const std::string where = partitions > 1 ? absl::StrCat("partition ", p, ": ") : "";
    Device* device = devices[p];
    if (device == nullptr) continue;
    if (args[p].size() != parameter_shapes_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "executable takes ", parameter_shapes_.size(), " arguments, got ", args[p].size()));
    }
    for (size_t i = 0; i < args[p].size(); ++i) {
      const std::shared_ptr<Buffer>& arg = args[p][i];
      if (!(arg->shape() == parameter_shapes_[i])) {
        return absl::InvalidArgumentError(absl::StrCat(where, "argument ", i, " is ", arg->shape().ToString(),
                                                       ", the executable expects ", parameter_shapes_[i].ToString()));
      }
      if (arg->device() != device) {
        return absl::InvalidArgumentError(absl::StrCat(where, "argument ", i, " lives on ",
                                                       arg->device()->DebugString(), ", not ", device->DebugString()));
      }
      absl::StatusOr<std::shared_ptr<DeviceMemory>> mem = arg->memory();
      if (!mem.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(where, "argument ", i, ": ", mem.status().message()));
      }
      runs[p].arg_memory.push_back(*std::move(mem));
      runs[p].arg_ready.push_back(arg->ready());
    }
    ASSIGN_OR_RETURN(DeviceMemory arena, device->ReserveArena(proto_.arena_bytes()));  // bound as the run starts
    runs[p].arena = std::make_shared<DeviceMemory>(std::move(arena));
    for (const ArrayShape& shape : output_shapes_) {
      ASSIGN_OR_RETURN(DeviceMemory mem,
                       device->Allocate(shape.byte_size()));  // everything allocated so far is released on return
      runs[p].out_memory.push_back(std::make_shared<DeviceMemory>(std::move(mem)));
      results[p].push_back(std::make_shared<Buffer>(device, shape, runs[p].out_memory.back(), runs[p].done));
    }
  }
  if (partitions > 1 && communicator == nullptr) communicator = &InProcessCommunicator::Default();
  const uint64_t run_id = g_next_run_id.fetch_add(1, std::memory_order_relaxed);
  auto shared_devices = std::make_shared<const std::vector<Device*>>(devices.begin(), devices.end());
  if (spare_core != nullptr && partitions > 1) {  // its partitions' kernels share the pool: none is spare
    spare_core->Set(absl::OkStatus());
    spare_core = nullptr;
  }
  std::unique_lock<std::mutex> submitting(g_partitioned_submit_mu, std::defer_lock);
  if (partitions > 1) submitting.lock();
  for (size_t p = 0; p < partitions; ++p) {
    if (devices[p] == nullptr) continue;
    Partition& run = runs[p];
    // A small executable whose arguments are ready runs on the calling thread when the stream is idle:
    // waking the stream thread would cost more than the work (as PJRT's CPU client does for cheap
    // computations). Anything else runs on the stream, in order. A partition never runs inline: it
    // would wait at its first collective for partitions not yet submitted.
    const KernelProfiling profile = devices[p]->kernel_profiling();
    bool inline_ok = partitions == 1 && inline_ns_ <= devices[p]->stream().wake_ns();
    for (const auto& ready : run.arg_ready) inline_ok = inline_ok && ready->IsReady();
    devices[p]->stream().Submit(inline_ok, [self = shared_from_this(), run = std::move(run), profile, name_site,
                                            communicator, run_id, shared_devices, partition = static_cast<int64_t>(p),
                                            spare_core]() mutable {
      absl::Status status;
      for (const auto& ready : run.arg_ready) {
        if (status = ready->Wait(); !status.ok()) break;
      }
      if (status.ok()) status = run.arena->Bind();
      if (status.ok()) {
        std::vector<void*> params, outs;
        for (const auto& m : run.arg_memory) params.push_back(m->data());
        for (const auto& m : run.out_memory) outs.push_back(m->data());
        const std::vector<void*> slots = self->SlotPointers(params, run.arena->data(), outs);
        const PartitionContext where{partition, *shared_devices, communicator, run_id, 0};
        status = self->RunKernels(slots, profile, name_site, &where, spare_core.get());
        // Results not written in place (a parameter, an alias, a repeated value) are copied.
        for (size_t j = 0; status.ok() && j < outs.size(); ++j) {
          void* src = slots[static_cast<size_t>(self->proto_.outputs(static_cast<int>(j)))];
          if (src != outs[j] && run.out_memory[j]->size() > 0) {
            std::memcpy(outs[j], src, static_cast<size_t>(run.out_memory[j]->size()));
          }
        }
      }
      if (!status.ok() && communicator != nullptr) {
        communicator->AbortExecution(
            run_id,
            absl::Status(status.code(), absl::StrCat("partition ", partition, " on ",
                                                     (*shared_devices)[static_cast<size_t>(partition)]->DebugString(),
                                                     " failed: ", status.message())));
      }
      // Memory goes back to the device before anyone waiting learns the execution ended, so that
      // once the results are read and dropped, bytes in use is back where it was. The arena last: the
      // next run binds the block freed last of its size.
      run.arg_memory.clear();
      run.out_memory.clear();
      run.arena.reset();
      if (spare_core != nullptr) spare_core->Set(status);  // if the kernel was never reached
      run.done->Set(status);
    });
  }
  return results;
}

}  // namespace lazyrt::pjrt
