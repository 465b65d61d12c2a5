#include "pjrt_sim/buffer_assignment.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <vector>

#include "pjrt_sim/hlo.h"

namespace lazyrt::pjrt {

int64_t AssignBuffers(proto::Executable& exe) {
  const int num_slots = exe.slots_size();
  // The slot whose bytes a slot uses (aliases resolved).
  std::vector<int64_t> storage(static_cast<size_t>(num_slots));
  for (int s = 0; s < num_slots; ++s) {
    int64_t t = s;
    while (exe.slots(static_cast<int>(t)).kind() == proto::Slot::ALIAS) t = exe.slots(static_cast<int>(t)).index();
    storage[static_cast<size_t>(s)] = t;
  }
  const int64_t end = exe.kernels_size();
  std::vector<int64_t> last_use(static_cast<size_t>(num_slots), -1);
  for (int64_t k = 0; k < end; ++k) {
    for (int64_t in : exe.kernels(static_cast<int>(k)).inputs())
      last_use[static_cast<size_t>(storage[static_cast<size_t>(in)])] = k;
  }
  for (int64_t out : exe.outputs())
    last_use[static_cast<size_t>(storage[static_cast<size_t>(out)])] = end;  // copied at the end

  std::map<int64_t, int64_t> free_chunks;  // offset -> size
  int64_t arena = 0, naive = 0;
  auto allocate = [&](int64_t bytes) {
    for (auto it = free_chunks.begin(); it != free_chunks.end(); ++it) {
      if (it->second < bytes) continue;
      const int64_t offset = it->first, left = it->second - bytes;
      free_chunks.erase(it);
      if (left > 0) free_chunks[offset + bytes] = left;
      return offset;
    }
    const int64_t offset = arena;
    arena += bytes;
    return offset;
  };
  auto release = [&](int64_t offset, int64_t bytes) {
    auto [it, inserted] = free_chunks.emplace(offset, bytes);
    // Merge with the following and the preceding chunk.
    if (auto next = std::next(it); next != free_chunks.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_chunks.erase(next);
    }
    if (it != free_chunks.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_chunks.erase(it);
      }
    }
  };
  std::vector<std::vector<int64_t>> dies_after(static_cast<size_t>(end) + 1);
  for (int64_t k = 0; k < end; ++k) {
    const proto::Kernel& kernel = exe.kernels(static_cast<int>(k));
    std::vector<int64_t> outs = {kernel.output()};
    outs.insert(outs.end(), kernel.extra_outputs().begin(), kernel.extra_outputs().end());
    for (int64_t out : outs) {
      proto::Slot* slot = exe.mutable_slots(static_cast<int>(out));
      if (slot->kind() != proto::Slot::ARENA) continue;
      int64_t bytes = FromProto(slot->shape()).byte_size();
      bytes = (bytes + 63) / 64 * 64;
      naive += bytes;
      slot->set_offset(allocate(bytes));
      // A value nobody reads dies right after it is written.
      const int64_t dies = std::max(last_use[static_cast<size_t>(out)], k);
      if (dies < end) dies_after[static_cast<size_t>(dies)].push_back(out);
    }
    for (int64_t dead : dies_after[static_cast<size_t>(k)]) {
      const proto::Slot& d = exe.slots(static_cast<int>(dead));
      release(d.offset(), (FromProto(d.shape()).byte_size() + 63) / 64 * 64);
    }
  }
  exe.set_arena_bytes(arena);
  return naive - arena;
}

}  // namespace lazyrt::pjrt
