#include "cache/layout.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cache/entry_format.h"

namespace lazyrt::cache {
namespace {

constexpr absl::string_view kTempFileSuffix = ".tmp";
constexpr absl::string_view kLeaseFileSuffix = ".lease";
// location.h's kCacheDirTagFileName, the other file the cache writes atomically.
constexpr absl::string_view kCacheDirTagName = "CACHEDIR.TAG";

bool IsKeyChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

// Where this process's temporary-name counter starts: at random, so that a process given the pid and thread id of one
// killed mid-write (a restarted container's) does not count its way into the names that one left.
uint64_t CounterStart() {
  uint32_t start = 0;
  if (getrandom(&start, sizeof start, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof start)) {
    start = static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return start;
}

}  // namespace

absl::Status ValidateKey(absl::string_view key) {
  bool valid = !key.empty() && key.size() <= kMaxKeyBytes && key.front() != '.';
  for (char c : key) valid = valid && IsKeyChar(c);
  if (valid) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("invalid cache key \"", absl::CEscape(key.substr(0, kMaxKeyBytes)),
                                                 "\": a key is 1 to ", kMaxKeyBytes,
                                                 " characters from [A-Za-z0-9._-] and does not start with '.'"));
}

std::string EntryFileName(absl::string_view key) { return absl::StrCat(key, kEntryFileSuffix); }

std::string PathInDir(absl::string_view dir, absl::string_view file_name) { return absl::StrCat(dir, "/", file_name); }

std::string CompileLeaseFileName(absl::string_view key) { return absl::StrCat(".", key, kLeaseFileSuffix); }

bool IsCompileLeaseFileName(absl::string_view file_name) {
  return absl::ConsumePrefix(&file_name, ".") && absl::ConsumeSuffix(&file_name, kLeaseFileSuffix) &&
         ValidateKey(file_name).ok();
}

std::optional<std::string> KeyFromEntryFileName(absl::string_view file_name) {
  if (!absl::ConsumeSuffix(&file_name, kEntryFileSuffix) || !ValidateKey(file_name).ok()) {
    return std::nullopt;
  }
  return std::string(file_name);
}

std::string UniqueTempFileName(absl::string_view final_name) {
  static std::atomic<uint64_t> counter{CounterStart()};
  return absl::StrCat(".", final_name, ".", getpid(), ".", gettid(), ".",
                      counter.fetch_add(1, std::memory_order_relaxed), kTempFileSuffix);
}

bool IsTempFileName(absl::string_view file_name) {
  // Exactly what UniqueTempFileName makes: a user's own ".notes.tmp" is not the cache's to remove.
  if (!absl::ConsumePrefix(&file_name, ".") || !absl::ConsumeSuffix(&file_name, kTempFileSuffix)) return false;
  for (int i = 0; i < 3; ++i) {  // the counter, the thread id and the pid, from the end
    const size_t dot = file_name.rfind('.');
    if (dot == absl::string_view::npos) return false;
    const absl::string_view number = file_name.substr(dot + 1);
    if (number.empty() || number.size() > 20 || !std::all_of(number.begin(), number.end(), absl::ascii_isdigit)) {
      return false;
    }
    file_name = file_name.substr(0, dot);
  }
  return KeyFromEntryFileName(file_name).has_value() || file_name == kCacheDirTagName;
}

}  // namespace lazyrt::cache
