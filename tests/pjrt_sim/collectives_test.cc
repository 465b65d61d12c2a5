// The collective opcodes end to end: verifier rules, compiled partitioned modules run on several
// simulated devices against references computed on the host, a partitioned matmul against the same
// computation on one device, and the executable's round trip and load checks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "pjrt_sim/communicator.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/module_verifier.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace collectives_test {

using testing::Dims;
using ::testing::HasSubstr;
using testing::HostArray;
using testing::ModuleBuilder;
using testing::Ravel;
using testing::RunPartitions;
using testing::Unravel;

using Groups = std::vector<std::vector<int64_t>>;

std::unique_ptr<Client> MakeClient(int devices) {
  absl::StatusOr<std::unique_ptr<Client>> c =
      Client::Create({.num_devices = devices, .device_memory_bytes = int64_t{1} << 28});
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

void SetGroups(proto::Instruction& inst, const Groups& groups) {
  for (const std::vector<int64_t>& g : groups)
    inst.add_replica_groups()->mutable_partitions()->Assign(g.begin(), g.end());
}

// The per-partition result dims of `op` (written out independently of the compiler's rule).
Dims ResultDims(Opcode op, Dims dims, int64_t axis, int64_t concat, int64_t group) {
  if (op == Opcode::kAllGather) dims[static_cast<size_t>(axis)] *= group;
  if (op == Opcode::kReduceScatter || op == Opcode::kPartitionSlice) dims[static_cast<size_t>(axis)] /= group;
  if (op == Opcode::kAllToAll) {
    dims[static_cast<size_t>(axis)] /= group;
    dims[static_cast<size_t>(concat)] *= group;
  }
  return dims;
}

struct Case {
  std::string name;
  Opcode op;
  int partitions;
  Groups groups;  // empty: one group of all
  PrimitiveType type;
  Dims dims;
  int64_t axis = 0;
  int64_t concat = 0;  // ALL_TO_ALL
  Combiner combiner = Combiner::kSum;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

proto::Module CollectiveModule(const Case& c) {
  ModuleBuilder b(c.name);
  b.mutable_module().set_num_partitions(c.partitions);
  const int64_t group = c.groups.empty() ? c.partitions : static_cast<int64_t>(c.groups[0].size());
  const int64_t x = b.Parameter(0, ToProto(c.type), c.dims);
  const int64_t r =
      b.Op(c.op, {x}, ToProto(c.type), ResultDims(c.op, c.dims, c.axis, c.concat, group), [&](proto::Instruction& i) {
        SetGroups(i, c.groups);
        i.set_combiner(static_cast<int32_t>(c.combiner));
        if (c.op == Opcode::kAllToAll) {
          i.add_dims(c.axis);
          i.add_dims(c.concat);
        } else {
          i.set_axis(c.axis);
        }
      });
  b.Output(r);
  return b.module();
}

// Partition p's operand: small integers, so that every sum is exact in every type (bf16 included)
// and the references need not follow any order; no period along any axis, so that a wrong piece shows.
double Value(int64_t partition, int64_t i) {
  return static_cast<double>((partition * 131 + i * 31 + (i / 3) * 17 + (i * i) % 7) % 9 - 4);
}

HostArray Operand(const Case& c, int64_t partition) {
  HostArray a(ArrayShape{c.type, c.dims});
  for (int64_t i = 0; i < a.numel(); ++i) {
    StoreElement(Value(partition, i), c.type, a.bytes.data() + i * ByteWidth(c.type));
  }
  return a;
}

double Combined(Combiner combiner, double a, double b) {
  switch (combiner) {
    case Combiner::kSum: return a + b;
    case Combiner::kMax: return std::max(a, b);
    case Combiner::kMin: return std::min(a, b);
    case Combiner::kProd: return a * b;
    case Combiner::kAll:
    case Combiner::kAny: break;
  }
  ADD_FAILURE() << "combiner " << combiner << " is not tested";
  return 0;
}

// What partition p should hold, element by element from the members' operands (by coordinates).
std::vector<double> Reference(const Case& c, int64_t p) {
  Groups groups = c.groups;
  if (groups.empty()) {
    groups.emplace_back();
    for (int64_t q = 0; q < std::max(c.partitions, 1); ++q) groups[0].push_back(q);
  }
  std::vector<int64_t> group;
  int64_t rank = 0;
  for (const auto& g : groups) {
    for (size_t r = 0; r < g.size(); ++r) {
      if (g[r] == p) {
        group = g;
        rank = static_cast<int64_t>(r);
      }
    }
  }
  const int64_t size = static_cast<int64_t>(group.size());
  const Dims out_dims = ResultDims(c.op, c.dims, c.axis, c.concat, size);
  const size_t axis = static_cast<size_t>(c.axis);
  std::vector<double> out(static_cast<size_t>(testing::NumElements(out_dims)));
  for (int64_t o = 0; o < static_cast<int64_t>(out.size()); ++o) {
    Dims at = Unravel(o, out_dims);
    double v = 0;
    switch (c.op) {
      case Opcode::kAllReduce:
      case Opcode::kReduceScatter: {
        if (c.op == Opcode::kReduceScatter) at[axis] += rank * out_dims[axis];
        v = Value(group[0], Ravel(at, c.dims));
        for (size_t r = 1; r < group.size(); ++r) v = Combined(c.combiner, v, Value(group[r], Ravel(at, c.dims)));
        break;
      }
      case Opcode::kAllGather: {
        const int64_t member = at[axis] / c.dims[axis];
        at[axis] %= c.dims[axis];
        v = Value(group[static_cast<size_t>(member)], Ravel(at, c.dims));
        break;
      }
      case Opcode::kPartitionSlice:
        at[axis] += rank * out_dims[axis];
        v = Value(p, Ravel(at, c.dims));
        break;
      case Opcode::kAllToAll: {
        // Piece j along the concat dim came from member j: its piece `rank` along the split dim.
        Dims piece = c.dims;
        piece[axis] /= size;
        const size_t concat = static_cast<size_t>(c.concat);
        const int64_t member = at[concat] / piece[concat];
        at[concat] %= piece[concat];
        at[axis] += rank * piece[axis];
        v = Value(group[static_cast<size_t>(member)], Ravel(at, c.dims));
        break;
      }
      default: ADD_FAILURE() << "not a collective";
    }
    out[static_cast<size_t>(o)] = v;
  }
  return out;
}

class CollectiveTest : public ::testing::TestWithParam<Case> {};

TEST_P(CollectiveTest, MatchesHostReference) {
  const Case& c = GetParam();
  const int partitions = std::max(c.partitions, 1);
  std::unique_ptr<Client> client = MakeClient(partitions);
  absl::StatusOr<std::shared_ptr<Executable>> exe =
      client->Compile(CollectiveModule(c), CompileOptions{.fusion = true, .autotune = false});
  ASSERT_TRUE(exe.ok()) << exe.status();
  std::vector<std::vector<HostArray>> args;
  for (int p = 0; p < partitions; ++p) args.push_back({Operand(c, p)});
  absl::StatusOr<std::vector<std::vector<HostArray>>> results = RunPartitions(*client, **exe, args);
  ASSERT_TRUE(results.ok()) << results.status();
  for (int p = 0; p < partitions; ++p) {
    const HostArray& got = (*results)[static_cast<size_t>(p)][0];
    const std::vector<double> want = Reference(c, p);
    ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << "partition " << p;
    for (int64_t i = 0; i < got.numel(); ++i) {
      ASSERT_EQ(LoadElement(got.bytes.data(), c.type, i), want[static_cast<size_t>(i)])
          << "partition " << p << " element " << i;
    }
  }
}

constexpr PrimitiveType kF32 = PrimitiveType::kF32;
constexpr PrimitiveType kF64 = PrimitiveType::kF64;
constexpr PrimitiveType kS32 = PrimitiveType::kS32;
constexpr PrimitiveType kBF16 = PrimitiveType::kBF16;

INSTANTIATE_TEST_SUITE_P(
    Collectives, CollectiveTest,
    ::testing::Values(
        Case{"all_reduce_1", Opcode::kAllReduce, 0, {}, kF32, {3, 5}},
        Case{"all_reduce_2", Opcode::kAllReduce, 2, {}, kF32, {7}},
        Case{"all_reduce_4_f64", Opcode::kAllReduce, 4, {}, kF64, {3, 5}},
        Case{"all_reduce_8_fewer_elements_than_members", Opcode::kAllReduce, 8, {}, kF32, {3}},
        Case{"all_reduce_8_bf16", Opcode::kAllReduce, 8, {}, kBF16, {2, 3, 5}},
        Case{"all_reduce_max_s32", Opcode::kAllReduce, 4, {}, kS32, {9}, 0, 0, Combiner::kMax},
        Case{"all_reduce_min_2x2", Opcode::kAllReduce, 4, {{0, 1}, {2, 3}}, kF32, {4, 3}, 0, 0, Combiner::kMin},
        Case{"all_reduce_prod_strided", Opcode::kAllReduce, 4, {{0, 2}, {3, 1}}, kS32, {5}, 0, 0, Combiner::kProd},
        Case{"all_reduce_groups_of_one", Opcode::kAllReduce, 4, {{0}, {1}, {2}, {3}}, kF32, {3}},
        Case{"all_gather_2_axis0", Opcode::kAllGather, 2, {}, kF32, {3, 5}, 0},
        Case{"all_gather_4_axis1", Opcode::kAllGather, 4, {}, kS32, {3, 5}, 1},
        Case{"all_gather_8_axis2_bf16", Opcode::kAllGather, 8, {}, kBF16, {2, 3, 1}, 2},
        Case{"all_gather_2x2", Opcode::kAllGather, 4, {{3, 0}, {1, 2}}, kF64, {2, 3}, 1},
        Case{"reduce_scatter_2_axis0", Opcode::kReduceScatter, 2, {}, kF32, {6, 5}, 0},
        Case{"reduce_scatter_4_axis1_s32", Opcode::kReduceScatter, 4, {}, kS32, {3, 8, 5}, 1, 0, Combiner::kMax},
        Case{"reduce_scatter_8_bf16", Opcode::kReduceScatter, 8, {}, kBF16, {3, 8}, 1},
        Case{"reduce_scatter_2x2_f64", Opcode::kReduceScatter, 4, {{0, 1}, {2, 3}}, kF64, {4, 3}, 0},
        Case{"all_to_all_2", Opcode::kAllToAll, 2, {}, kF32, {4, 3}, 0, 1},
        Case{"all_to_all_4_inner", Opcode::kAllToAll, 4, {}, kS32, {3, 8, 5}, 1, 2},
        Case{"all_to_all_4_same_dim", Opcode::kAllToAll, 4, {}, kF64, {8, 3}, 0, 0},
        Case{"all_to_all_8_bf16", Opcode::kAllToAll, 8, {}, kBF16, {2, 8}, 1, 0},
        Case{"all_to_all_2x2", Opcode::kAllToAll, 4, {{1, 3}, {0, 2}}, kF32, {3, 4}, 1, 0},
        Case{"partition_slice_2", Opcode::kPartitionSlice, 2, {}, kF32, {6, 5}, 0},
        Case{"partition_slice_4_axis1", Opcode::kPartitionSlice, 4, {}, kBF16, {3, 8}, 1},
        Case{"partition_slice_2x2", Opcode::kPartitionSlice, 4, {{2, 3}, {0, 1}}, kS32, {3, 4, 2}, 1}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Floating sums depend on their order: every member combines in member order, so all partitions of a
// group hold the same bits, those of the sum in member order.
TEST(AllReduceTest, EveryMemberHoldsTheSameBitsInMemberOrder) {
  constexpr int kPartitions = 8;
  std::unique_ptr<Client> client = MakeClient(kPartitions);
  Case c{"sum", Opcode::kAllReduce, kPartitions, {}, kF32, {1000}};
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(CollectiveModule(c), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  std::mt19937_64 rng(7);
  std::vector<std::vector<HostArray>> args;
  for (int p = 0; p < kPartitions; ++p) {
    args.push_back({testing::MakeArray<float>(kF32, {1000}, testing::RandomFloats(rng, 1000, -1e3f, 1e3f))});
  }
  absl::StatusOr<std::vector<std::vector<HostArray>>> results = RunPartitions(*client, **exe, args);
  ASSERT_TRUE(results.ok()) << results.status();
  for (int64_t i = 0; i < 1000; ++i) {
    float sum = args[0][0].at<float>(i);
    for (int p = 1; p < kPartitions; ++p) sum += args[static_cast<size_t>(p)][0].at<float>(i);
    for (int p = 0; p < kPartitions; ++p) {
      ASSERT_EQ((*results)[static_cast<size_t>(p)][0].at<float>(i), sum) << "partition " << p << " element " << i;
    }
  }
}

// Data parallelism by hand: each of 4 partitions takes its quarter of the batch (PARTITION_SLICE of
// the replicated inputs), computes its part of the weight gradient x^T dy and the parts are summed by
// ALL_REDUCE. The single-device module computes x^T dy over the whole batch in one GEMM.
TEST(PartitionedModuleTest, DataParallelWeightGradientMatchesOneDevice) {
  constexpr int kPartitions = 4;
  constexpr int64_t kBatch = 64, kIn = 24, kOut = 10;
  std::unique_ptr<Client> client = MakeClient(kPartitions);
  std::mt19937_64 rng(11);
  const HostArray x = testing::MakeArray<float>(kF32, {kBatch, kIn}, testing::RandomFloats(rng, kBatch * kIn));
  const HostArray dy = testing::MakeArray<float>(kF32, {kBatch, kOut}, testing::RandomFloats(rng, kBatch * kOut));

  ModuleBuilder single("grad");
  single.Output(single.Dot(single.Parameter(0, proto::F32, {kBatch, kIn}),
                           single.Parameter(1, proto::F32, {kBatch, kOut}), /*transpose_lhs=*/true));
  absl::StatusOr<std::vector<HostArray>> whole = testing::CompileAndRun(*client, single.module(), {}, {x, dy});
  ASSERT_TRUE(whole.ok()) << whole.status();

  ModuleBuilder b("grad_dp");
  b.mutable_module().set_num_partitions(kPartitions);
  const int64_t xs = b.Op(Opcode::kPartitionSlice, {b.Parameter(0, proto::F32, {kBatch, kIn})}, proto::F32,
                          {kBatch / kPartitions, kIn}, [](proto::Instruction& i) { i.set_axis(0); });
  const int64_t dys = b.Op(Opcode::kPartitionSlice, {b.Parameter(1, proto::F32, {kBatch, kOut})}, proto::F32,
                           {kBatch / kPartitions, kOut}, [](proto::Instruction& i) { i.set_axis(0); });
  const int64_t partial = b.Dot(xs, dys, /*transpose_lhs=*/true);
  b.Output(b.Op(Opcode::kAllReduce, {partial}, proto::F32, {kIn, kOut}));
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(b.module(), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ((*exe)->num_partitions(), kPartitions);
  absl::StatusOr<std::vector<std::vector<HostArray>>> parts =
      RunPartitions(*client, **exe, std::vector<std::vector<HostArray>>(kPartitions, {x, dy}));
  ASSERT_TRUE(parts.ok()) << parts.status();

  // The two differ only in how the batch's 64 products are associated. Each order's error is at most
  // (B-1) u sum|x dy| (u = 2^-24, the f32 unit roundoff), so they differ by at most 2 (B-1) u sum|x dy|.
  const float* want = (*whole)[0].data<float>();
  for (int64_t i = 0; i < kIn; ++i) {
    for (int64_t j = 0; j < kOut; ++j) {
      double exact = 0, magnitude = 0;
      for (int64_t n = 0; n < kBatch; ++n) {
        const double term = double{x.at<float>(n * kIn + i)} * dy.at<float>(n * kOut + j);
        exact += term;
        magnitude += std::fabs(term);
      }
      const double bound = 2.0 * (kBatch - 1) * 0x1p-24 * magnitude;
      for (int p = 0; p < kPartitions; ++p) {
        const float got = (*parts)[static_cast<size_t>(p)][0].at<float>(i * kOut + j);
        EXPECT_NEAR(got, want[i * kOut + j], bound) << "partition " << p << " at " << i << "," << j;
        EXPECT_NEAR(got, exact, bound / 2) << "partition " << p << " at " << i << "," << j;
        EXPECT_EQ(got, (*parts)[0][0].at<float>(i * kOut + j)) << "partitions disagree at " << i << "," << j;
      }
    }
  }
}

TEST(PartitionedModuleTest, SerializedRoundTripRunsTheSameAndLoadChecksGroups) {
  std::unique_ptr<Client> client = MakeClient(4);
  const Case c{"gather", Opcode::kAllGather, 4, {{0, 1}, {2, 3}}, kF32, {3, 2}, 1};
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(CollectiveModule(c), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::shared_ptr<Executable>> loaded = client->LoadSerializedExecutable((*exe)->Serialize());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->num_partitions(), 4);
  std::vector<std::vector<HostArray>> args;
  for (int p = 0; p < 4; ++p) args.push_back({Operand(c, p)});
  absl::StatusOr<std::vector<std::vector<HostArray>>> a = RunPartitions(*client, **exe, args);
  absl::StatusOr<std::vector<std::vector<HostArray>>> b = RunPartitions(*client, **loaded, args);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  for (size_t p = 0; p < 4; ++p) EXPECT_EQ((*a)[p][0].bytes, (*b)[p][0].bytes) << "partition " << p;

  int collective = -1;
  for (int k = 0; k < (*exe)->proto().kernels_size(); ++k) {
    if ((*exe)->proto().kernels(k).kind() == proto::Kernel::COLLECTIVE) collective = k;
  }
  ASSERT_GE(collective, 0);
  auto load_with = [&](const std::function<void(proto::Executable&)>& damage) {
    proto::Executable e = (*exe)->proto();
    damage(e);
    return Executable::Load(std::move(e)).status();
  };
  auto groups = [&](proto::Executable& e) { return e.mutable_kernels(collective)->mutable_replica_groups(); };
  EXPECT_THAT(load_with([&](proto::Executable& e) { groups(e)->Mutable(1)->set_partitions(0, 4); }).message(),
              HasSubstr("member 4 is not a partition in [0, 4)"));
  EXPECT_THAT(load_with([&](proto::Executable& e) { groups(e)->Mutable(1)->set_partitions(0, -1); }).message(),
              HasSubstr("member -1 is not a partition"));
  EXPECT_THAT(load_with([&](proto::Executable& e) { groups(e)->Mutable(1)->set_partitions(0, 1); }).message(),
              HasSubstr("more than one replica group"));
  EXPECT_THAT(
      load_with([&](proto::Executable& e) { groups(e)->Mutable(1)->mutable_partitions()->RemoveLast(); }).message(),
      HasSubstr("of one size"));
  EXPECT_THAT(load_with([&](proto::Executable& e) { e.set_num_partitions(2); }).message(),
              HasSubstr("not a partition in [0, 2)"));
  EXPECT_THAT(load_with([&](proto::Executable& e) { e.set_num_partitions(int64_t{1} << 40); }).message(),
              HasSubstr("num_partitions"));
  // Groups of 2 gather 2 operands: groups of 4 would not give the slot's shape.
  EXPECT_THAT(load_with([&](proto::Executable& e) { groups(e)->Clear(); }).message(), HasSubstr("dims"));
}

TEST(PartitionedModuleTest, ExecuteChecksDevicesAndPartitions) {
  std::unique_ptr<Client> client = MakeClient(2);
  const Case c{"reduce", Opcode::kAllReduce, 2, {}, kF32, {3}};
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(CollectiveModule(c), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::shared_ptr<Buffer>> a =
      client->BufferFromHost(Operand(c, 0).bytes.data(), {kF32, {3}}, client->device(0));
  ASSERT_TRUE(a.ok());
  const std::vector<std::shared_ptr<Buffer>> one = {*a};
  EXPECT_THAT(std::string((*exe)->Execute(one, client->device(0)).status().message()),
              HasSubstr("runs as 2 partitions: use ExecutePartitioned"));
  std::vector<Device*> same = {client->device(0), client->device(0)};
  std::vector<std::vector<std::shared_ptr<Buffer>>> args = {{*a}, {*a}};
  EXPECT_THAT(std::string((*exe)->ExecutePartitioned(args, same).status().message()),
              HasSubstr("each partition needs a device of its own"));
  std::vector<Device*> both = {client->device(0), client->device(1)};
  EXPECT_THAT(std::string((*exe)->ExecutePartitioned(args, both).status().message()),
              HasSubstr("partition 1: argument 0 lives on SIM:0, not SIM:1"));
}

proto::Module OneCollective(Opcode op, int partitions, const Groups& groups, proto::ElementType type, const Dims& in,
                            const Dims& out, const std::function<void(proto::Instruction&)>& attrs = {}) {
  ModuleBuilder b;
  b.mutable_module().set_num_partitions(partitions);
  b.Output(b.Op(op, {b.Parameter(0, type, in)}, type, out, [&](proto::Instruction& i) {
    SetGroups(i, groups);
    if (attrs) attrs(i);
  }));
  return b.module();
}

std::string VerifyError(const proto::Module& m) { return std::string(VerifyModule(m).message()); }

TEST(CollectiveVerifierTest, ChecksGroupsShapesAndCombiners) {
  EXPECT_TRUE(VerifyModule(OneCollective(Opcode::kAllReduce, 4, {{0, 1}, {2, 3}}, proto::F32, {3}, {3})).ok());
  EXPECT_THAT(VerifyError(OneCollective(Opcode::kAllReduce, 4, {{0, 1}, {2, 4}}, proto::F32, {3}, {3})),
              HasSubstr("member 4 is not a partition in [0, 4)"));
  EXPECT_THAT(VerifyError(OneCollective(Opcode::kAllReduce, 4, {{0, 1}, {1, 3}}, proto::F32, {3}, {3})),
              HasSubstr("partition 1 is in more than one replica group"));
  EXPECT_THAT(VerifyError(OneCollective(Opcode::kAllReduce, 4, {{0, 1, 2}, {3}}, proto::F32, {3}, {3})),
              HasSubstr("of one size"));
  EXPECT_THAT(VerifyError(OneCollective(Opcode::kAllReduce, 4, {{0, 1}}, proto::F32, {3}, {3})),
              HasSubstr("partition 2 is in no replica group"));
  EXPECT_THAT(VerifyError(OneCollective(Opcode::kAllReduce, 2, {}, proto::F32, {3}, {4})), HasSubstr("should be"));
  EXPECT_THAT(VerifyError(OneCollective(Opcode::kAllReduce, 2, {}, proto::PRED, {3}, {3})), HasSubstr("numeric"));
  EXPECT_THAT(VerifyError(OneCollective(Opcode::kAllReduce, 2, {}, proto::F32, {3}, {3},
                                        [](proto::Instruction& i) { i.set_combiner(99); })),
              HasSubstr("invalid combiner 99"));
  EXPECT_TRUE(
      VerifyModule(OneCollective(Opcode::kAllGather, 4, {}, proto::F32, {3, 2}, {3, 8}, [](proto::Instruction& i) {
        i.set_axis(1);
      })).ok());
  EXPECT_THAT(VerifyError(OneCollective(Opcode::kAllGather, 4, {}, proto::F32, {3, 2}, {12, 2},
                                        [](proto::Instruction& i) { i.set_axis(1); })),
              HasSubstr("should be f32[3,8]"));
  EXPECT_THAT(VerifyError(OneCollective(Opcode::kAllGather, 4, {}, proto::F32, {3, 2}, {3, 8},
                                        [](proto::Instruction& i) { i.set_axis(2); })),
              HasSubstr("axis 2 is out of range for rank 2"));
  EXPECT_THAT(VerifyError(OneCollective(Opcode::kReduceScatter, 4, {}, proto::F32, {6}, {1})),
              HasSubstr("does not split into 4 equal pieces"));
  EXPECT_THAT(VerifyError(OneCollective(Opcode::kPartitionSlice, 4, {}, proto::F32, {6}, {1})),
              HasSubstr("does not split into 4 equal pieces"));
  EXPECT_THAT(VerifyError(OneCollective(Opcode::kAllToAll, 2, {}, proto::F32, {4, 3}, {2, 6})),
              HasSubstr("dims must be [split dimension, concat dimension]"));
  EXPECT_TRUE(
      VerifyModule(OneCollective(Opcode::kAllToAll, 2, {}, proto::F32, {4, 3}, {2, 6}, [](proto::Instruction& i) {
        i.add_dims(0);
        i.add_dims(1);
      })).ok());
  proto::Module bad = OneCollective(Opcode::kAllReduce, 2, {}, proto::F32, {3}, {3});
  bad.set_num_partitions(-1);
  EXPECT_THAT(VerifyError(bad), HasSubstr("num_partitions -1"));
}

// Two collectives that differ only in their groups are two values: CSE must keep both.
TEST(CollectiveCompilerTest, CommonSubexpressionsKeepDifferentGroupsApart) {
  ModuleBuilder b;
  b.mutable_module().set_num_partitions(4);
  const int64_t x = b.Parameter(0, proto::F32, {2});
  b.Output(b.Op(Opcode::kAllReduce, {x}, proto::F32, {2}, [](proto::Instruction& i) {
    SetGroups(i, {{0, 1}, {2, 3}});
  }));
  b.Output(b.Op(Opcode::kAllReduce, {x}, proto::F32, {2}, [](proto::Instruction& i) {
    SetGroups(i, {{0, 2}, {1, 3}});
  }));
  b.Output(b.Op(Opcode::kAllReduce, {x}, proto::F32, {2}, [](proto::Instruction& i) {
    SetGroups(i, {{0, 2}, {1, 3}});
  }));
  std::unique_ptr<Client> client = MakeClient(4);
  absl::StatusOr<std::shared_ptr<Executable>> exe = client->Compile(b.module(), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  int collectives = 0;
  for (const proto::Kernel& k : (*exe)->proto().kernels()) collectives += k.kind() == proto::Kernel::COLLECTIVE;
  EXPECT_EQ(collectives, 2);
  std::vector<std::vector<HostArray>> args;
  for (int p = 0; p < 4; ++p) args.push_back({testing::MakeArray<float>(kF32, {2}, {float(p), float(10 * p)})});
  absl::StatusOr<std::vector<std::vector<HostArray>>> r = RunPartitions(*client, **exe, args);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[3][0].values<float>(), (std::vector<float>{5, 50}));  // 2 + 3
  EXPECT_EQ((*r)[3][1].values<float>(), (std::vector<float>{4, 40}));  // 1 + 3
  EXPECT_EQ((*r)[3][2].values<float>(), (std::vector<float>{4, 40}));
}

}  // namespace collectives_test
}  // namespace lazyrt::pjrt
