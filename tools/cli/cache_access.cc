#include "tools/cli/cache_access.h"

#include <sys/stat.h>

#include <cassert>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cache/location.h"
#include "nlohmann/json.hpp"
#include "pjrt_sim/executable.h"
#include "pjrt_sim/version.h"

namespace lazyrt::cli {
namespace {

std::optional<int64_t> IntegerField(const nlohmann::json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

absl::StatusOr<std::unique_ptr<cache::Store>> OpenCache(const Args& args, Access access) {
  absl::StatusOr<std::string> dir = cache::ResolveCacheDir(args.value("--dir").value_or(""));
  if (!dir.ok()) return dir.status();
  struct stat info;
  if (stat(dir->c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::NotFoundError(
        absl::StrCat("no cache directory at ", *dir,
                     " (the directory is --dir, else $LAZYRT_CACHE_DIR, else $XDG_CACHE_HOME/lazyrt, else "
                     "~/.cache/lazyrt; the runtime creates it when it first stores a compiled graph)"));
  }
  return cache::Store::Open(
      {.dir = *dir, .producer_version = pjrt::Executable::ProducerVersion(), .read_only = access == Access::kReadOnly});
}

std::optional<GraphSummary> ParseGraphSummary(absl::string_view metadata) {
  const nlohmann::json json = nlohmann::json::parse(metadata, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::nullopt;
  GraphSummary summary{.nodes = IntegerField(json, "nodes"),
                       .parameters = IntegerField(json, "parameters"),
                       .outputs = IntegerField(json, "outputs")};
  if (auto it = json.find("module"); it != json.end() && it->is_string()) {
    summary.module = it->get<std::string>();
  }
  return summary;
}

std::optional<cache::Miss> IdentityDefect(const cache::EntryHeader& header, absl::string_view key) {
  return cache::CheckEntryIdentity(header, key, pjrt::Executable::ProducerVersion());
}

InspectedEntry InspectEntry(cache::Store& store, pjrt::Client& client, absl::string_view key) {
  assert(store.read_only());
  cache::LookupResult found = store.Lookup(key);
  if (cache::Miss* miss = std::get_if<cache::Miss>(&found)) return {.defect = std::move(*miss)};
  absl::StatusOr<std::shared_ptr<pjrt::Executable>> loaded =
      client.LoadSerializedExecutable(std::get<cache::Entry>(found).payload);
  if (!loaded.ok()) {
    return {.defect = cache::Miss{cache::MissReason::kUnloadable, std::string(loaded.status().message())}};
  }
  return {.executable = (*loaded)->proto()};
}

}  // namespace lazyrt::cli
