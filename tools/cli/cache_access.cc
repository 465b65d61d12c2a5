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
#include "pjrt_sim/status_macros.h"
#include "pjrt_sim/version.h"

namespace lazyrt::cli {
namespace {

std::vector<cache::TensorSignature> Signature(const std::vector<pjrt::ArrayShape>& shapes) {
  std::vector<cache::TensorSignature> signature;
  for (const pjrt::ArrayShape& shape : shapes) {
    signature.push_back({std::string(pjrt::PrimitiveTypeName(shape.type)), shape.dims});
  }
  return signature;
}

}  // namespace

absl::StatusOr<std::unique_ptr<cache::Store>> OpenCache(const Args& args, Access access) {
  ASSIGN_OR_RETURN(std::string dir, cache::ResolveCacheDir(args.value("--dir").value_or("")));
  struct stat info;
  if (stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::NotFoundError(
        absl::StrCat("no cache directory at ", dir,
                     " (the directory is --dir, else $LAZYRT_CACHE_DIR, else $XDG_CACHE_HOME/lazyrt, else "
                     "~/.cache/lazyrt; the runtime creates it when it first stores a compiled graph)"));
  }
  return cache::Store::Open(
      {.dir = dir, .producer_version = pjrt::Executable::ProducerVersion(), .read_only = access == Access::kReadOnly});
}

std::optional<cache::EntryMetadata> GraphOf(const cache::EntryHeader& header) {
  absl::StatusOr<cache::EntryMetadata> metadata = cache::DecodeEntryMetadata(header.metadata);
  if (!metadata.ok()) return std::nullopt;
  return *std::move(metadata);
}

std::string CompilerOf(absl::string_view producer_version) {
  std::optional<pjrt::ProducerVersion> version = pjrt::ProducerVersion::Parse(producer_version);
  return version ? version->compiler : std::string(producer_version);
}

std::optional<cache::Miss> CheckExecutableSignature(const cache::EntryMetadata& metadata, absl::string_view key,
                                                    const pjrt::Executable& exe) {
  cache::EntryMetadata loaded;
  loaded.key = std::string(key);
  loaded.parameters = Signature(exe.parameter_shapes());
  loaded.results = Signature(exe.output_shapes());
  if (std::optional<std::string> mismatch = cache::SignatureMismatch(metadata, loaded)) {
    return cache::Miss{cache::MissReason::kGraphMismatch, absl::StrCat("the executable does not fit the entry's "
                                                                       "graph signature: ",
                                                                       *mismatch)};
  }
  return std::nullopt;
}

std::optional<cache::Miss> IdentityDefect(const cache::EntryHeader& header, absl::string_view key) {
  return cache::CheckEntryIdentity(header, key, pjrt::Executable::ProducerVersion());
}

InspectedEntry InspectEntry(cache::Store& store, pjrt::Client& client, absl::string_view key) {
  assert(store.read_only());
  cache::LookupResult found = store.Lookup(key);
  if (cache::Miss* miss = std::get_if<cache::Miss>(&found)) return {.defect = std::move(*miss)};
  const cache::Entry& entry = std::get<cache::Entry>(found);
  absl::StatusOr<cache::EntryMetadata> metadata = cache::DecodeEntryMetadata(entry.header.metadata);
  if (!metadata.ok()) {
    return {.defect = cache::Miss{cache::MissReason::kGraphMismatch, std::string(metadata.status().message())}};
  }
  absl::StatusOr<std::shared_ptr<pjrt::Executable>> loaded = client.LoadSerializedExecutable(entry.payload);
  if (!loaded.ok()) {
    return {.defect = cache::Miss{cache::MissReason::kUnloadable, std::string(loaded.status().message())}};
  }
  if (std::optional<cache::Miss> mismatch = CheckExecutableSignature(*metadata, key, **loaded)) {
    return {.defect = *std::move(mismatch)};
  }
  return {.executable = (*loaded)->proto()};
}

}  // namespace lazyrt::cli
