// Helpers of the SPMD partitioner's tests: modules over a mesh, and the partitioned program run two ways (each
// partition's instructions interpreted one by one with reference collectives, and compiled as one executable
// on the mesh's devices), its outputs assembled and compared with the global program's.
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "pjrt_sim/module_verifier.h"
#include "pjrt_sim/spmd_partitioner.h"
#include "tests/pjrt_sim/compiler_test_util.h"

namespace lazyrt::pjrt::spmd_test {

using ::testing::Pointwise;
using testing::Ravel;
using testing::Unravel;

using Axes = std::vector<int64_t>;
constexpr int64_t kWhole = -1;

inline void SetMesh(ModuleBuilder& b, const Dims& shape) {
  proto::Mesh* mesh = b.mutable_module().mutable_mesh();
  int64_t n = 1;
  for (int64_t s : shape) {
    mesh->add_shape(s);
    n *= s;
  }
  for (int64_t p = 0; p < n; ++p) mesh->add_device_ids(p);
}
inline void Annotate(ModuleBuilder& b, int64_t id, const Axes& axes) {
  for (int64_t a : axes) b.inst(id).mutable_sharding()->add_dim_axes(a);
}
inline int64_t ShardedParameter(ModuleBuilder& b, int64_t number, const Dims& dims, const Axes& axes,
                                proto::ElementType type = proto::F32) {
  const int64_t id = b.Parameter(number, type, dims);
  Annotate(b, id, axes);
  return id;
}

// Causal ATTENTION of q [B..., L, E], k [B..., S, E], v [B..., S, Ev] (result [B..., L, Ev + 1], f32 for bf16
// operands), with dropout when given the s64[] seed.
inline int64_t Attention(ModuleBuilder& b, int64_t q, int64_t k, int64_t v, double dropout = 0, int64_t seed = -1) {
  Dims dims = b.dims(q);
  dims.back() = b.dims(v).back() + 1;
  std::vector<int64_t> operands = {q, k, v};
  if (seed >= 0) operands.push_back(seed);
  const proto::ElementType type = b.type(q) == proto::BF16 ? proto::F32 : b.type(q);
  return b.Op(Opcode::kAttention, operands, type, dims, [&](proto::Instruction& i) {
    i.set_value(0.5);
    i.set_causal(true);
    i.set_dropout(dropout);
  });
}
// Its gradients [B..., L E + S E + S Ev] from the forward result and d(output) [B..., L, Ev].
inline int64_t AttentionGrad(ModuleBuilder& b, int64_t q, int64_t k, int64_t v, int64_t out, int64_t d_out) {
  const Dims qd = b.dims(q), kd = b.dims(k), vd = b.dims(v);
  Dims dims(qd.begin(), qd.end() - 2);
  const size_t r = qd.size();
  dims.push_back(qd[r - 2] * qd[r - 1] + kd[r - 2] * kd[r - 1] + vd[r - 2] * vd[r - 1]);
  return b.Op(Opcode::kAttentionGrad, {q, k, v, out, d_out}, b.type(q), dims, [&](proto::Instruction& i) {
    i.set_value(0.5);
    i.set_causal(true);
  });
}

inline SpmdPartitioned Partitioned(const proto::Module& module) {
  EXPECT_TRUE(VerifyModule(module).ok()) << VerifyModule(module);
  absl::StatusOr<SpmdPartitioned> r = PartitionSpmd(module);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return SpmdPartitioned{};
  EXPECT_TRUE(VerifyModule(r->module).ok()) << VerifyModule(r->module);
  return *std::move(r);
}

inline std::map<Opcode, int> Opcodes(const proto::Module& m) {
  std::map<Opcode, int> counts;
  for (const proto::Instruction& inst : m.instructions()) ++counts[static_cast<Opcode>(inst.opcode())];
  return counts;
}
inline int Count(const proto::Module& m, Opcode op) { return Opcodes(m)[op]; }
inline const proto::Instruction& Only(const proto::Module& m, Opcode op) {
  EXPECT_EQ(Count(m, op), 1) << OpcodeName(op);
  for (const proto::Instruction& inst : m.instructions()) {
    if (inst.opcode() == static_cast<int32_t>(op)) return inst;
  }
  return m.instructions(0);
}
inline Dims DimsOf(const proto::Instruction& inst) { return {inst.shape().dims().begin(), inst.shape().dims().end()}; }
inline std::vector<std::vector<int64_t>> Groups(const proto::Instruction& inst) {
  std::vector<std::vector<int64_t>> groups;
  for (const proto::ReplicaGroup& g : inst.replica_groups())
    groups.emplace_back(g.partitions().begin(), g.partitions().end());
  return groups;
}
inline Axes AxesOf(const proto::Sharding& s, size_t rank) {
  if (s.dim_axes().empty()) return Axes(rank, kWhole);
  return {s.dim_axes().begin(), s.dim_axes().end()};
}

// ---- Running a partitioned program ------------------------------------------------------------------------

inline Dims MeshCoordinates(int64_t p, const Dims& mesh) { return Unravel(p, mesh); }

// Partition p's piece of `global` laid out as `axes` over `mesh`.
inline HostArray Shard(const HostArray& global, const Axes& axes, const Dims& mesh, int64_t p) {
  const Dims coords = MeshCoordinates(p, mesh);
  Dims local = global.shape.dims;
  for (size_t d = 0; d < axes.size(); ++d) {
    if (axes[d] != kWhole) local[d] /= mesh[static_cast<size_t>(axes[d])];
  }
  HostArray out(ArrayShape{global.shape.type, local});
  const size_t width = static_cast<size_t>(ByteWidth(global.shape.type));
  for (int64_t i = 0; i < out.numel(); ++i) {
    Dims c = Unravel(i, local);
    for (size_t d = 0; d < axes.size(); ++d) {
      if (axes[d] != kWhole) c[d] += coords[static_cast<size_t>(axes[d])] * local[d];
    }
    std::memcpy(out.bytes.data() + static_cast<size_t>(i) * width,
                global.bytes.data() + static_cast<size_t>(Ravel(c, global.shape.dims)) * width, width);
  }
  return out;
}

// `pieces` (in order) laid end to end along `axis`.
inline HostArray Concatenate(const std::vector<HostArray>& pieces, int64_t axis) {
  Dims dims = pieces[0].shape.dims;
  const int64_t piece = dims[static_cast<size_t>(axis)];
  dims[static_cast<size_t>(axis)] *= static_cast<int64_t>(pieces.size());
  HostArray out(ArrayShape{pieces[0].shape.type, dims});
  const size_t width = static_cast<size_t>(ByteWidth(out.shape.type));
  for (int64_t i = 0; i < out.numel(); ++i) {
    Dims c = Unravel(i, dims);
    const size_t which = static_cast<size_t>(c[static_cast<size_t>(axis)] / piece);
    c[static_cast<size_t>(axis)] %= piece;
    std::memcpy(out.bytes.data() + static_cast<size_t>(i) * width,
                pieces[which].bytes.data() + static_cast<size_t>(Ravel(c, pieces[which].shape.dims)) * width, width);
  }
  return out;
}

// Piece `k` of `n` of `x` along `axis`.
inline HostArray Piece(const HostArray& x, int64_t axis, int64_t k, int64_t n) {
  Axes axes(x.shape.dims.size(), kWhole);
  axes[static_cast<size_t>(axis)] = 0;
  return Shard(x, axes, {n}, k);
}

inline HostArray Combine(const std::vector<HostArray>& xs, Combiner combiner) {
  HostArray out = xs[0];
  for (size_t j = 1; j < xs.size(); ++j) {
    for (int64_t i = 0; i < out.numel(); ++i) {
      const float a = out.at<float>(i), b = xs[j].at<float>(i);
      out.data<float>()[i] = combiner == Combiner::kSum   ? a + b
                             : combiner == Combiner::kMax ? std::max(a, b)
                                                          : std::min(a, b);
    }
  }
  return out;
}

class SpmdRunner {
 public:
  // The global program on the global arguments.
  std::vector<HostArray> RunGlobal(const proto::Module& module, const std::vector<HostArray>& args) {
    proto::Module global = module;  // without mesh and shardings: the compiler would partition it
    global.clear_mesh();
    for (proto::Instruction& inst : *global.mutable_instructions()) inst.clear_sharding();
    absl::StatusOr<std::vector<HostArray>> r = testing::CompileAndRun(*client_, global, kUnfused, args);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<HostArray>{};
  }

