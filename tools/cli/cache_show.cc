// "lazyrt cache show KEY": everything about one entry, from its header down to the compiler's
// decisions recorded in the executable.
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cache/layout.h"
#include "nlohmann/json.hpp"
#include "pjrt_sim/client.h"
#include "pjrt_sim/hlo.h"
#include "pjrt_sim/kernels/gemm.h"
#include "pjrt_sim/status_macros.h"
#include "tools/cli/cache_access.h"
#include "tools/cli/cache_commands.h"
#include "tools/cli/format.h"

namespace lazyrt::cli {
namespace {

using Json = nlohmann::ordered_json;
namespace proto = pjrt::proto;

// The entry whose key is `wanted` or, failing that, the only one whose key starts with it (keys
// are long hex strings; a prefix is what people copy).
absl::StatusOr<cache::ListedEntry> FindEntry(const cache::Store& store, absl::string_view wanted) {
  ASSIGN_OR_RETURN(std::vector<cache::ListedEntry> listed, store.List());
  std::vector<cache::ListedEntry*> matches;
  for (cache::ListedEntry& entry : listed) {
    if (entry.key == wanted) return std::move(entry);
    if (absl::StartsWith(entry.key, wanted)) matches.push_back(&entry);
  }
  if (matches.size() == 1) return std::move(*matches[0]);
  if (matches.empty()) {
    return absl::NotFoundError(absl::StrCat("no cache entry ", wanted, " in ", store.dir()));
  }
  std::vector<std::string> keys;
  for (const cache::ListedEntry* entry : matches) keys.push_back(entry->key);
  return absl::InvalidArgumentError(
      absl::StrCat("'", wanted, "' is the start of ", matches.size(), " keys: ", absl::StrJoin(keys, ", ")));
}

std::string ShapeText(const proto::Shape& shape) { return pjrt::FromProto(shape).ToString(); }

// One step of a fused program, as "%4 = multiply(%2, %3) f32" or "%0 = load in1 +0 [512,0,1] bf16":
// what a loop computes and reads, for finding out why it takes the time it does.
std::string StepText(const proto::Step& step, int index) {
  const std::string type(pjrt::PrimitiveTypeName(pjrt::FromProto(step.type())));
  if (step.load()) {
    return absl::StrCat("%", index, " = load in", step.input(), " +", step.offset(), " [",
                        absl::StrJoin(step.strides(), ","), "] ", type);
  }
  const std::optional<pjrt::Opcode> op = pjrt::OpcodeFromNumber(step.opcode());
  const std::string name = op ? pjrt::OpcodeName(*op) : absl::StrCat("opcode", step.opcode());
  std::vector<std::string> args;
  for (int64_t a : step.args()) args.push_back(absl::StrCat("%", a));
  const std::string value = op == pjrt::Opcode::kConstant ? absl::StrCat(" ", step.value()) : "";
  return absl::StrCat("%", index, " = ", name, "(", absl::StrJoin(args, ", "), ")", value, " ", type);
}

std::vector<std::string> OutputShapes(const proto::Executable& exe) {
  std::vector<std::string> shapes;
  for (int64_t slot : exe.outputs()) shapes.push_back(ShapeText(exe.slots(static_cast<int>(slot)).shape()));
  return shapes;
}

// The instructions fusion folded into other kernels: the changes the "fusion" pass recorded.
int64_t InstructionsFusedAway(const proto::Executable& exe) {
  int64_t fused = 0;
  for (const proto::PassTiming& timing : exe.pass_timings()) {
    if (timing.pass() == "fusion") fused += timing.changes();
  }
  return fused;
}

// The op histogram, most frequent first (the proto's map has no order of its own).
std::vector<std::pair<std::string, int64_t>> SortedOps(const proto::Executable& exe) {
  std::vector<std::pair<std::string, int64_t>> ops(exe.op_histogram().begin(), exe.op_histogram().end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  return ops;
}

std::string StateText(const std::optional<cache::Miss>& defect) {
  return defect ? std::string(cache::MissReasonName(defect->reason)) : "ok";
}

// ---------------------------------------------------------------------------------------- JSON ----

// The GEMM library a DOT or attention kernel's products run on (the machine's tuned choice, stored in the
// executable), by name; "?" for a number this build does not know. Nothing for other kernels.
std::optional<std::string_view> KernelGemmLibrary(const proto::Kernel& kernel) {
  if (kernel.kind() != proto::Kernel::DOT && kernel.kind() != proto::Kernel::ATTENTION &&
      kernel.kind() != proto::Kernel::ATTENTION_GRAD) {
    return std::nullopt;
  }
  const std::optional<pjrt::GemmLibrary> library = pjrt::GemmLibraryFromNumber(kernel.gemm_library());
  return library ? pjrt::GemmLibraryName(*library) : "?";
}

Json ExecutableJson(const proto::Executable& exe) {
  Json json;
  json["compiler_version"] = exe.compiler_version();
  json["device_kind"] = exe.device_kind();
  json["module"] = exe.module_name();
  json["module_instructions"] = exe.module_instructions();
  json["compile_ms"] = exe.compile_ms();
  Json ops = Json::object();
  for (const auto& [op, count] : SortedOps(exe)) ops[op] = count;
  json["op_histogram"] = std::move(ops);
  Json parameters = Json::array();
  for (const proto::Shape& shape : exe.parameters()) parameters.push_back(ShapeText(shape));
  json["parameters"] = std::move(parameters);
  json["outputs"] = OutputShapes(exe);
  Json kernels = Json::array();
  for (const proto::Kernel& kernel : exe.kernels()) {
    Json k;
    k["kind"] = proto::Kernel::Kind_Name(kernel.kind());
    k["label"] = kernel.label();
    k["iteration_shape"] =
        std::vector<int64_t>(kernel.iteration_shape().dims().begin(), kernel.iteration_shape().dims().end());
    if (kernel.kind() == proto::Kernel::DOT) {
      k["dot"] = {{"batch", kernel.batch()}, {"m", kernel.m()}, {"n", kernel.n()}, {"k", kernel.k()}};
    }
    k["inputs"] = std::vector<int64_t>(kernel.inputs().begin(), kernel.inputs().end());  // slots read
    k["output"] = kernel.output();                                                       // slot written
    k["variant"] = kernel.variant();
    if (const std::optional<std::string_view> library = KernelGemmLibrary(kernel)) k["gemm_library"] = *library;
    k["grain"] = kernel.grain();
    k["program_steps"] = kernel.program_size();
    Json program = Json::array();
    for (int i = 0; i < kernel.program_size(); ++i) program.push_back(StepText(kernel.program(i), i));
    k["program"] = std::move(program);
    k["results"] = 1 + kernel.extra_outputs_size();  // more than one: a multi-output loop
    kernels.push_back(std::move(k));
  }
  json["kernels"] = std::move(kernels);
  json["instructions_fused_away"] = InstructionsFusedAway(exe);
  json["arena_bytes"] = exe.arena_bytes();
  Json autotune = Json::array();
  for (const proto::AutotuneRecord& record : exe.autotune()) {
    Json candidates = Json::array();
    for (const proto::AutotuneCandidate& candidate : record.candidates()) {
      candidates.push_back({{"name", candidate.name()}, {"us", candidate.us()}});
    }
    Json entry = {{"kernel", record.kernel()},
                  {"candidates", std::move(candidates)},
                  {"chosen", record.chosen()},
                  {"split_by_traffic", record.split_by_traffic()}};
    if (record.has_same_as()) entry["same_as"] = record.same_as();
    autotune.push_back(std::move(entry));
  }
  json["autotune"] = std::move(autotune);
  json["tuned_on_shared_cpus"] = exe.tuned_on_shared_cpus();
  Json passes = Json::array();
  for (const proto::PassTiming& timing : exe.pass_timings()) {
    passes.push_back({{"pass", timing.pass()}, {"ms", timing.ms()}, {"changes", timing.changes()}});
  }
  json["pass_timings"] = std::move(passes);
  return json;
}

Json EntryJson(const cache::Store& store, const cache::ListedEntry& listed, const std::optional<cache::Miss>& defect,
               const std::optional<proto::Executable>& exe) {
  Json json;
  json["key"] = listed.key;
  json["file"] = cache::PathInDir(store.dir(), cache::EntryFileName(listed.key));
  json["state"] = StateText(defect);
  if (defect) json["detail"] = defect->detail;
  json["file_bytes"] = listed.file_bytes;
  json["last_used_unix_ms"] = absl::ToUnixMillis(listed.last_used);
  if (const auto* header = std::get_if<cache::EntryHeader>(&listed.header)) {
    json["header"] = {{"format_version", header->format_version},
                      {"producer_version", header->producer_version},
                      {"compressed_bytes", header->compressed_size},
                      {"raw_bytes", header->raw_size},
                      {"payload_checksum", absl::StrFormat("%016x", header->payload_checksum)},
                      {"compile_ms", header->compile_ms},
                      {"created_unix_ms", header->created_unix_ms},
                      {"metadata", header->metadata}};
  }
  json["executable"] = exe ? ExecutableJson(*exe) : Json(nullptr);
  return json;
}

// ---------------------------------------------------------------------------------------- text ----

void PrintHeader(const cache::Store& store, const cache::ListedEntry& listed,
                 const std::optional<cache::Miss>& defect) {
  std::vector<std::pair<std::string, std::string>> fields = {
      {"entry", listed.key},
      {"file", absl::StrCat(cache::PathInDir(store.dir(), cache::EntryFileName(listed.key)), " (",
                            FormatBytes(listed.file_bytes), ")")},
      {"state", defect ? absl::StrCat(cache::MissReasonName(defect->reason), ": ", defect->detail) : "ok"},
      {"last used", FormatLocalTime(listed.last_used)}};
  if (const auto* header = std::get_if<cache::EntryHeader>(&listed.header)) {
    fields.insert(fields.end(), {{"created", FormatLocalTime(absl::FromUnixMillis(header->created_unix_ms))},
                                 {"payload", absl::StrCat(FormatBytes(header->compressed_size), " compressed, ",
                                                          FormatBytes(header->raw_size), " raw, checksum ",
                                                          absl::StrFormat("%016x", header->payload_checksum))},
                                 {"saves", absl::StrCat(FormatMs(header->compile_ms), " of compiling per hit")},
                                 {"producer", header->producer_version},
                                 {"entry format", absl::StrCat(header->format_version)}});
    if (std::optional<cache::EntryMetadata> graph = GraphOf(*header)) {
      const auto signature = [](const std::vector<cache::TensorSignature>& tensors) {
        return absl::StrJoin(tensors, ", ", [](std::string* out, const cache::TensorSignature& t) {
          absl::StrAppend(out, t.ToString());
        });
      };
      fields.emplace_back("graph", absl::StrCat(graph->module.empty() ? "" : absl::StrCat(graph->module, ": "),
                                                graph->nodes, " nodes, ", graph->parameters.size(), " parameters, ",
                                                graph->results.size(), " outputs, graph hash ", graph->graph_hash));
      fields.emplace_back("parameters", signature(graph->parameters));
      fields.emplace_back("results", signature(graph->results));
      const cache::KeyIngredients& k = graph->ingredients;
      fields.emplace_back("key made of", absl::StrCat("lazyrt ", k.lazyrt_version, ", lowering ", k.lowering_version,
                                                      ", ", k.compiler_version, ", ", k.device_count, "x ",
                                                      k.device_kind, ", options ", k.compile_options));
    } else if (!header->metadata.empty()) {
      fields.emplace_back("metadata", header->metadata);
    }
  }
  PrintFields(std::cout, fields);
}

void PrintExecutable(const proto::Executable& exe) {
  std::cout << '\n';
  PrintFields(
      std::cout,
      {{"module", absl::StrCat(exe.module_name(), ", ", exe.module_instructions(), " instructions")},
       {"compiled",
        absl::StrCat("by ", exe.compiler_version(), " for ", exe.device_kind(), " in ", FormatMs(exe.compile_ms()))},
       {"kernels", absl::StrCat(exe.kernels_size(), " (", InstructionsFusedAway(exe), " instructions fused away)")},
       {"arena", FormatBytes(static_cast<uint64_t>(exe.arena_bytes()))}});

  std::cout << "\nops in the module\n";
  Table ops({{"OP"}, {"COUNT", Align::kRight}});
  for (const auto& [op, count] : SortedOps(exe)) ops.AddRow({op, absl::StrCat(count)});
  ops.Print(std::cout, 2);

  std::cout << "\nparameters\n";
  Table parameters({{"#", Align::kRight}, {"SHAPE"}});
  for (int i = 0; i < exe.parameters_size(); ++i) {
    parameters.AddRow({absl::StrCat(i), ShapeText(exe.parameters(i))});
  }
  parameters.Print(std::cout, 2);

  std::cout << "\noutputs\n";
  Table outputs({{"#", Align::kRight}, {"SHAPE"}});
  const std::vector<std::string> output_shapes = OutputShapes(exe);
  for (size_t i = 0; i < output_shapes.size(); ++i) outputs.AddRow({absl::StrCat(i), output_shapes[i]});
  outputs.Print(std::cout, 2);

  std::cout << "\nkernels, in schedule order\n";
  Table kernels({{"#", Align::kRight},
                 {"KIND"},
                 {"ITERATION"},
                 {"VARIANT", Align::kRight},
                 {"GRAIN", Align::kRight},
                 {"LIBRARY"},
                 {"LABEL"}});
  for (int i = 0; i < exe.kernels_size(); ++i) {
    const proto::Kernel& kernel = exe.kernels(i);
    kernels.AddRow({absl::StrCat(i), proto::Kernel::Kind_Name(kernel.kind()), pjrt::KernelIterationText(exe, kernel),
                    absl::StrCat(kernel.variant()), kernel.grain() == 0 ? "-" : absl::StrCat(kernel.grain()),
                    std::string(KernelGemmLibrary(kernel).value_or("-")), kernel.label()});
  }
  kernels.Print(std::cout, 2);

  std::cout << "\nautotuning\n";
  if (exe.autotune_size() == 0) {
    std::cout << "  none (no kernel was worth tuning, or autotuning was off)\n";
  } else {
    Table autotune({{"KERNEL", Align::kRight}, {"CANDIDATE"}, {"TIME", Align::kRight}, {"CHOSEN"}});
    for (const proto::AutotuneRecord& record : exe.autotune()) {
      if (record.has_same_as()) {
        autotune.AddRow({absl::StrCat(record.kernel()),
                         absl::StrCat("as kernel ", record.same_as(), ": ", record.chosen()), "-", "*"});
      }
      for (const proto::AutotuneCandidate& candidate : record.candidates()) {
        const bool chosen = candidate.name() == record.chosen();
        autotune.AddRow({absl::StrCat(record.kernel()), candidate.name(), FormatMs(candidate.us() / 1000),
                         chosen && record.split_by_traffic() ? "* (the split that moves the fewest bytes)"
                         : chosen                            ? "*"
                                                             : ""});
      }
    }
    autotune.Print(std::cout, 2);
    if (exe.tuned_on_shared_cpus()) {
      std::cout << "  measured with the device's threads sharing CPUs (the machine was busy): a split kernel\n"
                   "  timed no faster than whole, and a serial choice may be wrong; evict the entry to tune again\n";
    }
  }

  std::cout << "\ncompiler passes\n";
  Table passes({{"PASS"}, {"TIME", Align::kRight}, {"CHANGES", Align::kRight}});
  double total_ms = 0;
  for (const proto::PassTiming& timing : exe.pass_timings()) {
    passes.AddRow({timing.pass(), FormatMs(timing.ms()), absl::StrCat(timing.changes())});
    total_ms += timing.ms();
  }
  passes.AddRow({"total", FormatMs(total_ms), ""});
  passes.Print(std::cout, 2);
}

int RunShow(const Args& args) {
  absl::StatusOr<std::unique_ptr<cache::Store>> store = OpenCache(args, Access::kReadOnly);
  if (!store.ok()) return Fail(store.status());
  if (!(*store)->trusted()) return Fail((*store)->warning());
  absl::StatusOr<cache::ListedEntry> listed = FindEntry(**store, args.positionals()[0]);
  if (!listed.ok()) return Fail(listed.status());
  absl::StatusOr<std::unique_ptr<pjrt::Client>> client = pjrt::Client::Create();
  if (!client.ok()) return Fail(client.status());
  InspectedEntry inspected = InspectEntry(**store, **client, listed->key);

  if (args.flag("--json")) {
    std::cout << EntryJson(**store, *listed, inspected.defect, inspected.executable).dump(2) << '\n';
  } else {
    PrintHeader(**store, *listed, inspected.defect);
    if (inspected.executable) PrintExecutable(*inspected.executable);
  }
  return inspected.defect ? kExitFindings : kExitOk;
}

}  // namespace

Command CacheShowCommand() {
  return {
      {.name = "cache show",
       .summary = "one entry in full: header, graph, kernels, fusion, autotuning, pass timings",
       .usage = absl::StrCat("usage: lazyrt cache show KEY [--dir D] [--json]\n"
                             "\n"
                             "Everything about one entry (KEY may be any unique start of a key): its header, the\n"
                             "graph it compiles (op histogram, parameter and output shapes), the kernels in\n"
                             "schedule order (kind, iteration space, variant and grain), how many instructions\n"
                             "fusion folded away, the arena size, the autotuning candidates and choices, and the\n"
                             "time of each compiler pass. Looking does not count as a use: the entry's last-used\n"
                             "time and the event log stay as they were. Exit status 1 when the entry is bad (the\n"
                             "state says why).\n"
                             "\n",
                             kDirOptionHelp,
                             "  --json        {\"key\", \"file\", \"state\", \"file_bytes\", \"last_used_unix_ms\",\n"
                             "                \"header\", \"executable\"} with the executable's \"kernels\",\n"
                             "                \"autotune\", \"pass_timings\", ...\n"),
       .value_options = {"--dir"},
       .flags = {"--json"},
       .arguments = {"KEY"}},
      RunShow};
}

}  // namespace lazyrt::cli
