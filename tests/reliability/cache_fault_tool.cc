// Fault injection for the persistent cache (cache/), used by the reliability tests:
//
//   cache_fault_tool sigkill DIR ROUNDS SEED
//       ROUNDS times: start a writer process (below) on DIR, SIGKILL it after a random delay, then
//       check DIR. Fails unless every round's check passes and some kills landed mid-write.
//   cache_fault_tool sigkill-open DIR ROUNDS SEED
//       ROUNDS times: a child process opens a new cache directory under DIR and is SIGKILLed after a
//       delay aimed at the opening itself (mkdir of the parents, the trust check, the CACHEDIR.TAG
//       written); the directory must then open marked, with no warning, and keep an entry. Fails
//       unless some kills landed inside the opening.
//   cache_fault_tool writer DIR SEED [PUTS]
//       Put()s large self-checking entries under a few keys, forever or PUTS times.
//   cache_fault_tool check DIR
//       every *.lzc in DIR verifies (Store::VerifyAll) and looks up to a whole payload of its own key;
//       temporary files are never listed as entries. Prints "entries=N temp_files=M".
//   cache_fault_tool verify DIR
//       every entry of the runtime's cache in DIR is sound (as a lookup of this build would see it);
//       prints one line per entry, "<key> sound" or "<key> <miss reason>".
//   cache_fault_tool damage DIR ROUND
//       damages every entry of the runtime's cache in DIR, entry i (sorted by key) with damage kind
//       (ROUND + i) mod kinds, and prints "<key> <kind> <expected miss reason>" per entry.
//   cache_fault_tool kinds
//       prints the number of damage kinds.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "cache/entry_format.h"
#include "cache/layout.h"
#include "cache/location.h"
#include "cache/store.h"
#include "pjrt_sim/executable.h"

namespace lazyrt::cache {
namespace {

// The writer's entries carry this producer version; the runtime's carry RuntimeProducerVersion().
constexpr absl::string_view kWriterProducer = "reliability-writer/1";
constexpr int kWriterKeys = 6;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "cache_fault_tool: FAIL: %s\n", what.c_str());
  std::exit(1);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) Fail("cannot write " + path);
}

std::unique_ptr<Store> OpenStore(const std::string& dir, absl::string_view producer, bool read_only,
                                 uint64_t max_bytes = 0) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(
      {.dir = dir, .producer_version = std::string(producer), .read_only = read_only, .max_bytes = max_bytes});
  if (!store.ok()) Fail(absl::StrCat("cannot open the store in ", dir, ": ", store.status().message()));
  return *std::move(store);
}

// ---- The writer and its self-checking payloads ---------------------------------------------------

// "<key> <number> <size>\n", then pseudo-random bytes, then the XXH3 of everything before it: a
// payload that proves it is whole and belongs to its key, independently of the store's checks.
std::string MakePayload(const std::string& key, uint64_t number, size_t size, std::mt19937_64& rng) {
  std::string payload = absl::StrCat(key, " ", number, " ", size, "\n");
  const size_t header = payload.size();
  payload.resize(size + 8);
  // Half of each 8 bytes random, half nibbles: compressible enough to be realistic, big enough to take
  // a while to write. A word at a time: the writer should spend its time in Put, where the kills aim.
  for (size_t at = header; at < size; at += 8) {
    const uint64_t r = rng() & 0x0f0f0f0fffffffffu;
    std::memcpy(payload.data() + at, &r, std::min<size_t>(8, size - at));
  }
  payload.resize(size);
  const uint64_t sum = XXH3_64bits(payload.data(), payload.size());
  payload.append(reinterpret_cast<const char*>(&sum), 8);
  return payload;
}

