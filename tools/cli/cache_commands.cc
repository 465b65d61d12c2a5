// The cache commands that work on the whole directory: ls, stats, verify, gc and clear.
#include "tools/cli/cache_commands.h"

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cache/directory_scan.h"
#include "lazy/options.h"
#include "nlohmann/json.hpp"
#include "pjrt_sim/client.h"
#include "tools/cli/cache_access.h"
#include "tools/cli/format.h"

namespace lazyrt::cli {
namespace {

using Json = nlohmann::ordered_json;

// The distrust warning, once, for commands that still work in a distrusted directory.
void WarnIfDistrusted(const cache::Store& store) {
  if (!store.trusted()) std::cerr << "lazyrt: warning: " << store.warning() << '\n';
}

// ------------------------------------------------------------------------------------------ ls ----

// What `lazyrt cache ls` knows about one entry, from its file and header alone.
struct ListRow {
  const cache::ListedEntry* listed = nullptr;
  const cache::EntryHeader* header = nullptr;  // null when the header is damaged
  std::optional<cache::Miss> defect = std::nullopt;
  std::optional<cache::EntryMetadata> graph = std::nullopt;
};

ListRow MakeListRow(const cache::ListedEntry& listed) {
  ListRow row{.listed = &listed, .header = std::get_if<cache::EntryHeader>(&listed.header)};
  if (row.header == nullptr) {
    row.defect = std::get<cache::Miss>(listed.header);
  } else {
    row.defect = IdentityDefect(*row.header, listed.key);
    row.graph = GraphOf(*row.header);
  }
  return row;
}

Json ListRowJson(const ListRow& row) {
  Json json;
  json["key"] = row.listed->key;
  json["state"] = row.defect ? std::string(cache::MissReasonName(row.defect->reason)) : "ok";
  if (row.defect) json["detail"] = row.defect->detail;
  json["file_bytes"] = row.listed->file_bytes;
  json["last_used_unix_ms"] = absl::ToUnixMillis(row.listed->last_used);
  if (row.header == nullptr) return json;
  const cache::EntryHeader& header = *row.header;
  json["compressed_bytes"] = header.compressed_size;
  json["raw_bytes"] = header.raw_size;
  json["created_unix_ms"] = header.created_unix_ms;
  json["compile_ms"] = header.compile_ms;
  json["producer_version"] = header.producer_version;
  json["compiler_version"] = CompilerOf(header.producer_version);
  if (row.graph) {
    json["graph"] = {{"nodes", row.graph->nodes},
                     {"parameters", row.graph->parameters.size()},
                     {"outputs", row.graph->results.size()},
                     {"module", row.graph->module}};
  } else {
    json["graph"] = nullptr;
  }
  return json;
}

int RunLs(const Args& args) {
  absl::StatusOr<std::unique_ptr<cache::Store>> store = OpenCache(args, Access::kReadOnly);
  if (!store.ok()) return Fail(store.status());
  WarnIfDistrusted(**store);
  absl::StatusOr<std::vector<cache::ListedEntry>> listed = (*store)->List();
  if (!listed.ok()) return Fail(listed.status());
  // Most recently used first: the order an operator reads eviction candidates in, from the bottom.
  std::sort(listed->begin(), listed->end(), [](const cache::ListedEntry& a, const cache::ListedEntry& b) {
    return std::tie(b.last_used, a.key) < std::tie(a.last_used, b.key);
  });
  std::vector<ListRow> rows;
  uint64_t total_bytes = 0;
  for (const cache::ListedEntry& entry : *listed) {
    rows.push_back(MakeListRow(entry));
    total_bytes += entry.file_bytes;
  }

  if (args.flag("--json")) {
    Json entries = Json::array();
    for (const ListRow& row : rows) entries.push_back(ListRowJson(row));
    std::cout << Json{{"dir", (*store)->dir()}, {"entries", std::move(entries)}}.dump(2) << '\n';
    return kExitOk;
  }
  Table table({{"KEY"},
               {"SIZE", Align::kRight},
               {"RAW", Align::kRight},
               {"CREATED"},
               {"LAST USED"},
               {"SAVES", Align::kRight},
               {"NODES", Align::kRight},
               {"PARAMS", Align::kRight},
               {"OUTPUTS", Align::kRight},
               {"COMPILER"},
               {"STATE"}});
  for (const ListRow& row : rows) {
    const std::string state = row.defect ? std::string(cache::MissReasonName(row.defect->reason)) : "ok";
    if (row.header == nullptr) {
      table.AddRow({row.listed->key, FormatBytes(row.listed->file_bytes), "-", "-",
                    FormatLocalTime(row.listed->last_used), "-", "-", "-", "-", "-", state});
      continue;
    }
    const std::optional<cache::EntryMetadata>& graph = row.graph;
    table.AddRow({row.listed->key, FormatBytes(row.listed->file_bytes), FormatBytes(row.header->raw_size),
                  FormatLocalTime(absl::FromUnixMillis(row.header->created_unix_ms)),
                  FormatLocalTime(row.listed->last_used), FormatMs(row.header->compile_ms),
                  graph ? absl::StrCat(graph->nodes) : "-", graph ? absl::StrCat(graph->parameters.size()) : "-",
                  graph ? absl::StrCat(graph->results.size()) : "-", CompilerOf(row.header->producer_version), state});
  }
  if (!table.empty()) table.Print(std::cout);
  std::cout << rows.size() << (rows.size() == 1 ? " entry, " : " entries, ") << FormatBytes(total_bytes) << " in "
            << (*store)->dir() << '\n';
  return kExitOk;
}

// --------------------------------------------------------------------------------------- stats ----

int RunStats(const Args& args) {
  absl::StatusOr<std::unique_ptr<cache::Store>> store = OpenCache(args, Access::kReadOnly);
  if (!store.ok()) return Fail(store.status());
  WarnIfDistrusted(**store);
  absl::StatusOr<cache::CacheStats> stats = (*store)->Stats();
  if (!stats.ok()) return Fail(stats.status());
  const cache::EventStats& events = stats->events;

  if (args.flag("--json")) {
    Json json;
    json["dir"] = (*store)->dir();
    json["entries"] = stats->entries;
    json["bytes"] = stats->bytes;
    json["hits"] = events.hits;
    json["misses"] = events.total_misses();
    json["misses_by_reason"] = events.misses_by_reason;
    json["writes"] = events.writes;
    json["bytes_written"] = events.bytes_written;
    json["evictions"] = events.evictions;
    json["damaged_removed"] = events.corrupt;
    json["compile_ms_saved"] = events.compile_ms_saved;
    json["compile_waits"] = events.compile_waits;
    json["compile_wait_ms"] = events.compile_wait_ms;
    json["unreadable_event_lines"] = events.unreadable_lines;
    json["unread_event_log_bytes"] = events.unread_bytes;
    json["ignored_event_log_files"] = events.foreign_files;
    std::cout << json.dump(2) << '\n';
    return kExitOk;
  }
  const int64_t lookups = events.hits + events.total_misses();
  std::string misses = absl::StrCat(events.total_misses());
  if (!events.misses_by_reason.empty()) {
    absl::StrAppend(&misses, " (",
                    absl::StrJoin(events.misses_by_reason, ", ",
                                  [](std::string* out, const auto& reason_count) {
                                    absl::StrAppend(out, reason_count.first, " ", reason_count.second);
                                  }),
                    ")");
  }
  std::vector<std::pair<std::string, std::string>> fields = {
      {"cache", (*store)->dir()},
      {"entries", absl::StrCat(stats->entries, " (", FormatBytes(stats->bytes), ")")},
      {"lookups", absl::StrCat(lookups)},
      {"hits", lookups == 0 ? "0" : absl::StrCat(events.hits, " (", events.hits * 100 / lookups, "%)")},
      {"misses", misses},
      {"writes", absl::StrCat(events.writes, " (", FormatBytes(static_cast<uint64_t>(events.bytes_written)), ")")},
      {"evictions", absl::StrCat(events.evictions)},
      {"damaged removed", absl::StrCat(events.corrupt)},
      {"compile time saved", FormatMs(events.compile_ms_saved)},
      {"compile waits", absl::StrCat(events.compile_waits, " (", FormatMs(events.compile_wait_ms),
                                     " waiting for another process's compile)")},
  };
  if (events.unreadable_lines > 0) {
    fields.emplace_back("unreadable log lines", absl::StrCat(events.unreadable_lines, " (skipped)"));
  }
  if (events.unread_bytes > 0) {
    fields.emplace_back("event log not read",
                        absl::StrCat(FormatBytes(events.unread_bytes), " (the oldest, beyond the read limit)"));
  }
  if (events.foreign_files > 0) {
    fields.emplace_back("event log names ignored",
                        absl::StrCat(events.foreign_files, " (not regular files: a symlink, a FIFO, ...)"));
  }
  if (auto it = events.misses_by_reason.find(std::string(cache::MissReasonName(cache::MissReason::kKeyChanged)));
      it != events.misses_by_reason.end()) {
    fields.emplace_back("key changed", absl::StrCat(it->second,
                                                    " misses found the same graph stored under a key "
                                                    "of other ingredients (see the event log's details)"));
  }
  PrintFields(std::cout, fields);
  return kExitOk;
}

// -------------------------------------------------------------------------------------- verify ----

int RunVerify(const Args& args) {
  absl::StatusOr<std::unique_ptr<cache::Store>> reader = OpenCache(args, Access::kReadOnly);
  if (!reader.ok()) return Fail(reader.status());
  // In a distrusted directory the runtime loads nothing, whatever the entries hold: that, not the
  // entries, is what needs fixing.
  if (!(*reader)->trusted()) return Fail((*reader)->warning());
  absl::StatusOr<std::vector<cache::VerifiedEntry>> verified = (*reader)->VerifyAll();
  if (!verified.ok()) return Fail(verified.status());
  absl::StatusOr<std::unique_ptr<pjrt::Client>> client = pjrt::Client::Create();
  if (!client.ok()) return Fail(client.status());

  std::vector<cache::VerifiedEntry> bad;
  int64_t good = 0;
  for (cache::VerifiedEntry& entry : *verified) {
    if (!entry.defect) {
      entry.defect = InspectEntry(**reader, **client, entry.key).defect;
      // Evicted between the scan and the load: gone, so neither good nor bad.
      if (entry.defect && entry.defect->reason == cache::MissReason::kNotFound) continue;
    }
    if (entry.defect) {
      bad.push_back(std::move(entry));
    } else {
      ++good;
    }
  }
  for (const cache::VerifiedEntry& entry : bad) {
    std::cout << "bad " << entry.key << ": " << cache::MissReasonName(entry.defect->reason) << ": "
              << entry.defect->detail << '\n';
  }
  std::cout << (good + static_cast<int64_t>(bad.size())) << " checked, " << good << " good, " << bad.size()
            << " bad in " << (*reader)->dir() << '\n';
  if (bad.empty() || !args.flag("--fix")) return bad.empty() ? kExitOk : kExitFindings;

  absl::StatusOr<std::unique_ptr<cache::Store>> writer = OpenCache(args, Access::kWritable);
  if (!writer.ok()) return Fail(writer.status());
  for (const cache::VerifiedEntry& entry : bad) {
    absl::Status removed = (*writer)->Remove(entry.key);
    if (!removed.ok() && !absl::IsNotFound(removed)) return Fail(removed);
    std::cout << "removed " << entry.key << '\n';
  }
  return kExitFindings;
}

// ------------------------------------------------------------------------------------ gc, clear ----

int RunGc(const Args& args) {
  absl::StatusOr<int64_t> max_bytes = ParseByteSize(*args.value("--max-bytes"));
  if (!max_bytes.ok()) {
    return UsageError("cache gc", absl::StrCat("--max-bytes: ", max_bytes.status().message()));
  }
  absl::StatusOr<std::unique_ptr<cache::Store>> store = OpenCache(args, Access::kWritable);
  if (!store.ok()) return Fail(store.status());
  absl::StatusOr<std::vector<cache::EvictedEntry>> evicted = (*store)->EvictTo(static_cast<uint64_t>(*max_bytes));
  if (!evicted.ok()) return Fail(evicted.status());
  absl::StatusOr<cache::DirectoryScan> left = cache::ScanDirectory((*store)->dir());
  if (!left.ok()) return Fail(left.status());

  uint64_t evicted_bytes = 0;
  Table table({{"EVICTED"}, {"SIZE", Align::kRight}, {"LAST USED"}});
  for (const cache::EvictedEntry& entry : *evicted) {
    table.AddRow({entry.key, FormatBytes(entry.file_bytes), FormatLocalTime(entry.last_used)});
    evicted_bytes += entry.file_bytes;
  }
  if (!table.empty()) table.Print(std::cout);
  uint64_t left_bytes = 0;
  for (const cache::EntryFile& file : left->entries) left_bytes += file.size;
  std::cout << "evicted " << evicted->size() << (evicted->size() == 1 ? " entry" : " entries") << " ("
            << FormatBytes(evicted_bytes) << "); " << left->entries.size() << " left (" << FormatBytes(left_bytes)
            << ", limit " << FormatBytes(static_cast<uint64_t>(*max_bytes)) << ") in " << (*store)->dir() << '\n';
  return kExitOk;
}

int RunClear(const Args& args) {
  absl::StatusOr<std::unique_ptr<cache::Store>> store = OpenCache(args, Access::kWritable);
  if (!store.ok()) return Fail(store.status());
  absl::StatusOr<int64_t> removed = (*store)->Clear();
  if (!removed.ok()) return Fail(removed.status());
  std::cout << "removed " << *removed << (*removed == 1 ? " entry" : " entries") << " from " << (*store)->dir() << '\n';
  return kExitOk;
}

constexpr absl::string_view kCacheUsage =
    "usage: lazyrt cache <command> [options]\n"
    "\n"
    "The persistent cache holds the executables the runtime compiled, one file per graph, so a\n"
    "restarted process loads them instead of compiling again.\n";

const std::vector<Command>& CacheCommands() {
  static const std::vector<Command> commands = {
      {{.name = "cache ls",
        .summary = "list the entries: sizes, ages, compile time saved, graph size",
        .usage =
            absl::StrCat("usage: lazyrt cache ls [--dir D] [--json]\n"
                         "\n"
                         "One row per entry, most recently used first: its size on disk (compressed, as eviction\n"
                         "counts it) and raw, when it was created and last used, the compile time a hit saves, the\n"
                         "graph's nodes, parameters and outputs, the compiler that wrote it, and its state as far as\n"
                         "the header tells (ok, or why the runtime would miss it; 'lazyrt cache verify' also checks\n"
                         "payloads). Reads headers only and changes nothing.\n"
                         "\n",
                         kDirOptionHelp,
                         "  --json        {\"dir\", \"entries\": [{\"key\", \"state\", \"file_bytes\",\n"
                         "                \"compressed_bytes\", \"raw_bytes\", \"created_unix_ms\",\n"
                         "                \"last_used_unix_ms\", \"compile_ms\", \"producer_version\",\n"
                         "                \"compiler_version\", \"graph\"}]}\n"),
        .value_options = {"--dir"},
        .flags = {"--json"}},
       RunLs},
      CacheShowCommand(),
      {{.name = "cache stats",
        .summary = "entries, bytes, hits, misses by reason, writes, evictions, compile time saved",
        .usage = absl::StrCat(
            "usage: lazyrt cache stats [--dir D] [--json]\n"
            "\n"
            "The entries and bytes in the directory now, and totals from its event log, which every\n"
            "process using the directory appends to: hits, misses by reason, writes, evictions, damaged\n"
            "entries removed and the compile time hits saved. A key_changed miss found the same graph\n"
            "stored under a key of other ingredients (compiler version, compile options, device count,\n"
            "...); the event log's detail says which. The log is read only as a regular file, and only\n"
            "its newest 64 MiB.\n"
            "\n",
            kDirOptionHelp,
            "  --json        {\"dir\", \"entries\", \"bytes\", \"hits\", \"misses\", \"misses_by_reason\",\n"
            "                \"writes\", \"bytes_written\", \"evictions\", \"damaged_removed\",\n"
            "                \"compile_ms_saved\", \"unreadable_event_lines\", \"unread_event_log_bytes\",\n"
            "                \"ignored_event_log_files\"}\n"),
        .value_options = {"--dir"},
        .flags = {"--json"}},
       RunStats},
      {{.name = "cache verify",
        .summary = "check every entry as the runtime would load it; --fix removes the bad ones",
        .usage =
            absl::StrCat("usage: lazyrt cache verify [--dir D] [--fix]\n"
                         "\n"
                         "Checks every entry as a runtime load does: header, checksums, compiler version, that the\n"
                         "executable loads on the device (every size bounded) and that it fits the graph signature\n"
                         "recorded with it (graph_mismatch otherwise). Names each bad entry with the reason. Exit "
                         "status 0 when all are good, 1 when\n"
                         "any is bad (also with --fix, which removes them), 2 when the check could not run.\n"
                         "\n",
                         kDirOptionHelp, "  --fix         remove the bad entries\n"),
        .value_options = {"--dir"},
        .flags = {"--fix"}},
       RunVerify},
      {{.name = "cache gc",
        .summary = "evict least recently used entries down to a size",
        .usage = absl::StrCat(
            "usage: lazyrt cache gc --max-bytes N [--dir D]\n"
            "\n"
            "Evicts entries, least recently used first, until the entries total at most N bytes. Only\n"
            "in a directory marked as a cache (CACHEDIR.TAG), and only files the cache wrote.\n"
            "\n",
            "  --max-bytes N the size to evict down to: bytes, or with a unit (512K, 100M, 10G)\n", kDirOptionHelp),
        .value_options = {"--dir", "--max-bytes"},
        .required_options = {"--max-bytes"}},
       RunGc},
      {{.name = "cache clear",
        .summary = "remove every entry",
        .usage = absl::StrCat("usage: lazyrt cache clear [--dir D]\n"
                              "\n"
                              "Removes every entry (the event log stays, so 'cache stats' keeps its history). Only\n"
                              "in a directory marked as a cache (CACHEDIR.TAG), and only files the cache wrote.\n"
                              "\n",
                              kDirOptionHelp),
        .value_options = {"--dir"}},
       RunClear},
  };
  return commands;
}

}  // namespace

int RunCacheCommand(std::span<char* const> argv) { return RunSubcommand("cache", kCacheUsage, CacheCommands(), argv); }

}  // namespace lazyrt::cli