  // Instruction by instruction: each partition's local instructions on the real kernels, the collectives
  // by the reference loops above. The outputs of each partition.
  std::vector<std::vector<HostArray>> Interpret(const SpmdPartitioned& spmd, const std::vector<HostArray>& args) {
    const proto::Module& m = spmd.module;
    const int64_t n = m.num_partitions();
    std::vector<std::vector<HostArray>> values(static_cast<size_t>(n),
                                               std::vector<HostArray>(static_cast<size_t>(m.instructions_size())));
    for (int64_t id = 0; id < m.instructions_size(); ++id) {
      const proto::Instruction& inst = m.instructions(static_cast<int>(id));
      const Opcode op = static_cast<Opcode>(inst.opcode());
      for (int64_t p = 0; p < n; ++p) {
        HostArray& v = values[static_cast<size_t>(p)][static_cast<size_t>(id)];
        if (op == Opcode::kParameter) {
          v = ShardOfArgument(spmd, args, inst.parameter_number(), p);
        } else if (ClassOf(op) == OpClass::kCollective) {
          v = RunCollective(inst, values, p);
        } else {
          std::vector<HostArray> operands;
          for (int64_t o : inst.operands()) operands.push_back(values[static_cast<size_t>(p)][static_cast<size_t>(o)]);
          v = RunLocal(inst, operands);
        }
        EXPECT_EQ(v.shape.dims, DimsOf(inst)) << "%" << id << " " << OpcodeName(op);
      }
    }
    std::vector<std::vector<HostArray>> outputs(static_cast<size_t>(n));
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t o : m.outputs())
        outputs[static_cast<size_t>(p)].push_back(values[static_cast<size_t>(p)][static_cast<size_t>(o)]);
    }
    return outputs;
  }

  // The whole partitioned module compiled (fused) and run as one executable on N devices, meeting at the
  // collectives through the Communicator. The outputs of each partition.
  std::vector<std::vector<HostArray>> RunOnDevices(const SpmdPartitioned& spmd, const std::vector<HostArray>& args) {
    const int64_t n = spmd.module.num_partitions();
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Create({.num_devices = static_cast<int>(n), .device_memory_bytes = int64_t{1} << 28});
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return {};
    absl::StatusOr<std::shared_ptr<Executable>> exe = (*client)->Compile(spmd.module, kFused);
    EXPECT_TRUE(exe.ok()) << exe.status();
    if (!exe.ok()) return {};
    std::vector<std::vector<std::shared_ptr<Buffer>>> buffers(static_cast<size_t>(n));
    std::vector<Device*> devices;
    for (int64_t p = 0; p < n; ++p) {
      devices.push_back((*client)->device(static_cast<int>(p)));
      for (size_t i = 0; i < args.size(); ++i) {
        const HostArray shard = ShardOfArgument(spmd, args, static_cast<int64_t>(i), p);
        absl::StatusOr<std::shared_ptr<Buffer>> b =
            (*client)->BufferFromHost(shard.bytes.data(), shard.shape, devices.back());
        EXPECT_TRUE(b.ok()) << b.status();
        if (!b.ok()) return {};
        buffers[static_cast<size_t>(p)].push_back(*b);
      }
    }
    absl::StatusOr<std::vector<std::vector<std::shared_ptr<Buffer>>>> results =
        (*exe)->ExecutePartitioned(buffers, devices);
    EXPECT_TRUE(results.ok()) << results.status();
    if (!results.ok()) return {};
    std::vector<std::vector<HostArray>> outputs(static_cast<size_t>(n));
    for (int64_t p = 0; p < n; ++p) {
      for (const std::shared_ptr<Buffer>& r : (*results)[static_cast<size_t>(p)]) {
        HostArray h(r->shape());
        EXPECT_TRUE(r->ToHost(h.bytes.data(), h.bytes.size()).ok());
        outputs[static_cast<size_t>(p)].push_back(std::move(h));
      }
    }
    return outputs;
  }

  // Each output assembled from the partitions' shards as its sharding says, every partition's shard checked
  // against the assembled value (replicas agree).
  static std::vector<HostArray> Assembled(const SpmdPartitioned& spmd,
                                          const std::vector<std::vector<HostArray>>& per_partition) {
    const Dims mesh(spmd.module.mesh().shape().begin(), spmd.module.mesh().shape().end());
    std::vector<HostArray> outputs;
    if (per_partition.empty()) return outputs;
    for (size_t j = 0; j < per_partition[0].size(); ++j) {
      std::vector<HostArray> shards;
      for (const std::vector<HostArray>& partition : per_partition) shards.push_back(partition[j]);
      const Axes axes = AxesOf(spmd.output_shardings[j], shards[0].shape.dims.size());
      outputs.push_back(Assemble(shards, axes, mesh));
      for (size_t p = 0; p < shards.size(); ++p) {
        EXPECT_EQ(Shard(outputs.back(), axes, mesh, static_cast<int64_t>(p)).bytes, shards[p].bytes)
            << "output " << j << " on partition " << p << " disagrees with the other partitions";
      }
    }
    return outputs;
  }

 private:
  HostArray RunCollective(const proto::Instruction& inst, const std::vector<std::vector<HostArray>>& values,
                          int64_t p) {
    const size_t operand = static_cast<size_t>(inst.operands(0));
    for (const std::vector<int64_t>& group : Groups(inst)) {
      const auto at = std::find(group.begin(), group.end(), p);
      if (at == group.end()) continue;
      const int64_t position = at - group.begin();
      std::vector<HostArray> members;
      for (int64_t q : group) members.push_back(values[static_cast<size_t>(q)][operand]);
      const auto size = static_cast<int64_t>(group.size());
      switch (static_cast<Opcode>(inst.opcode())) {
        case Opcode::kAllReduce: return Combine(members, static_cast<Combiner>(inst.combiner()));
        case Opcode::kAllGather: return Concatenate(members, inst.axis());
        case Opcode::kReduceScatter:
          return Piece(Combine(members, static_cast<Combiner>(inst.combiner())), inst.axis(), position, size);
        case Opcode::kAllToAll: {  // piece `position` along the split dim of every member, concatenated
          std::vector<HostArray> received;
          for (const HostArray& m : members) received.push_back(Piece(m, inst.dims(0), position, size));
          return Concatenate(received, inst.dims(1));
        }
        case Opcode::kPartitionSlice: return Piece(members[static_cast<size_t>(position)], inst.axis(), position, size);
        default: ADD_FAILURE() << "no reference for " << OpcodeName(static_cast<Opcode>(inst.opcode()));
      }
    }
    ADD_FAILURE() << "partition " << p << " is in no group of " << OpcodeName(static_cast<Opcode>(inst.opcode()));
    return {};
  }

  // One instruction as a module of its own, compiled once per distinct instruction.
  HostArray RunLocal(const proto::Instruction& inst, const std::vector<HostArray>& operands) {
    proto::Module single;
    single.set_name("local");
    for (size_t i = 0; i < operands.size(); ++i) {
      proto::Instruction* param = single.add_instructions();
      param->set_opcode(static_cast<int32_t>(Opcode::kParameter));
      param->set_parameter_number(static_cast<int64_t>(i));
      *param->mutable_shape() = ToProto(operands[i].shape);
    }
    proto::Instruction* local = single.add_instructions();
    *local = inst;
    local->clear_operands();
    for (size_t i = 0; i < operands.size(); ++i) local->add_operands(static_cast<int64_t>(i));
    single.add_outputs(single.instructions_size() - 1);
    std::string key;
    EXPECT_TRUE(single.SerializeToString(&key));
    auto it = compiled_.find(key);
    if (it == compiled_.end()) {
      absl::StatusOr<std::shared_ptr<Executable>> exe = client_->Compile(single, kUnfused);
      EXPECT_TRUE(exe.ok()) << exe.status();
      if (!exe.ok()) return {};
      it = compiled_.emplace(key, *exe).first;
    }
    absl::StatusOr<std::vector<HostArray>> r = testing::ExecuteOnHost(*client_, *it->second, operands);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)[0] : HostArray{};
  }

  static HostArray ShardOfArgument(const SpmdPartitioned& spmd, const std::vector<HostArray>& args, int64_t number,
                                   int64_t p) {
    const Dims mesh(spmd.module.mesh().shape().begin(), spmd.module.mesh().shape().end());
    const HostArray& arg = args[static_cast<size_t>(number)];
    return Shard(arg, AxesOf(spmd.parameter_shardings[static_cast<size_t>(number)], arg.shape.dims.size()), mesh, p);
  }

  static HostArray Assemble(const std::vector<HostArray>& shards, const Axes& axes, const Dims& mesh) {
    const HostArray& first = shards[0];
    Dims global = first.shape.dims;
    for (size_t d = 0; d < axes.size(); ++d) {
      if (axes[d] != kWhole) global[d] *= mesh[static_cast<size_t>(axes[d])];
    }
    HostArray out(ArrayShape{first.shape.type, global});
    const size_t width = static_cast<size_t>(ByteWidth(out.shape.type));
    for (int64_t i = 0; i < out.numel(); ++i) {
      Dims c = Unravel(i, global);
      Dims coords(mesh.size(), 0);  // replicated axes: partition coordinate 0 (the others are checked equal)
      for (size_t d = 0; d < axes.size(); ++d) {
        if (axes[d] == kWhole) continue;
        coords[static_cast<size_t>(axes[d])] = c[d] / first.shape.dims[d];
        c[d] %= first.shape.dims[d];
      }
      const HostArray& local = shards[static_cast<size_t>(Ravel(coords, mesh))];
      std::memcpy(out.bytes.data() + static_cast<size_t>(i) * width,
                  local.bytes.data() + static_cast<size_t>(Ravel(c, local.shape.dims)) * width, width);
    }
    return out;
  }

  std::unique_ptr<Client> client_ = testing::MakeClient();
  std::map<std::string, std::shared_ptr<Executable>> compiled_;
};