// Why `payload` is not a whole payload of `key`, or nullopt.
std::optional<std::string> CheckPayload(const std::string& key, const std::string& payload) {
  if (payload.size() < 8) return "payload shorter than its checksum";
  uint64_t sum;
  std::memcpy(&sum, payload.data() + payload.size() - 8, 8);
  if (XXH3_64bits(payload.data(), payload.size() - 8) != sum) return "payload fails its own checksum";
  const std::vector<std::string> first = absl::StrSplit(payload.substr(0, payload.find('\n')), ' ');
  size_t size = 0;
  if (first.size() != 3 || first[0] != key || !absl::SimpleAtoi(first[2], &size) || size + 8 != payload.size()) {
    return "payload of another key or size: " + payload.substr(0, std::min<size_t>(64, payload.find('\n')));
  }
  return std::nullopt;
}

int Writer(const std::string& dir, uint64_t seed, int64_t puts) {
  // Every other writer also evicts, so kills land in eviction too.
  std::unique_ptr<Store> store = OpenStore(dir, kWriterProducer, false, seed % 2 == 1 ? (uint64_t{12} << 20) : 0);
  // Tells SigkillRounds that the writes begin: it aims its kill from here, not from the process start.
  std::fputs("open\n", stdout);
  std::fflush(stdout);
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; puts < 0 || i < puts; ++i) {
    const std::string key = absl::StrCat("entry-", rng() % kWriterKeys);
    const size_t size = (size_t{256} << 10) + rng() % (size_t{2} << 20);
    absl::StatusOr<PutOutcome> put = store->Put(key, MakePayload(key, static_cast<uint64_t>(i), size, rng), 50, "{}");
    if (!put.ok()) Fail(absl::StrCat("Put ", key, ": ", put.status().message()));
  }
  return 0;
}

std::vector<std::string> TempFiles(const std::string& dir) {
  std::vector<std::string> temps;
  for (const auto& item : std::filesystem::directory_iterator(dir)) {
    const std::string name = item.path().filename().string();
    if (IsTempFileName(name)) temps.push_back(item.path().string());
  }
  return temps;
}

// Checks DIR as a reader after a crash would: returns the number of entries.
int64_t Check(const std::string& dir, bool quiet = false) {
  std::unique_ptr<Store> store = OpenStore(dir, kWriterProducer, /*read_only=*/true);
  absl::StatusOr<std::vector<VerifiedEntry>> verified = store->VerifyAll();
  if (!verified.ok()) Fail(std::string(verified.status().message()));
  for (const VerifiedEntry& e : *verified) {
    if (e.defect) {
      Fail(absl::StrCat("entry ", e.key, " is visible but damaged: ", MissReasonName(e.defect->reason), ": ",
                        e.defect->detail));
    }
    LookupResult found = store->Lookup(e.key);
    const Entry* entry = std::get_if<Entry>(&found);
    if (entry == nullptr) Fail(absl::StrCat("entry ", e.key, " verifies but does not look up"));
    if (std::optional<std::string> bad = CheckPayload(e.key, entry->payload))
      Fail(absl::StrCat("entry ", e.key, ": ", *bad));
  }
  // Every *.lzc is an entry that was checked above: nothing else wears an entry's name.
  int64_t lzc_files = 0;
  for (const auto& item : std::filesystem::directory_iterator(dir)) {
    const std::string name = item.path().filename().string();
    if (IsTempFileName(name)) continue;
    if (name.size() > 4 && name.ends_with(".lzc")) ++lzc_files;
  }
  if (lzc_files != static_cast<int64_t>(verified->size())) {
    Fail(absl::StrCat(lzc_files, " *.lzc files but ", verified->size(), " entries verified"));
  }
  // Temporary files are never listed, looked up or counted as entries.
  absl::StatusOr<std::vector<ListedEntry>> listed = store->List();
  if (!listed.ok()) Fail(std::string(listed.status().message()));
  const std::vector<std::string> temps = TempFiles(dir);
  for (const ListedEntry& e : *listed) {
    if (e.key.starts_with(".")) Fail("a temporary file is listed as entry " + e.key);
  }
  if (!quiet) std::printf("entries=%zu temp_files=%zu\n", verified->size(), temps.size());
  return static_cast<int64_t>(verified->size());
}

