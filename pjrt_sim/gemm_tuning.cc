#include "pjrt_sim/gemm_tuning.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "pjrt_sim/cpu_isa.h"
#include "pjrt_sim/hlo.h"
#include "pjrt_sim/kernels/attention.h"

namespace lazyrt::pjrt {
namespace {

// Version 2 added the libraries onednn_matmul and libxsmm; version 3 times a DOT's libraries only in the variants
// that compute its whole product's bits (a version-2 record could name a library for panels it then could not run);
// version 4 times the libraries in rounds (autotune.cc: a version-3 record could name a library by another's unlucky
// milliseconds). An older record's shapes are measured again (quietly: it is not damage) and the file rewritten at
// the first choice recorded.
constexpr char kHeader[] = "lazyrt-gemm-tuning 4";
constexpr absl::string_view kOlderHeaders[] = {"lazyrt-gemm-tuning 1", "lazyrt-gemm-tuning 2", "lazyrt-gemm-tuning 3"};
// Bounds on what is read: a machine tunes a few hundred shapes; anything past these is not our file.
constexpr int64_t kMaxFileBytes = 4 << 20;
constexpr size_t kMaxLineBytes = 4096;
constexpr int64_t kMaxDim = int64_t{1} << 30;
// How long a writer waits for another's lock before giving up recording (its own choice then stands).
constexpr auto kLockWait = std::chrono::seconds(5);

// The key of an entry: every field but the library.
std::string EntryKey(absl::string_view isa, absl::string_view type, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  return absl::StrCat(isa, "\t", type, "\t", m, "\t", n, "\t", k, "\t", ta ? 1 : 0, "\t", tb ? 1 : 0);
}

std::string EntryKey(const GemmShape& s) {
  return EntryKey(HostIsa(), PrimitiveTypeName(s.type), s.m, s.n, s.k, s.transpose_lhs, s.transpose_rhs);
}

void Warn(const std::string& path, const std::string& what) {
  std::fprintf(stderr, "lazyrt: warning: GEMM tuning file %s: %s\n", path.c_str(), what.c_str());
}

std::optional<GemmLibrary> LibraryNamed(absl::string_view name) {
  for (GemmLibrary library : kGemmLibraries) {
    if (absl::string_view(GemmLibraryName(library).data(), GemmLibraryName(library).size()) == name) return library;
  }
  return std::nullopt;
}

bool ParseDim(absl::string_view text, int64_t* out) {
  return absl::SimpleAtoi(text, out) && *out >= 0 && *out < kMaxDim;
}

bool ParseFlag(absl::string_view text, bool* out) {
  if (text != "0" && text != "1") return false;
  *out = text == "1";
  return true;
}

// One line parsed into (key, library), or a reason it is refused.
std::optional<std::string> ParseLine(absl::string_view line, std::string* key, GemmLibrary* library) {
  if (line.size() > kMaxLineBytes) return absl::StrCat("longer than ", kMaxLineBytes, " bytes");
  const std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
  if (f.size() != 8) return absl::StrCat(f.size(), " fields, not 8");
  bool type_known = false;
  for (PrimitiveType t : kAllPrimitiveTypes) type_known |= PrimitiveTypeName(t) == f[1];
  if (f[0].empty()) return "field cpu_isa is empty";
  if (!type_known) return absl::StrCat("field dtype '", f[1], "' is not a type");
  int64_t m, n, k;
  bool ta, tb;
  if (!ParseDim(f[2], &m) || !ParseDim(f[3], &n) || !ParseDim(f[4], &k)) {
    return absl::StrCat("fields m, n, k ('", f[2], "', '", f[3], "', '", f[4], "') must be integers in [0, 2^30)");
  }
  if (!ParseFlag(f[5], &ta) || !ParseFlag(f[6], &tb)) return "fields transpose_lhs, transpose_rhs must be 0 or 1";
  const std::optional<GemmLibrary> named = LibraryNamed(f[7]);
  if (!named) return absl::StrCat("field library '", f[7], "' is not a GEMM library");
  *key = EntryKey(f[0], f[1], m, n, k, ta, tb);
  *library = *named;
  return std::nullopt;
}

// The file's valid entries; damage is warned about and skipped. A missing file is an empty record.
std::map<std::string, GemmLibrary> ReadEntries(const std::string& path) {
  std::map<std::string, GemmLibrary> entries;
  std::ifstream in(path, std::ios::binary | std::ios::ate);  // at the end: its size first
  if (!in) return entries;
  const std::streamoff size = in.tellg();
  if (size < 0 || size > kMaxFileBytes) {
    Warn(path, absl::StrCat("larger than ", kMaxFileBytes, " bytes: ignored, shapes are measured again"));
    return entries;
  }
  std::string text(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(text.data(), size)) {
    Warn(path, "cannot be read: ignored, shapes are measured again");
    return entries;
  }
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && std::ranges::find(kOlderHeaders, lines[0]) != std::ranges::end(kOlderHeaders)) return entries;
  if (lines.empty() || lines[0] != kHeader) {
    Warn(path, absl::StrCat("line 1 is not '", kHeader, "': ignored, shapes are measured again"));
    return entries;
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty() && i + 1 == lines.size()) break;  // the final newline
    std::string key;
    GemmLibrary library;
    if (std::optional<std::string> refused = ParseLine(lines[i], &key, &library)) {
      Warn(path, absl::StrCat("line ", i + 1, ": ", *refused, ": entry ignored"));
      continue;
    }
    entries.emplace(key, library);  // a repeated entry: the first one stands
  }
  return entries;
}