inline HostArray Random(const Dims& dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return F32(dims, testing::RandomFloats(rng, testing::NumElements(dims)));
}
// Random's values rounded to bf16.
inline HostArray RandomBf16(const Dims& dims, uint64_t seed) {
  return testing::Bf16Array(dims, Random(dims, seed).values<float>());
}

// The partitioned program computes what the global one does (to float reassociation), both interpreted and
// run as one executable on the mesh's devices.
inline void ExpectSameNumbers(const proto::Module& module, const std::vector<HostArray>& args) {
  SpmdRunner runner;
  const std::vector<HostArray> expected = runner.RunGlobal(module, args);
  const SpmdPartitioned spmd = Partitioned(module);
  for (const bool on_devices : {false, true}) {
    const std::vector<HostArray> got =
        SpmdRunner::Assembled(spmd, on_devices ? runner.RunOnDevices(spmd, args) : runner.Interpret(spmd, args));
    ASSERT_EQ(got.size(), expected.size()) << (on_devices ? "on devices" : "interpreted");
    for (size_t j = 0; j < got.size(); ++j) {
      ASSERT_EQ(got[j].shape, expected[j].shape) << "output " << j;
      EXPECT_THAT(testing::FloatsOf(got[j]), Pointwise(::testing::FloatNear(1e-4f), testing::FloatsOf(expected[j])))
          << "output " << j << (on_devices ? " on devices" : " interpreted");
    }
  }
}

}  // namespace lazyrt::pjrt::spmd_test