// Left-behind temporary files are removed only once they are older than any write can be: ages DIR's
// and lets eviction sweep them, checking that every one goes and every entry stays.
void SweepStaleTempFiles(const std::string& dir) {
  for (const std::string& temp : TempFiles(dir)) {
    const struct timespec times[2] = {{0, UTIME_OMIT}, {time(nullptr) - 3 * 3600, 0}};
    utimensat(AT_FDCWD, temp.c_str(), times, 0);
  }
  const int64_t before = Check(dir, true);
  absl::StatusOr<std::vector<EvictedEntry>> evicted =
      OpenStore(dir, kWriterProducer, false)->EvictTo(std::numeric_limits<uint64_t>::max());
  if (!evicted.ok() || !evicted->empty()) Fail("sweeping stale temporary files in " + dir + " evicted or failed");
  if (!TempFiles(dir).empty()) Fail("stale temporary files in " + dir + " were not swept");
  if (Check(dir, true) != before) Fail("sweeping temporary files in " + dir + " lost entries");
}

int SigkillRounds(const std::string& dir, int rounds, uint64_t seed) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::mt19937_64 rng(seed);
  int mid_write = 0, entries_seen = 0, stale_cleanups = 0;
  for (int round = 0; round < rounds; ++round) {
    const std::vector<std::string> temps_before = TempFiles(dir);
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) Fail("pipe failed");
    const pid_t pid = fork();
    if (pid < 0) Fail("fork failed");
    if (pid == 0) {
      dup2(ready[1], STDOUT_FILENO);  // the copy is not close-on-exec: the writer's stdout
      const std::string seed_text = std::to_string(seed * 1000 + static_cast<uint64_t>(round));
      execl("/proc/self/exe", "cache_fault_tool", "writer", dir.c_str(), seed_text.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(ready[1]);
    // The kill lands a random time after the writer opened the store, within its first puts (each takes
    // milliseconds): timed from the process start, slow starts (sanitizers) left few kills in a write.
    struct pollfd open_line = {ready[0], POLLIN, 0};
    const int polled = poll(&open_line, 1, 60'000);
    close(ready[0]);
    if (polled != 1 || (open_line.revents & POLLIN) == 0) {
      kill(pid, SIGKILL);  // a writer left running would write on and hold the test's output open
      int status = 0;
      waitpid(pid, &status, 0);
      Fail(absl::StrCat("round ", round, ": the writer ",
                        polled == 0 ? "did not open the store in 60 s" : "ended before it opened the store",
                        " (status ", status, ")"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100000));
    kill(pid, SIGKILL);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) Fail("waitpid failed");
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
      Fail(absl::StrCat("round ", round, ": the writer ended before it was killed (status ", status, ")"));
    }
    // A temporary file that was not there before: the kill landed while an entry was being written.
    if (TempFiles(dir).size() > temps_before.size()) ++mid_write;
    if (Check(dir, true) > 0) ++entries_seen;
    if (TempFiles(dir).size() > 8) {
      SweepStaleTempFiles(dir);
      ++stale_cleanups;
    }
  }
  // The directory is still fully usable: a writer that is not killed finishes its puts.
  const pid_t pid = fork();
  if (pid == 0) _exit(Writer(dir, seed + 7, 12));
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Fail("a writer after the kills failed");
  const int64_t final_entries = Check(dir);
  std::printf(
      "sigkill: %d rounds, %d killed mid-write, %d with entries visible, %d stale sweeps, %lld entries at the end\n",
      rounds, mid_write, entries_seen, stale_cleanups, static_cast<long long>(final_entries));
  if (mid_write == 0) Fail("no kill landed while an entry was being written: the test tested nothing");
  if (final_entries == 0) Fail("no entries at the end");
  return 0;
}

// How far a killed Store::Open of a new directory got.
enum class OpenStage { kNotStarted, kInside, kDone };