// Creates the directories leading to `path` (0700; existing ones are kept).
void MakeParents(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    mkdir(path.substr(0, slash).c_str(), 0700);
  }
}

// An exclusive flock on `path`.lock, waited for at most kLockWait. -1 if not taken.
int LockFile(const std::string& path) {
  const int fd = open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + kLockWait;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK || std::chrono::steady_clock::now() > deadline) {
      close(fd);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return fd;
}

// Writes `text` to `path` through `path`.tmp and a rename, so that a reader sees the old file or the whole
// new one; returns 0 or the errno of what failed. Called with the lock held: the lock holder is the only
// writer, so one temporary name serves every process, and a killed writer's leftover is replaced by the
// next one instead of piling up. It is unlinked first and created O_EXCL, so a symbolic link planted there
// is never followed. Mode 0644 (less the umask), as the record was before: other users of a shared path may
// read it.
int WriteAtomically(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  unlink(temp.c_str());
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int error = 0;
  for (size_t done = 0; error == 0 && done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0 || errno != EINTR) {
      error = n == 0 ? EIO : errno;
    }
  }
  if (close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && std::rename(temp.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) unlink(temp.c_str());
  return error;
}

// Removes the "<file>.tmp.<pid>" files that writers before the single temporary name left when they were
// killed mid-write. Called with the lock held: no writer is using one.
void RemovePerProcessLeftovers(const std::string& path) {
  const std::filesystem::path file(path);
  const std::string prefix = file.filename().string() + ".tmp.";
  std::error_code error;
  const std::filesystem::path dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  for (std::filesystem::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    const absl::string_view pid = absl::string_view(name).substr(std::min(prefix.size(), name.size()));
    if (absl::StartsWith(name, prefix) && !pid.empty() && std::ranges::all_of(pid, absl::ascii_isdigit)) {
      unlink(it->path().c_str());
    }
  }
}

}  // namespace

std::optional<GemmShape> TunedGemmShape(const proto::Executable& exe, const proto::Kernel& kernel) {
  if (kernel.kind() == proto::Kernel::DOT) {
    return GemmShape{FromProto(exe.slots(static_cast<int>(kernel.output())).shape()).type,
                     kernel.m(),
                     kernel.n(),
                     kernel.k(),
                     kernel.transpose_lhs(),
                     kernel.transpose_rhs()};
  }
  if (kernel.kind() != proto::Kernel::ATTENTION && kernel.kind() != proto::Kernel::ATTENTION_GRAD) return std::nullopt;
  const ArrayShape q = InputShape(kernel, 0, FromProto(exe.slots(static_cast<int>(kernel.inputs(0))).shape()));
  const ArrayShape k = InputShape(kernel, 1, FromProto(exe.slots(static_cast<int>(kernel.inputs(1))).shape()));
  // q [B..., L, E], k [B..., S, E]: the forward's scores of a block of queries, by the keys of one step.
  const int64_t keys = std::clamp<int64_t>(k.dims.end()[-2], 1, kAttentionKeyChunk);
  return GemmShape{q.type, kAttentionBlock, keys, q.dims.back(), false, true};
}

std::string GemmTuningRecord::DefaultPath() {
  const std::string flavor(BuildFlavor());
  const std::string name = absl::StrCat("/lazyrt-machine/gemm_tuning", flavor.empty() ? "" : "-", flavor, ".txt");
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') return absl::StrCat(xdg, name);
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/.cache", name);
  }
  return "";
}

std::optional<GemmLibrary> GemmTuningRecord::Lookup(const GemmShape& shape) const {
  const std::map<std::string, GemmLibrary> entries = ReadEntries(path_);
  const auto it = entries.find(EntryKey(shape));
  if (it == entries.end()) return std::nullopt;
  return it->second;
}

GemmLibrary GemmTuningRecord::Record(const GemmShape& shape, GemmLibrary measured) const {
  MakeParents(path_);
  const int lock = LockFile(path_);
  if (lock < 0) {
    Warn(path_, absl::StrCat("cannot lock ", path_, ".lock (", std::strerror(errno), "): choice not recorded"));
    return measured;
  }
  std::map<std::string, GemmLibrary> entries = ReadEntries(path_);
  const auto [it, added] = entries.emplace(EntryKey(shape), measured);
  if (added) {
    std::string text = absl::StrCat(kHeader, "\n");
    for (const auto& [key, library] : entries)
      absl::StrAppend(&text, key, "\t", std::string(GemmLibraryName(library)), "\n");
    if (const int error = WriteAtomically(path_, text); error != 0) {
      Warn(path_, absl::StrCat("cannot be written (", std::strerror(error), "): choice not recorded"));
    }
    RemovePerProcessLeftovers(path_);
  }
  const GemmLibrary recorded = it->second;
  close(lock);
  return recorded;
}

}  // namespace lazyrt::pjrt
