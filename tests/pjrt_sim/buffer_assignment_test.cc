// Buffer assignment: arena slots placed by liveness over the kernel schedule, largest first, reused but
// never overlapping a live value.
#include "pjrt_sim/buffer_assignment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <numeric>
#include <set>

#include "tests/pjrt_sim/compiler_test_util.h"

namespace lazyrt::pjrt {
namespace buffer_assignment_test {

class BufferAssignmentTest : public CompilerTest {};

// Checks that no two arena slots that are live at the same time share bytes. A slot is live from the
// kernel that writes it to the last kernel that reads it (or to the end, when it is a result).
void ExpectNoLiveOverlap(const proto::Executable& exe) {
  const int n = exe.slots_size();
  std::vector<int64_t> storage(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s) {
    int64_t t = s;
    while (exe.slots(static_cast<int>(t)).kind() == proto::Slot::ALIAS) t = exe.slots(static_cast<int>(t)).index();
    storage[static_cast<size_t>(s)] = t;
  }
  const int64_t end = exe.kernels_size();
  std::vector<int64_t> def(static_cast<size_t>(n), -1), last(static_cast<size_t>(n), -1);
  for (int64_t k = 0; k < end; ++k) {
    const proto::Kernel& kernel = exe.kernels(static_cast<int>(k));
    for (int64_t in : kernel.inputs()) last[static_cast<size_t>(storage[static_cast<size_t>(in)])] = k;
    std::vector<int64_t> outs = {kernel.output()};
    outs.insert(outs.end(), kernel.extra_outputs().begin(), kernel.extra_outputs().end());
    for (int64_t out : outs) {
      if (def[static_cast<size_t>(out)] < 0) def[static_cast<size_t>(out)] = k;
    }
  }
  for (int64_t out : exe.outputs()) last[static_cast<size_t>(storage[static_cast<size_t>(out)])] = end;
  for (int a = 0; a < n; ++a) {
    const proto::Slot& sa = exe.slots(a);
    if (sa.kind() != proto::Slot::ARENA || def[static_cast<size_t>(a)] < 0) continue;
    const int64_t a_end = std::max(last[static_cast<size_t>(a)], def[static_cast<size_t>(a)]);
    const int64_t a_bytes = FromProto(sa.shape()).byte_size();
    EXPECT_LE(sa.offset() + a_bytes, exe.arena_bytes());
    for (int c = a + 1; c < n; ++c) {
      const proto::Slot& sc = exe.slots(c);
      if (sc.kind() != proto::Slot::ARENA || def[static_cast<size_t>(c)] < 0) continue;
      const int64_t c_end = std::max(last[static_cast<size_t>(c)], def[static_cast<size_t>(c)]);
      const bool live_together = def[static_cast<size_t>(a)] <= c_end && def[static_cast<size_t>(c)] <= a_end;
      const int64_t c_bytes = FromProto(sc.shape()).byte_size();
      const bool share = sa.offset() < sc.offset() + c_bytes && sc.offset() < sa.offset() + a_bytes;
      EXPECT_FALSE(live_together && share && a_bytes > 0 && c_bytes > 0)
          << "slots " << a << " and " << c << " are live together and overlap";
    }
  }
}

TEST_F(BufferAssignmentTest, ReusesArenaBytes) {
  // A chain of 12 materialized f32[1024] intermediates: at most two are live at a time.
  const int64_t n = 1024, count = 12;
  ModuleBuilder b;
  int64_t v = b.Parameter(0, proto::F32, {n});
  for (int i = 0; i < count; ++i)
    v = b.Unary(i % 2 ? Opcode::kNegate : Opcode::kAbs, b.Add(v, b.Constant(1, proto::F32, {n})));
  b.Output(v);
  const proto::Executable exe = CompileToProto(b.module(), kUnfused);
  int64_t intermediate_bytes = 0;
  for (const proto::Slot& s : exe.slots()) {
    if (s.kind() == proto::Slot::ARENA) intermediate_bytes += FromProto(s.shape()).byte_size();
  }
  EXPECT_GE(intermediate_bytes, (2 * count - 1) * n * 4);
  EXPECT_LT(exe.arena_bytes(), intermediate_bytes);
  EXPECT_LE(exe.arena_bytes(), 3 * n * 4);              // constants, the value and the next one
  EXPECT_GT(PassChanges(exe, "buffer_assignment"), 0);  // bytes saved
  ExpectNoLiveOverlap(exe);
  // And the reused bytes still compute the right thing.
  std::vector<float> in(static_cast<size_t>(n));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7) - 3;
  const std::vector<HostArray> out = Run(b.module(), kUnfused, {F32({n}, in)});
  for (int64_t i = 0; i < n; ++i) {
    float want = in[static_cast<size_t>(i)];
    for (int k = 0; k < count; ++k) want = k % 2 ? -(want + 1) : std::fabs(want + 1);
    ASSERT_EQ(out[0].at<float>(i), want) << i;
  }
}

// Placed as the schedule writes them, a small value that dies at once leaves a hole too small for the
// large one written next, which goes past it; placed largest first, each value takes the lowest bytes
// clear of those live with it, and the hole is where the small one goes.
TEST_F(BufferAssignmentTest, PlacesTheLargestValuesFirst) {
  proto::Executable exe;
  // Slots: x [16] f32 (64 bytes), y [16], z [32], and two results.
  const std::vector<std::pair<proto::Slot::Kind, int64_t>> slots = {{proto::Slot::ARENA, 16},
                                                                    {proto::Slot::ARENA, 16},
                                                                    {proto::Slot::ARENA, 32},
                                                                    {proto::Slot::OUTPUT, 16},
                                                                    {proto::Slot::OUTPUT, 32}};
  for (size_t i = 0; i < slots.size(); ++i) {
    proto::Slot* slot = exe.add_slots();
    slot->set_kind(slots[i].first);
    slot->mutable_shape()->set_type(proto::F32);
    slot->mutable_shape()->add_dims(slots[i].second);
    if (slots[i].first == proto::Slot::OUTPUT) slot->set_index(exe.outputs_size());
    if (slots[i].first == proto::Slot::OUTPUT) exe.add_outputs(static_cast<int64_t>(i));
  }
  // x written first and read last but one; y written and never read; z written, then read last.
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> kernels = {{{}, 0}, {{}, 1}, {{}, 2}, {{0}, 3}, {{2}, 4}};
  for (const auto& [inputs, output] : kernels) {
    proto::Kernel* k = exe.add_kernels();
    for (int64_t in : inputs) k->add_inputs(in);
    k->set_output(output);
  }
  AssignBuffers(exe);
  EXPECT_EQ(exe.arena_bytes(), 3 * 64);  // z, then x beside it, y where z is not yet (first fit: 4 * 64)
  EXPECT_EQ(exe.slots(2).offset(), 0);
  EXPECT_EQ(exe.slots(0).offset(), 128);
  EXPECT_EQ(exe.slots(1).offset(), 0);
  ExpectNoLiveOverlap(exe);
}

TEST_F(BufferAssignmentTest, PrefersTheBytesReadLatest) {
  // a and b live together, then die (a read by kernel 2, b by kernel 3); v, written by kernel 4, fits where
  // either was: it takes b's bytes, read last (likelier cached), and the arena stays two values long.
  proto::Executable exe;
  const std::vector<proto::Slot::Kind> slots = {proto::Slot::ARENA,  proto::Slot::ARENA, proto::Slot::OUTPUT,
                                                proto::Slot::OUTPUT, proto::Slot::ARENA, proto::Slot::OUTPUT};
  for (size_t i = 0; i < slots.size(); ++i) {
    proto::Slot* slot = exe.add_slots();
    slot->set_kind(slots[i]);
    slot->mutable_shape()->set_type(proto::F32);
    slot->mutable_shape()->add_dims(16);
    if (slots[i] == proto::Slot::OUTPUT) slot->set_index(exe.outputs_size());
    if (slots[i] == proto::Slot::OUTPUT) exe.add_outputs(static_cast<int64_t>(i));
  }
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> kernels = {{{}, 0},  {{}, 1}, {{0}, 2},
                                                                         {{1}, 3}, {{}, 4}, {{4}, 5}};
  for (const auto& [inputs, output] : kernels) {
    proto::Kernel* k = exe.add_kernels();
    for (int64_t in : inputs) k->add_inputs(in);
    k->set_output(output);
  }
  AssignBuffers(exe);
  EXPECT_EQ(exe.arena_bytes(), 2 * 64);
  EXPECT_EQ(exe.slots(0).offset(), 0);
  EXPECT_EQ(exe.slots(1).offset(), 64);
  EXPECT_EQ(exe.slots(4).offset(), 64);  // first fit: 0, a's bytes, read before b's
  ExpectNoLiveOverlap(exe);
}

TEST_F(BufferAssignmentTest, NeverOverlapsLiveValues) {
  // Random graphs where values stay live for different spans.
  std::mt19937_64 rng(99);
  for (int it = 0; it < 60; ++it) {
    ModuleBuilder b;
    const int64_t len = 1 + static_cast<int64_t>(rng() % 300);
    std::vector<int64_t> pool = {b.Parameter(0, proto::F32, {len})};
    for (int i = 0; i < 25; ++i) {
      const int64_t x = pool[rng() % pool.size()], y = pool[rng() % pool.size()];
      switch (rng() % 4) {
        case 0: pool.push_back(b.Add(x, y)); break;
        case 1: pool.push_back(b.Unary(Opcode::kTanh, x)); break;
        case 2: pool.push_back(b.Broadcast(b.Reduce(Combiner::kSum, x, {0}), {len}, {})); break;
        default: pool.push_back(b.Convert(b.Convert(x, proto::F64), proto::F32)); break;
      }
    }
    b.Output(pool.back());
    b.Output(pool[rng() % pool.size()]);
    for (const CompileOptions& o : {kUnfused, kFused}) {
      const proto::Executable exe = CompileToProto(b.module(), o);
      ExpectNoLiveOverlap(exe);
      if (HasFailure()) {
        ADD_FAILURE() << b.module().DebugString() << KernelSummary(exe);
        return;
      }
    }
  }
}

}  // namespace buffer_assignment_test
}  // namespace lazyrt::pjrt