// `parent` is the first directory the opening creates, `dir` the cache directory below it.
OpenStage StageOf(const std::string& parent, const std::string& dir) {
  if (!std::filesystem::exists(parent)) return OpenStage::kNotStarted;
  return IsMarkedCacheDir(dir) ? OpenStage::kDone : OpenStage::kInside;
}

// Forks a child that opens `dir` and, when it has, writes one byte ('o' opened, 'f' failed) to the
// returned pipe's read end and waits to be killed.
std::pair<pid_t, int> ForkOpener(const std::string& dir) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) Fail("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) Fail("fork failed");
  if (pid == 0) {
    absl::StatusOr<std::unique_ptr<Store>> store =
        Store::Open({.dir = dir, .producer_version = std::string(kWriterProducer)});
    const char reply = store.ok() ? 'o' : 'f';
    if (write(ready[1], &reply, 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  close(ready[1]);
  return {pid, ready[0]};
}

// Kills an opener, which ends only so: a child that ended otherwise crashed or failed a sanitizer's check.
void KillOpener(pid_t pid, const std::string& dir) {
  kill(pid, SIGKILL);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) Fail("waitpid failed");
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
    Fail(absl::StrCat("the process opening ", dir, " ended before it was killed (status ", status, ")"));
  }
}

int SigkillDuringOpen(const std::string& base, int rounds, uint64_t seed) {
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  // How long a child takes from the fork to an opened store, unkilled: the median of a few.
  std::vector<double> opened_us;
  for (int probe = 0; probe < 5; ++probe) {
    const auto forked = std::chrono::steady_clock::now();
    const std::string dir = absl::StrCat(base, "/probe-", probe, "/cache");
    auto [pid, ready] = ForkOpener(dir);
    struct pollfd line = {ready, POLLIN, 0};
    char reply = 0;
    const bool answered = poll(&line, 1, 60'000) == 1 && read(ready, &reply, 1) == 1;
    opened_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - forked).count());
    close(ready);
    KillOpener(pid, dir);
    if (!answered || reply != 'o')
      Fail(absl::StrCat("a child could not open a new cache directory (probe ", probe, ")"));
  }
  std::sort(opened_us.begin(), opened_us.end());
  const double full_window = 2 * opened_us[opened_us.size() / 2];
  // The kills aim between the latest delay that found nothing created and the earliest that found the
  // directory marked, where the opening is under way; a kill inside widens the window again, so the
  // delays keep moving over the whole opening rather than settling on one instant.
  double low = 0, high = full_window;
  std::mt19937_64 rng(seed);
  int stages[3] = {0, 0, 0};
  int left_temp_files = 0;
  for (int round = 0; round < rounds; ++round) {
    const std::string parent = absl::StrCat(base, "/round-", round);
    const std::string dir = parent + "/cache";
    const double delay = low + (high - low) * std::uniform_real_distribution<double>(0, 1)(rng);
    const auto forked = std::chrono::steady_clock::now();
    auto [pid, ready] = ForkOpener(dir);
    std::this_thread::sleep_until(forked + std::chrono::duration<double, std::micro>(delay));
    KillOpener(pid, dir);
    char reply = 0;
    const bool answered = read(ready, &reply, 1) == 1;  // the write end is closed: never blocks
    close(ready);
    if (answered && reply != 'o') Fail(absl::StrCat("round ", round, ": the child could not open ", dir));
    const OpenStage stage = StageOf(parent, dir);
    ++stages[static_cast<int>(stage)];
    if (stage == OpenStage::kNotStarted) low = delay;
    if (stage == OpenStage::kDone) high = delay;
    if (stage == OpenStage::kInside) {
      const double width = high - low;
      low = std::max(0.0, low - width);
      high = std::min(full_window, high + width);
    }
    if (high - low < 1) {
      low = 0;
      high = full_window;
    }
    // What the kill left is the cache's own: no file but temporary files of the mark and the mark.
    const bool made = std::filesystem::exists(dir);
    const std::vector<std::string> left = made ? TempFiles(dir) : std::vector<std::string>{};
    if (!left.empty()) ++left_temp_files;
    if (made) {
      for (const auto& item : std::filesystem::directory_iterator(dir)) {
        const std::string name = item.path().filename().string();
        if (name != kCacheDirTagFileName && !IsTempFileName(name)) {
          Fail(absl::StrCat("round ", round, ": the kill left ", item.path().string()));
        }
      }
    }
    // Whatever it left, the directory is a whole cache: it opens marked (on disk) and trusted, with
    // no warning, and keeps an entry.
    std::unique_ptr<Store> store = OpenStore(dir, kWriterProducer, false);
    if (!IsMarkedCacheDir(dir) || !store->trusted() || !store->warning().empty()) {
      Fail(absl::StrCat("round ", round, ": after a kill at ", delay, " us the directory opens ",
                        IsMarkedCacheDir(dir) ? "" : "unmarked ", store->trusted() ? "" : "distrusted ",
                        "with warning '", store->warning(), "'"));
    }
    const std::string key = absl::StrCat("entry-", round % kWriterKeys);
    absl::StatusOr<PutOutcome> put = store->Put(key, MakePayload(key, 0, 4096, rng), 1, "{}");
    if (!put.ok() || *put != PutOutcome::kWritten) {
      Fail(absl::StrCat("round ", round,
                        ": Put after the kill: ", put.ok() ? PutOutcomeName(*put) : put.status().message()));
    }
    if (Check(dir, true) != 1) Fail(absl::StrCat("round ", round, ": the entry put after the kill is not there"));
    // The mark's temporary files are swept once stale, as an entry's are.
    if (!left.empty()) SweepStaleTempFiles(dir);
  }
  std::printf(
      "sigkill-open: %d rounds, %.0f us from fork to an opened store: killed before the opening made anything %d, "
      "inside it %d (%d leaving temporary files), after it %d\n",
      rounds, full_window / 2, stages[0], stages[1], left_temp_files, stages[2]);
  if (stages[1] == 0) Fail("no kill landed inside Store::Open: the test tested nothing");
  return 0;
}

