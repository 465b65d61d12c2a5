// How the cache directory is laid out: entry files "<key>.lzc", temporary files of writes in
// progress (hidden, ".<final name>.<pid>.<tid>.<n>.tmp"), lock files of compile leases (hidden,
// ".<key>.lease"), and the event log. Keys are restricted
// so that a key can never name a path outside the directory or collide with the other files.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace lazyrt::cache {

inline constexpr absl::string_view kEntryFileSuffix = ".lzc";

// OK when `key` may name an entry: 1 to kMaxKeyBytes characters from [A-Za-z0-9._-], not starting
// with '.'. INVALID_ARGUMENT, naming the key, otherwise.
absl::Status ValidateKey(absl::string_view key);

// "<key>.lzc".
std::string EntryFileName(absl::string_view key);

// "<dir>/<file_name>".
std::string PathInDir(absl::string_view dir, absl::string_view file_name);

// ".<key>.lease": the lock file of the key's compile lease (compile_lease.h). Hidden, and never an
// entry's or a temporary file's name.
std::string CompileLeaseFileName(absl::string_view key);

// Whether `file_name` has exactly the form CompileLeaseFileName gives.
bool IsCompileLeaseFileName(absl::string_view file_name);

// The key of an entry file name; nullopt for every other name (temporary files, the event log).
std::optional<std::string> KeyFromEntryFileName(absl::string_view file_name);

// A name for the temporary file of a write of `final_name` that no other writer of this process uses:
// it carries the pid, the thread id and a per-process counter that starts at random. Another process
// (in another pid namespace, or a restart killed mid-write before) can have left the same name, which
// WriteFileAtomically's O_EXCL creation finds taken and skips.
std::string UniqueTempFileName(absl::string_view final_name);

// Whether `file_name` has exactly the form UniqueTempFileName gives an entry file or the cache
// directory tag.
bool IsTempFileName(absl::string_view file_name);

}  // namespace lazyrt::cache
