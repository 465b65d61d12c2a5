// Helpers shared by the pjrt_sim tests: a small Module builder that tracks shapes, host arrays of any
// element type, and one-call compile + execute + read back.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pjrt_sim/client.h"
#include "pjrt_sim/communicator.h"
#include "pjrt_sim/compiler.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/hlo.h"
#include "pjrt_sim/module.pb.h"
#include "pjrt_sim/status_macros.h"

namespace lazyrt::pjrt::testing {

using Dims = std::vector<int64_t>;

inline int64_t NumElements(const Dims& dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

inline Dims RowMajorStrides(const Dims& dims) {
  Dims s(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) s[d - 1] = s[d] * dims[d];
  return s;
}

// Coordinates of linear index `i` in `dims`.
inline Dims Unravel(int64_t i, const Dims& dims) {
  Dims c(dims.size(), 0);
  for (size_t d = dims.size(); d-- > 0;) {
    c[d] = i % dims[d];
    i /= dims[d];
  }
  return c;
}

inline int64_t Ravel(const Dims& coords, const Dims& dims) {
  int64_t i = 0;
  for (size_t d = 0; d < dims.size(); ++d) i = i * dims[d] + coords[d];
  return i;
}

inline std::string DimsText(const Dims& dims) { return absl::StrCat("[", absl::StrJoin(dims, ","), "]"); }

// Builds a Module instruction by instruction; every helper returns the new instruction's id.
class ModuleBuilder {
 public:
  explicit ModuleBuilder(std::string name = "test") { module_.set_name(std::move(name)); }

  // The general form: any opcode, operands, result shape; `attrs` sets the rest.
  int64_t Op(Opcode opcode, std::vector<int64_t> operands, proto::ElementType type, const Dims& dims,
             const std::function<void(proto::Instruction&)>& attrs = {}) {
    proto::Instruction* inst = module_.add_instructions();
    inst->set_opcode(static_cast<int32_t>(opcode));
    for (int64_t o : operands) inst->add_operands(o);
    inst->mutable_shape()->set_type(type);
    for (int64_t d : dims) inst->mutable_shape()->add_dims(d);
    if (attrs) attrs(*inst);
    return module_.instructions_size() - 1;
  }

  int64_t Parameter(int64_t number, proto::ElementType type, const Dims& dims) {
    return Op(Opcode::kParameter, {}, type, dims, [&](proto::Instruction& i) { i.set_parameter_number(number); });
  }
  int64_t Constant(double value, proto::ElementType type, const Dims& dims = {}) {
    return Op(Opcode::kConstant, {}, type, dims, [&](proto::Instruction& i) { i.set_value(value); });
  }
  int64_t Iota(proto::ElementType type, const Dims& dims, int64_t axis, int64_t start = 0, int64_t step = 1) {
    return Op(Opcode::kIota, {}, type, dims, [&](proto::Instruction& i) {
      i.set_axis(axis);
      i.add_start(start);
      i.add_stride(step);
    });
  }
  int64_t Rng(Opcode opcode, int64_t seed, proto::ElementType type, const Dims& dims, int64_t stream) {
    return Op(opcode, {seed}, type, dims, [&](proto::Instruction& i) { i.set_stream(stream); });
  }
  // Elementwise with the first operand's shape.
  int64_t Unary(Opcode opcode, int64_t x) { return Op(opcode, {x}, type(x), dims(x)); }
  int64_t Binary(Opcode opcode, int64_t a, int64_t b) { return Op(opcode, {a, b}, type(a), dims(a)); }
  int64_t Add(int64_t a, int64_t b) { return Binary(Opcode::kAdd, a, b); }
  int64_t Mul(int64_t a, int64_t b) { return Binary(Opcode::kMultiply, a, b); }
  int64_t Convert(int64_t x, proto::ElementType to) { return Op(Opcode::kConvert, {x}, to, dims(x)); }
  int64_t Compare(CompareDirection dir, int64_t a, int64_t b) {
    return Op(Opcode::kCompare, {a, b}, proto::PRED, dims(a),
              [&](proto::Instruction& i) { i.set_direction(static_cast<int32_t>(dir)); });
  }
  int64_t Select(int64_t pred, int64_t on_true, int64_t on_false) {
    return Op(Opcode::kSelect, {pred, on_true, on_false}, type(on_true), dims(on_true));
  }
  // `map[i]`: the result dimension operand dimension i maps to.
  int64_t Broadcast(int64_t x, const Dims& out_dims, const Dims& map) {
    return Op(Opcode::kBroadcast, {x}, type(x), out_dims, [&](proto::Instruction& i) {
      for (int64_t d : map) i.add_dims(d);
    });
  }
  int64_t Reshape(int64_t x, const Dims& out_dims) { return Op(Opcode::kReshape, {x}, type(x), out_dims); }
  int64_t Transpose(int64_t x, const Dims& perm) {
    Dims out;
    for (int64_t p : perm) out.push_back(dims(x)[static_cast<size_t>(p)]);
    return Op(Opcode::kTranspose, {x}, type(x), out, [&](proto::Instruction& i) {
      for (int64_t p : perm) i.add_dims(p);
    });
  }
  int64_t Slice(int64_t x, const Dims& start, const Dims& limit, const Dims& stride) {
    Dims out;
    for (size_t d = 0; d < start.size(); ++d)
      out.push_back(limit[d] == start[d] ? 0 : (limit[d] - start[d] - 1) / stride[d] + 1);
    return Op(Opcode::kSlice, {x}, type(x), out, [&](proto::Instruction& i) {
      for (size_t d = 0; d < start.size(); ++d) {
        i.add_start(start[d]);
        i.add_limit(limit[d]);
        i.add_stride(stride[d]);
      }
    });
  }
  int64_t Concatenate(const std::vector<int64_t>& xs, int64_t axis) {
    Dims out = dims(xs[0]);
    out[static_cast<size_t>(axis)] = 0;
    for (int64_t x : xs) out[static_cast<size_t>(axis)] += dims(x)[static_cast<size_t>(axis)];
    return Op(Opcode::kConcatenate, xs, type(xs[0]), out, [&](proto::Instruction& i) { i.set_axis(axis); });
  }
  int64_t IndexSelect(int64_t x, int64_t index, int64_t axis) {
    Dims out = dims(x);
    out[static_cast<size_t>(axis)] = dims(index)[0];
    return Op(Opcode::kIndexSelect, {x, index}, type(x), out, [&](proto::Instruction& i) { i.set_axis(axis); });
  }
  int64_t Gather(int64_t x, int64_t index, int64_t axis) {
    return Op(Opcode::kGather, {x, index}, type(x), dims(index), [&](proto::Instruction& i) { i.set_axis(axis); });
  }
  int64_t Reduce(Combiner combiner, int64_t x, const Dims& reduce_dims) {
    Dims out;
    for (size_t d = 0; d < dims(x).size(); ++d) {
      if (std::find(reduce_dims.begin(), reduce_dims.end(), static_cast<int64_t>(d)) == reduce_dims.end()) {
        out.push_back(dims(x)[d]);
      }
    }
    return Op(Opcode::kReduce, {x}, type(x), out, [&](proto::Instruction& i) {
      i.set_combiner(static_cast<int32_t>(combiner));
      for (int64_t d : reduce_dims) i.add_dims(d);
    });
  }
  int64_t Argmax(int64_t x, int64_t axis) {
    Dims out = dims(x);
    out.erase(out.begin() + axis);
    return Op(Opcode::kArgmax, {x}, proto::S64, out, [&](proto::Instruction& i) { i.set_axis(axis); });
  }
  int64_t Dot(int64_t a, int64_t b, bool transpose_lhs = false, bool transpose_rhs = false) {
    const Dims& da = dims(a);
    const Dims& db = dims(b);
    const size_t ra = da.size(), rb = db.size();
    const int64_t m = da[transpose_lhs ? ra - 1 : ra - 2];
    const int64_t n = db[transpose_rhs ? rb - 2 : rb - 1];
    Dims out(ra > rb ? da.begin() : db.begin(), ra > rb ? da.end() - 2 : db.end() - 2);
    out.push_back(m);
    out.push_back(n);
    return Op(Opcode::kDot, {a, b}, type(a), out, [&](proto::Instruction& i) {
      i.set_transpose_lhs(transpose_lhs);
      i.set_transpose_rhs(transpose_rhs);
    });
  }

  void Output(int64_t id) { module_.add_outputs(id); }

  proto::ElementType type(int64_t id) const { return module_.instructions(static_cast<int>(id)).shape().type(); }
  Dims dims(int64_t id) const {
    const auto& d = module_.instructions(static_cast<int>(id)).shape().dims();
    return Dims(d.begin(), d.end());
  }
  proto::Instruction& inst(int64_t id) { return *module_.mutable_instructions(static_cast<int>(id)); }
  const proto::Module& module() const { return module_; }
  proto::Module& mutable_module() { return module_; }

 private:
  proto::Module module_;
};

// An array on the host: its shape and raw bytes.
struct HostArray {
  ArrayShape shape;
  std::vector<uint8_t> bytes;

  HostArray() = default;
  explicit HostArray(ArrayShape s) : shape(std::move(s)), bytes(static_cast<size_t>(shape.byte_size())) {}

  int64_t numel() const { return shape.numel(); }
  template <typename T>
  T* data() {
    return reinterpret_cast<T*>(bytes.data());
  }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
  template <typename T>
  T at(int64_t i) const {
    T v;
    std::memcpy(&v, bytes.data() + static_cast<size_t>(i) * sizeof(T), sizeof(T));
    return v;
  }
  template <typename T>
  std::vector<T> values() const {
    return std::vector<T>(data<T>(), data<T>() + numel());
  }
};

template <typename T>
HostArray MakeArray(PrimitiveType type, const Dims& dims, const std::vector<T>& values) {
  HostArray a(ArrayShape{type, dims});
  EXPECT_EQ(static_cast<int64_t>(values.size()), a.numel());
  EXPECT_EQ(static_cast<int64_t>(sizeof(T)), ByteWidth(type));
  if (!values.empty()) std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
  return a;
}

// `values` rounded to a bf16 array, as a kernel stores them.
inline HostArray Bf16Array(const Dims& dims, const std::vector<float>& values) {
  std::vector<uint16_t> bits;
  for (float x : values) bits.push_back(FloatToBf16(x));
  return MakeArray(PrimitiveType::kBF16, dims, bits);
}

// An f32 or bf16 array's values as floats (bf16 widened, exactly).
inline std::vector<float> FloatsOf(const HostArray& a) {
  if (a.shape.type != PrimitiveType::kBF16) return a.values<float>();
  std::vector<float> out;
  for (uint16_t x : a.values<uint16_t>()) out.push_back(Bf16ToFloat(x));
  return out;
}

// Uploads `args`, runs `exe` on device 0 and reads every result back.
inline absl::StatusOr<std::vector<HostArray>> ExecuteOnHost(Client& client, const Executable& exe,
                                                            const std::vector<HostArray>& args) {
  Device* device = client.device(0);
  std::vector<std::shared_ptr<Buffer>> buffers;
  for (const HostArray& a : args) {
    ASSIGN_OR_RETURN(std::shared_ptr<Buffer> b, client.BufferFromHost(a.bytes.data(), a.shape, device));
    buffers.push_back(std::move(b));
  }
  ASSIGN_OR_RETURN(std::vector<std::shared_ptr<Buffer>> results, exe.Execute(buffers, device));
  std::vector<HostArray> out;
  for (const auto& r : results) {
    HostArray h(r->shape());
    RETURN_IF_ERROR(r->ToHost(h.bytes.data(), h.bytes.size()));
    out.push_back(std::move(h));
  }
  return out;
}

// Compiles `module` with `options`, runs it on `args`, returns the results.
inline absl::StatusOr<std::vector<HostArray>> CompileAndRun(Client& client, const proto::Module& module,
                                                            const CompileOptions& options,
                                                            const std::vector<HostArray>& args) {
  ASSIGN_OR_RETURN(std::shared_ptr<Executable> exe, client.Compile(module, options));
  return ExecuteOnHost(client, *exe, args);
}

inline std::unique_ptr<Client> MakeClient(int64_t memory = int64_t{1} << 30) {
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create({.num_devices = 1, .device_memory_bytes = memory});
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// Random uniform reals in [lo, hi).
inline std::vector<float> RandomFloats(std::mt19937_64& rng, int64_t n, float lo = -3.0f, float hi = 3.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Runs `exe` once per partition on devices 0..N-1 and reads every partition's results back.
inline absl::StatusOr<std::vector<std::vector<HostArray>>> RunPartitions(
    Client& client, const Executable& exe, const std::vector<std::vector<HostArray>>& args,
    Communicator* communicator = nullptr) {
  std::vector<std::vector<std::shared_ptr<Buffer>>> buffers(args.size());
  std::vector<Device*> devices;
  for (size_t p = 0; p < args.size(); ++p) {
    devices.push_back(client.device(static_cast<int>(p)));
    for (const HostArray& a : args[p]) {
      ASSIGN_OR_RETURN(std::shared_ptr<Buffer> b, client.BufferFromHost(a.bytes.data(), a.shape, devices.back()));
      buffers[p].push_back(std::move(b));
    }
  }
  ASSIGN_OR_RETURN(auto results, exe.ExecutePartitioned(buffers, devices, communicator));
  std::vector<std::vector<HostArray>> out(results.size());
  for (size_t p = 0; p < results.size(); ++p) {
    for (const auto& r : results[p]) {
      HostArray h(r->shape());
      RETURN_IF_ERROR(r->ToHost(h.bytes.data(), h.bytes.size()));
      out[p].push_back(std::move(h));
    }
  }
  return out;
}

}  // namespace lazyrt::pjrt::testing