// ---- Damage to the runtime's entries ---------------------------------------------------------------

// The producer version the runtime's entries carry.
std::string RuntimeProducerVersion() { return pjrt::Executable::ProducerVersion(); }

struct Damage {
  std::string name;
  // The miss reason a lookup gives, or "unloadable" when the store hits and the runtime fails to
  // load the payload.
  std::string expected;
  // Returns the damaged file contents; `others` holds every entry file's original bytes by index.
  std::function<std::string(const std::string& file, const EntryHeader& header)> apply;
};

std::string Flip(std::string file, uint64_t offset) {
  if (offset < file.size()) file[offset] = static_cast<char>(file[offset] ^ 0x5a);
  return file;
}

// The same entry re-encoded with `change` applied to its header (checksums right).
std::string Reencoded(const std::string& file, const EntryHeader& header,
                      const std::function<void(EntryHeader&)>& change) {
  EntryHeader h = header;
  change(h);
  absl::StatusOr<std::string> encoded = EncodeHeader(h);
  if (!encoded.ok()) Fail(std::string(encoded.status().message()));
  return *encoded + file.substr(EncodedHeaderSize(header));
}

// A valid entry (checksums right) of the same key with `payload`.
std::string WithPayload(const EntryHeader& header, const std::string& payload) {
  absl::StatusOr<std::string> encoded = EncodeEntry(header, payload);
  if (!encoded.ok()) Fail(std::string(encoded.status().message()));
  return *encoded;
}

