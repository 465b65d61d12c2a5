#include "lazy/diagnostics_stacks.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <execinfo.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/graph_signature.h"
#include "ir/node.h"

namespace lazyrt::detail {
namespace {

// Frames captured per stack: the runtime's own frames (op, tracing helpers, node construction; about
// six) come first, so this leaves room for several user frames above them.
constexpr int kCapturedFrames = 16;
// Distinct stacks kept; a program creating more (generated code, deep recursion) gets id 0 beyond.
constexpr size_t kMaxStacks = 65535;

struct Frames {
  std::array<void*, kCapturedFrames> pc{};
  int size = 0;
  bool operator==(const Frames& o) const {
    return size == o.size && std::equal(pc.begin(), pc.begin() + size, o.pc.begin());
  }
  template <typename H>
  friend H AbslHashValue(H h, const Frames& f) {
    return H::combine_contiguous(std::move(h), f.pc.data(), static_cast<size_t>(f.size));
  }
};

struct Table {
  std::mutex mu;
  absl::flat_hash_map<Frames, uint16_t> ids;
  std::vector<Frames> stacks{Frames{}};                        // id 0: none
  Dwfl* dwfl = nullptr;                                        // opened at the first symbolization
  absl::flat_hash_map<void*, std::vector<std::string>> lines;  // pc -> its places (see Symbolize)
};

Table& GetTable() {
  static Table* t = new Table;
  return *t;
}

// A frame in lazyrt's own sources (built with its source root mapped away, so paths are relative and
// start with a layer's folder) or in a system header or library: not the user's.
bool IsUserFile(std::string_view file) {
  // A compiler cache may have rewritten the path relative to the build directory.
  while (file.substr(0, 3) == "../" || file.substr(0, 2) == "./") file.remove_prefix(file[1] == '/' ? 2 : 3);
  for (std::string_view layer : {"lazy/", "ir/", "pjrt_sim/", "lowering/", "cache/"}) {
    if (file.substr(0, layer.size()) == layer) return false;
  }
  return file.substr(0, 5) != "/usr/" && file.substr(0, 1) != "<";
}

bool IsSystemLibrary(std::string_view file) {
  for (std::string_view dir : {"/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/"}) {
    if (file.substr(0, dir.size()) == dir) return true;
  }
  return false;
}

// "file:line" when `file` is the user's, else "".
std::string UserPlace(const char* file, int line) {
  if (file == nullptr || line <= 0 || !IsUserFile(file)) return "";
  return absl::StrCat(ir::DisplayPath(file), ":", line);
}

// The places of the code at return address `pc`, innermost first: the line itself, then, for each
// function inlined there, the line that called it (the optimizer's inlining hides those frames from
// the unwinder, the debug information keeps them). Places not in the user's code are "". With the
// table's lock held.
const std::vector<std::string>& Symbolize(Table& t, void* pc) {
  auto it = t.lines.find(pc);
  if (it != t.lines.end()) return it->second;
  if (t.dwfl == nullptr) {
    static const Dwfl_Callbacks callbacks = {.find_elf = dwfl_linux_proc_find_elf,
                                             .find_debuginfo = dwfl_standard_find_debuginfo,
                                             .section_address = nullptr,
                                             .debuginfo_path = nullptr};
    t.dwfl = dwfl_begin(&callbacks);
    if (t.dwfl != nullptr &&
        (dwfl_linux_proc_report(t.dwfl, getpid()) != 0 || dwfl_report_end(t.dwfl, nullptr, nullptr) != 0)) {
      dwfl_end(t.dwfl);
      t.dwfl = nullptr;
    }
  }
  std::vector<std::string> places;
  // A return address points after the call; the call's own line is one byte before.
  const Dwarf_Addr address = reinterpret_cast<Dwarf_Addr>(pc) - 1;
  Dwfl_Module* module = t.dwfl != nullptr ? dwfl_addrmodule(t.dwfl, address) : nullptr;
  // The C library's frames below main(), a system library calling back: not the user's code.
  const char* module_file =
      module != nullptr ? dwfl_module_info(module, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr)
                        : nullptr;
  if (module_file != nullptr && IsSystemLibrary(module_file)) module = nullptr;
  Dwfl_Line* line = module != nullptr ? dwfl_module_getsrc(module, address) : nullptr;
  if (line != nullptr) {
    int line_number = 0;
    const char* file = dwfl_lineinfo(line, nullptr, &line_number, nullptr, nullptr, nullptr);
    places.push_back(UserPlace(file, line_number));
    Dwarf_Addr bias = 0;
    Dwarf_Die* cu = dwfl_module_addrdie(module, address, &bias);
    Dwarf_Files* files = nullptr;
    size_t file_count = 0;
    Dwarf_Die* scopes = nullptr;
    const int scope_count = cu != nullptr && dwarf_getsrcfiles(cu, &files, &file_count) == 0
                                ? dwarf_getscopes(cu, address - bias, &scopes)
                                : 0;
    for (int i = 0; i < scope_count; ++i) {
      if (dwarf_tag(&scopes[i]) != DW_TAG_inlined_subroutine) continue;
      Dwarf_Attribute attribute;
      Dwarf_Word call_file = 0, call_line = 0;
      if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &attribute), &call_file) != 0 ||
          dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &attribute), &call_line) != 0 ||
          call_file >= file_count) {
        continue;
      }
      places.push_back(UserPlace(dwarf_filesrc(files, call_file, nullptr, nullptr), static_cast<int>(call_line)));
    }
    free(scopes);
  }
  return t.lines.emplace(pc, std::move(places)).first->second;
}

