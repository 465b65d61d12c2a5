// How the cache commands reach the runtime's persistent cache: the same directory and producer
// version the runtime uses, and an entry examined exactly as a runtime hit would examine it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cache/entry_metadata.h"
#include "cache/store.h"
#include "pjrt_sim/client.h"
#include "pjrt_sim/executable.h"
#include "pjrt_sim/executable.pb.h"
#include "tools/cli/command.h"

namespace lazyrt::cli {

// The --help line of the --dir option every cache command takes.
inline constexpr absl::string_view kDirOptionHelp =
    "  --dir D       the cache directory (default: the runtime's: $LAZYRT_CACHE_DIR, else\n"
    "                $XDG_CACHE_HOME/lazyrt, else ~/.cache/lazyrt)\n";

enum class Access {
  // Nothing in the directory changes: no mtime refreshed, no event logged, nothing removed.
  kReadOnly,
  kWritable,
};

// The cache in --dir, or the runtime's default directory. An error when that directory does not
// exist: a mistyped --dir must not look like an empty cache (and is never created by the tool).
absl::StatusOr<std::unique_ptr<cache::Store>> OpenCache(const Args& args, Access access);

// The graph the runtime describes in an entry's metadata; nullopt when the text is not
// cache::EntryMetadata (an entry written by something else, or by an older lazyrt).
std::optional<cache::EntryMetadata> GraphOf(const cache::EntryHeader& header);

// "lazyrt-sim-compiler/3" out of a producer version; the whole text when it is not one.
std::string CompilerOf(absl::string_view producer_version);

// Why the runtime could not use an entry with this valid header: another compiler version or the
// wrong key. nullopt when it could.
std::optional<cache::Miss> IdentityDefect(const cache::EntryHeader& header, absl::string_view key);

// An entry as a runtime hit examines it: read and checked by the store, then loaded by the device
// (which validates every index and size of the executable), and the loaded executable's signature
// checked against the graph signature in the entry's metadata (CheckExecutableSignature).
struct InspectedEntry {
  // The loaded executable's contents; set when the entry is sound.
  std::optional<pjrt::proto::Executable> executable = std::nullopt;
  // Why the runtime could not use the entry; nullopt when sound.
  std::optional<cache::Miss> defect = std::nullopt;
};

// `store` must be read-only, so that inspecting counts as no use of the entry.
InspectedEntry InspectEntry(cache::Store& store, pjrt::Client& client, absl::string_view key);

// The graph_mismatch miss when `metadata` (an entry's, for key `key`) does not describe `exe`: another
// key, or parameters or results of other counts, dtypes or shapes. nullopt when it does.
std::optional<cache::Miss> CheckExecutableSignature(const cache::EntryMetadata& metadata, absl::string_view key,
                                                    const pjrt::Executable& exe);

}  // namespace lazyrt::cli