std::vector<Damage> Damages() {
  auto header_size = [](const EntryHeader& h) { return EncodedHeaderSize(h); };
  return {
      {"truncate_to_0", "truncated", [](const std::string&, const EntryHeader&) { return std::string(); }},
      {"truncate_in_fixed_header", "truncated",
       [](const std::string& f, const EntryHeader&) { return f.substr(0, 40); }},
      {"truncate_in_header_strings", "truncated",
       [=](const std::string& f, const EntryHeader& h) { return f.substr(0, header_size(h) - 3); }},
      {"truncate_in_payload", "truncated",
       [=](const std::string& f, const EntryHeader& h) { return f.substr(0, header_size(h) + h.compressed_size / 2); }},
      {"truncate_last_byte", "truncated",
       [](const std::string& f, const EntryHeader&) { return f.substr(0, f.size() - 1); }},
      {"flip_magic", "bad_magic", [](const std::string& f, const EntryHeader&) { return Flip(f, 0); }},
      {"flip_format_version", "format_version", [](const std::string& f, const EntryHeader&) { return Flip(f, 8); }},
      {"flip_key_length", "header_checksum", [](const std::string& f, const EntryHeader&) { return Flip(f, 16); }},
      {"flip_compressed_size", "header_checksum", [](const std::string& f, const EntryHeader&) { return Flip(f, 33); }},
      {"flip_producer_version", "header_checksum",
       [](const std::string& f, const EntryHeader&) { return Flip(f, 72); }},
      {"flip_header_checksum", "header_checksum",
       [=](const std::string& f, const EntryHeader& h) { return Flip(f, header_size(h) - 1); }},
      {"flip_first_payload_byte", "payload_checksum",
       [=](const std::string& f, const EntryHeader& h) { return Flip(f, header_size(h)); }},
      {"flip_middle_payload_byte", "payload_checksum",
       [=](const std::string& f, const EntryHeader& h) { return Flip(f, header_size(h) + h.compressed_size / 2); }},
      {"flip_last_byte", "payload_checksum",
       [](const std::string& f, const EntryHeader&) { return Flip(f, f.size() - 1); }},
      {"zero_header", "bad_magic",
       [=](const std::string& f, const EntryHeader& h) {
         return std::string(header_size(h), '\0') + f.substr(header_size(h));
       }},
      {"trailing_bytes", "payload_checksum", [](const std::string& f, const EntryHeader&) { return f + "trailing"; }},
      {"foreign_format_version", "format_version",
       [](const std::string& f, const EntryHeader& h) {
         return Reencoded(f, h, [](EntryHeader& x) { x.format_version = kEntryFormatVersion + 1; });
       }},
      {"foreign_producer_version", "producer_version",
       [](const std::string& f, const EntryHeader& h) {
         return Reencoded(f, h,
                          [](EntryHeader& x) { x.producer_version = "lazyrt-sim-compiler/0; executable format 1"; });
       }},
      {"payload_not_an_executable", "unloadable",
       [](const std::string&, const EntryHeader& h) { return WithPayload(h, "this is not a serialized executable"); }},
      {"payload_of_a_future_executable_format", "unloadable",
       [](const std::string& f, const EntryHeader& h) {
         Decoded<std::string> payload = DecodePayload(h, absl::string_view(f).substr(EncodedHeaderSize(h)));
         std::string exe = std::get<std::string>(payload);
         exe[8] = static_cast<char>(exe[8] + 1);  // the executable format version
         return WithPayload(h, exe);
       }},
      {"payload_truncated_executable", "unloadable",
       [](const std::string& f, const EntryHeader& h) {
         Decoded<std::string> payload = DecodePayload(h, absl::string_view(f).substr(EncodedHeaderSize(h)));
         const std::string& exe = std::get<std::string>(payload);
         return WithPayload(h, exe.substr(0, exe.size() / 2));
       }},
  };
}

struct RuntimeEntry {
  std::string key;
  std::string path;
  std::string file;
  EntryHeader header;
};

std::vector<RuntimeEntry> RuntimeEntries(const std::string& dir) {
  std::unique_ptr<Store> store = OpenStore(dir, RuntimeProducerVersion(), true);
  absl::StatusOr<std::vector<ListedEntry>> listed = store->List();
  if (!listed.ok()) Fail(std::string(listed.status().message()));
  std::vector<RuntimeEntry> entries;
  for (const ListedEntry& e : *listed) {
    const auto* header = std::get_if<EntryHeader>(&e.header);
    if (header == nullptr) Fail("entry " + e.key + " is damaged before the damage");
    const std::string path = dir + "/" + EntryFileName(e.key);
    entries.push_back({e.key, path, ReadFile(path), *header});
  }
  return entries;
}