// Unwinding costs microseconds per node (a few times the cost of tracing it), so only the nodes a
// finding can point at get a stack: inputs and constants (whose creation site a recompile names, and
// which tell a helper's callers apart), and nodes lazyrt created inside its own helpers (nn layers),
// whose file:line is lazyrt's and whose stack leads to the user's. Other nodes are named by the
// user's file:line already and are paired by it.
uint16_t CaptureForNode(const ir::Node& node) {
  if (node.op() == ir::OpKind::kDeviceData || node.op() == ir::OpKind::kConstant) return CaptureCallStack();
  const char* file = node.created_at().file_name();
  return file != nullptr && !IsUserFile(file) ? CaptureCallStack() : 0;
}

}  // namespace

void EnableCallStacks() { ir::SetCreationContextHook(&CaptureForNode); }

uint16_t CaptureCallStack() {
  Frames f;
  f.size = backtrace(f.pc.data(), kCapturedFrames);
  if (f.size <= 0) return 0;
  Table& t = GetTable();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.ids.find(f);
  if (it != t.ids.end()) return it->second;
  if (t.stacks.size() > kMaxStacks) return 0;
  const auto id = static_cast<uint16_t>(t.stacks.size());
  t.stacks.push_back(f);
  t.ids.emplace(f, id);
  return id;
}

std::vector<std::string> UserFrames(uint16_t id, size_t max_frames) {
  Table& t = GetTable();
  std::lock_guard<std::mutex> lock(t.mu);
  std::vector<std::string> frames;
  if (id == 0 || id >= t.stacks.size()) return frames;
  const Frames& f = t.stacks[id];
  for (int i = 0; i < f.size && frames.size() < max_frames; ++i) {
    for (const std::string& text : Symbolize(t, f.pc[static_cast<size_t>(i)])) {
      // Consecutive frames on one line (a lambda called where it is defined) are one place to the user.
      if (!text.empty() && (frames.empty() || frames.back() != text) && frames.size() < max_frames) {
        frames.push_back(text);
      }
    }
  }
  return frames;
}

std::string StackText(const std::vector<std::string>& frames) { return absl::StrJoin(frames, " <- "); }

}  // namespace lazyrt::detail