int Verify(const std::string& dir) {
  std::unique_ptr<Store> store = OpenStore(dir, RuntimeProducerVersion(), true);
  absl::StatusOr<std::vector<VerifiedEntry>> verified = store->VerifyAll();
  if (!verified.ok()) Fail(std::string(verified.status().message()));
  int defects = 0;
  for (const VerifiedEntry& e : *verified) {
    std::printf("%s %s\n", e.key.c_str(), e.defect ? std::string(MissReasonName(e.defect->reason)).c_str() : "sound");
    if (e.defect) ++defects;
  }
  return defects == 0 ? 0 : 1;
}

int DamageEntries(const std::string& dir, int round) {
  const std::vector<Damage> damages = Damages();
  const std::vector<RuntimeEntry> entries = RuntimeEntries(dir);
  if (entries.size() < 2) Fail("fewer than two entries to damage");
  if (round < 0) {
    // Round -1: every entry file swapped with the next one's (a cyclic shift: each name holds
    // another key's entry).
    for (size_t i = 0; i < entries.size(); ++i) {
      WriteFile(entries[i].path, entries[(i + 1) % entries.size()].file);
      std::printf("%s swapped_with_%s key_mismatch\n", entries[i].key.c_str(),
                  entries[(i + 1) % entries.size()].key.c_str());
    }
    return 0;
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const Damage& d = damages[(static_cast<size_t>(round) + i) % damages.size()];
    WriteFile(entries[i].path, d.apply(entries[i].file, entries[i].header));
    std::printf("%s %s %s\n", entries[i].key.c_str(), d.name.c_str(), d.expected.c_str());
  }
  // The store must classify each damaged entry as expected (unloadable ones look sound to it).
  std::unique_ptr<Store> store = OpenStore(dir, RuntimeProducerVersion(), true);
  for (size_t i = 0; i < entries.size(); ++i) {
    const Damage& d = damages[(static_cast<size_t>(round) + i) % damages.size()];
    const std::optional<Miss> miss = store->Verify(entries[i].key);
    const std::string got = miss ? std::string(MissReasonName(miss->reason)) : "unloadable";
    if (got != d.expected)
      Fail(absl::StrCat(entries[i].key, " damaged by ", d.name, ": the store says ", got, ", expected ", d.expected));
  }
  return 0;
}

// ---- Entries that pass every checksum but do not fit their graph (issue 16, class 1) -----------------

std::string PayloadOf(const RuntimeEntry& e) {
  Decoded<std::string> payload = DecodePayload(e.header, absl::string_view(e.file).substr(EncodedHeaderSize(e.header)));
  if (!std::holds_alternative<std::string>(payload)) Fail("entry " + e.key + " does not decode");
  return std::get<std::string>(payload);
}

// Serialize's frame (magic and format version from `like`) around `body`.
std::string Framed(const std::string& like, const std::string& body) {
  std::string out = like.substr(0, 12);
  const uint64_t length = body.size();
  out.append(reinterpret_cast<const char*>(&length), 8);
  return out + body;
}

// A serialized executable's proto, changed by `change`, serialized again with its frame.
std::string ChangedExecutable(const std::string& serialized,
                              const std::function<void(pjrt::proto::Executable&)>& change) {
  absl::StatusOr<pjrt::proto::Executable> proto = pjrt::Executable::Parse(serialized);
  if (!proto.ok()) Fail(std::string(proto.status().message()));
  change(*proto);
  std::string body;
  if (!proto->SerializeToString(&body)) Fail("cannot serialize a changed executable");
  return Framed(serialized, body);
}

// Each runtime entry i replaced by a crafted one with valid checksums, the producer version and key
// of entry i, chosen by (round + i) among: another graph's executable and metadata; another graph's
// executable under entry i's own metadata (the metadata fits, the executable does not); an arena of
// 2^40 bytes; a payload of millions of empty kernels that protobuf would expand to gigabytes.
int CraftEntries(const std::string& dir, int round) {
  const std::vector<RuntimeEntry> entries = RuntimeEntries(dir);
  if (entries.size() < 2) Fail("fewer than two entries to craft from");
  constexpr int kCrafts = 4;
  for (size_t i = 0; i < entries.size(); ++i) {
    const RuntimeEntry& own = entries[i];
    const RuntimeEntry& other = entries[(i + 1) % entries.size()];
    EntryHeader header = own.header;
    std::string payload;
    std::string name, expected;
    switch ((static_cast<size_t>(round) + i) % kCrafts) {
      case 0:
        name = "another_graphs_executable_and_metadata", expected = "graph_mismatch";
        header.metadata = other.header.metadata;
        payload = PayloadOf(other);
        break;
      case 1:
        name = "another_graphs_executable_under_own_metadata", expected = "graph_mismatch";
        payload = PayloadOf(other);
        break;
      case 2:
        name = "arena_of_a_tebibyte", expected = "unloadable";
        payload =
            ChangedExecutable(PayloadOf(own), [](pjrt::proto::Executable& e) { e.set_arena_bytes(int64_t{1} << 40); });
        break;
      default: {
        name = "payload_expanding_at_parse", expected = "unloadable";
        std::string body;
        for (int k = 0; k < (8 << 20); ++k) body.append("\x32\x00", 2);  // field 6 (kernels), empty
        payload = Framed(PayloadOf(own), body);
        break;
      }
    }
    absl::StatusOr<std::string> encoded = EncodeEntry(header, payload);
    if (!encoded.ok()) Fail(std::string(encoded.status().message()));
    WriteFile(own.path, *encoded);
    std::printf("%s %s %s (%zu bytes)\n", own.key.c_str(), name.c_str(), expected.c_str(), encoded->size());
  }
  return 0;
}

int Main(const std::vector<std::string>& args) {
  auto number = [&](size_t i) {
    int64_t v = 0;
    if (i >= args.size() || !absl::SimpleAtoi(args[i], &v))
      Fail("expected a number as argument " + std::to_string(i + 1));
    return v;
  };
  const std::string command = args.empty() ? "" : args[0];
  if (command == "sigkill" && args.size() == 4) {
    return SigkillRounds(args[1], static_cast<int>(number(2)), static_cast<uint64_t>(number(3)));
  }
  if (command == "sigkill-open" && args.size() == 4) {
    return SigkillDuringOpen(args[1], static_cast<int>(number(2)), static_cast<uint64_t>(number(3)));
  }
  if (command == "writer" && (args.size() == 3 || args.size() == 4)) {
    return Writer(args[1], static_cast<uint64_t>(number(2)), args.size() == 4 ? number(3) : -1);
  }
  if (command == "check" && args.size() == 2) return Check(args[1]) >= 0 ? 0 : 1;
  if (command == "verify" && args.size() == 2) return Verify(args[1]);
  if (command == "damage" && args.size() == 3) return DamageEntries(args[1], static_cast<int>(number(2)));
  if (command == "craft" && args.size() == 3) return CraftEntries(args[1], static_cast<int>(number(2)));
  if (command == "kinds" && args.size() == 1) {
    std::printf("%zu\n", Damages().size());
    return 0;
  }
  std::fprintf(stderr,
               "usage: cache_fault_tool sigkill DIR ROUNDS SEED | sigkill-open DIR ROUNDS SEED | writer DIR SEED "
               "[PUTS] | check DIR | verify DIR |\n"
               "       damage DIR ROUND (-1: swap every entry with the next) | craft DIR ROUND | kinds\n");
  return 2;
}

}  // namespace
}  // namespace lazyrt::cache

int main(int argc, char** argv) { return lazyrt::cache::Main(std::vector<std::string>(argv + 1, argv + argc)); }
