#include "pjrt_sim/module_verifier.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pjrt_sim/hlo.h"
#include "pjrt_sim/kernels/attention.h"
#include "pjrt_sim/kernels/normalize.h"
#include "pjrt_sim/replica_groups.h"
#include "pjrt_sim/status_macros.h"

namespace lazyrt::pjrt {
namespace {

constexpr int kMaxRank = 16;

std::string ShapeText(const proto::Shape& s) {
  return absl::StrCat(absl::AsciiStrToLower(proto::ElementType_Name(s.type())), "[", absl::StrJoin(s.dims(), ","), "]");
}

bool IsFloat(proto::ElementType t) { return t == proto::F32 || t == proto::F64 || t == proto::BF16 || t == proto::F16; }
absl::string_view TypeClassText(TypeClass types) {
  switch (types) {
    case TypeClass::kAny: return "any type";
    case TypeClass::kNumeric: return "numeric types (arithmetic is not defined on pred)";
    case TypeClass::kFloat: return "floating types";
    case TypeClass::kPred: return "pred";
  }
  return "?";
}

bool IsInt(proto::ElementType t) { return t == proto::S32 || t == proto::S64; }

bool SameDims(const proto::Shape& a, const proto::Shape& b) {
  return std::equal(a.dims().begin(), a.dims().end(), b.dims().begin(), b.dims().end());
}

class Verifier {
 public:
  explicit Verifier(const proto::Module& m) : m_(m) {}

  absl::Status Run() {
    if (m_.num_partitions() < 0 || m_.num_partitions() > kMaxPartitions) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_partitions ", m_.num_partitions(), " is outside [0, ", kMaxPartitions, "]"));
    }
    RETURN_IF_ERROR(CheckMesh());
    std::vector<bool> seen_param;
    for (int64_t id = 0; id < m_.instructions_size(); ++id) {
      RETURN_IF_ERROR(CheckInstruction(id, seen_param));
      RETURN_IF_ERROR(CheckSharding(id));
    }
    for (size_t i = 0; i < seen_param.size(); ++i) {
      if (!seen_param[i]) return absl::InvalidArgumentError(absl::StrCat("parameter ", i, " is missing"));
    }
    for (int64_t out : m_.outputs()) {
      if (out < 0 || out >= m_.instructions_size()) {
        return absl::InvalidArgumentError(absl::StrCat("output refers to %", out, ", which does not exist"));
      }
    }
    return absl::OkStatus();
  }

 private:
  const proto::Shape& ShapeOf(int64_t id) const { return m_.instructions(static_cast<int>(id)).shape(); }

  absl::Status Fail(int64_t id, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "%", id, " ", OpcodeName(static_cast<Opcode>(m_.instructions(static_cast<int>(id)).opcode())), ": ", what));
  }

  // The element types an op's row in the opcode table accepts.
  absl::Status CheckTypeClass(int64_t id, TypeClass types, proto::ElementType type) const {
    if (Accepts(types, FromProto(type))) return absl::OkStatus();
    return Fail(id, absl::StrCat("takes ", TypeClassText(types), ", not ",
                                 absl::AsciiStrToLower(proto::ElementType_Name(type))));
  }

  // A mesh's axes are positive and its devices as many as their product, each once.
  absl::Status CheckMesh() const {
    const proto::Mesh& mesh = m_.mesh();
    if (mesh.shape().empty() && mesh.device_ids().empty()) return absl::OkStatus();
    int64_t partitions = 1;
    for (int64_t size : mesh.shape()) {
      if (size < 1 || size > kMaxPartitions / partitions) {
        return absl::InvalidArgumentError(absl::StrCat("mesh [", absl::StrJoin(mesh.shape(), ","),
                                                       "]: axis sizes must be at least 1, their product at most ",
                                                       kMaxPartitions));
      }
      partitions *= size;
    }
    if (partitions != mesh.device_ids_size()) {
      return absl::InvalidArgumentError(absl::StrCat("mesh [", absl::StrJoin(mesh.shape(), ","), "] has ", partitions,
                                                     " partitions but ", mesh.device_ids_size(), " devices"));
    }
    std::vector<int64_t> devices(mesh.device_ids().begin(), mesh.device_ids().end());
    std::sort(devices.begin(), devices.end());
    if (std::adjacent_find(devices.begin(), devices.end()) != devices.end() || devices.front() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh devices [", absl::StrJoin(mesh.device_ids(), ","), "] must be distinct and non-negative"));
    }
    return absl::OkStatus();
  }

  // A sharding splits each dim over at most one axis of the module's mesh, each axis once, into equal pieces.
  absl::Status CheckSharding(int64_t id) const {
    const proto::Instruction& inst = m_.instructions(static_cast<int>(id));
    if (!inst.has_sharding() || inst.sharding().dim_axes().empty()) return absl::OkStatus();
    const proto::Mesh& mesh = m_.mesh();
    const std::string text = absl::StrCat("sharding {", absl::StrJoin(inst.sharding().dim_axes(), ","), "}");
    if (mesh.shape().empty()) return Fail(id, absl::StrCat(text, " in a module without a mesh"));
    if (inst.sharding().dim_axes_size() != inst.shape().dims_size()) {
      return Fail(id, absl::StrCat(text, " does not have one entry per dim of ", ShapeText(inst.shape())));
    }
    std::vector<bool> used(static_cast<size_t>(mesh.shape_size()), false);
    for (int d = 0; d < inst.shape().dims_size(); ++d) {
      const int64_t axis = inst.sharding().dim_axes(d);
      if (axis == -1) continue;
      if (axis < -1 || axis >= mesh.shape_size()) {
        return Fail(id, absl::StrCat(text, ": axis ", axis, " of dim ", d, " is not in [-1, ", mesh.shape_size(), ")"));
      }
      if (used[static_cast<size_t>(axis)]) return Fail(id, absl::StrCat(text, " uses axis ", axis, " twice"));
      used[static_cast<size_t>(axis)] = true;
      if (inst.shape().dims(d) % mesh.shape(static_cast<int>(axis)) != 0) {
        return Fail(id, absl::StrCat(text, ": dim ", d, " of ", ShapeText(inst.shape()), " does not split into ",
                                     mesh.shape(static_cast<int>(axis)), " equal pieces"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckShape(int64_t id, const proto::Shape& s) const {
    if (!proto::ElementType_IsValid(s.type())) return Fail(id, "invalid element type");
    if (s.dims_size() > kMaxRank) return Fail(id, absl::StrCat("rank ", s.dims_size(), " exceeds ", kMaxRank));
    for (int64_t d : s.dims()) {
      if (d < 0 || d > kMaxElements) return Fail(id, absl::StrCat("bad dimension ", d));
    }
    if (!DimsInRange({s.dims().data(), static_cast<size_t>(s.dims_size())})) return Fail(id, "too many elements");
    return absl::OkStatus();
  }

  absl::Status CheckInstruction(int64_t id, std::vector<bool>& seen_param) {
    const proto::Instruction& inst = m_.instructions(static_cast<int>(id));
    const std::optional<Opcode> opcode = OpcodeFromNumber(inst.opcode());
    if (!opcode.has_value())
      return absl::InvalidArgumentError(absl::StrCat("%", id, ": invalid opcode ", inst.opcode()));
    RETURN_IF_ERROR(CheckShape(id, inst.shape()));
    for (int64_t op : inst.operands()) {
      if (op < 0 || op >= id) return Fail(id, absl::StrCat("operand %", op, " is not an earlier instruction"));
    }
    const proto::Shape& out = inst.shape();
    const int rank = out.dims_size();
    auto want_operands = [&](int n) -> absl::Status {
      if (inst.operands_size() != n) {
        return Fail(id, absl::StrCat("expects ", n, " operand(s), has ", inst.operands_size()));
      }
      return absl::OkStatus();
    };
    auto operand = [&](int i) -> const proto::Shape& { return ShapeOf(inst.operands(i)); };
    const Opcode op = *opcode;

    switch (op) {
      case Opcode::kParameter: {
        RETURN_IF_ERROR(want_operands(0));
        const int64_t p = inst.parameter_number();
        if (p < 0 || p >= m_.instructions_size()) return Fail(id, absl::StrCat("bad parameter number ", p));
        if (static_cast<int64_t>(seen_param.size()) <= p) seen_param.resize(static_cast<size_t>(p) + 1, false);
        if (seen_param[static_cast<size_t>(p)]) return Fail(id, absl::StrCat("parameter ", p, " defined twice"));
        seen_param[static_cast<size_t>(p)] = true;
        return absl::OkStatus();
      }
      case Opcode::kConstant: return want_operands(0);
      case Opcode::kIota: {
        RETURN_IF_ERROR(want_operands(0));
        if (inst.axis() < 0 || inst.axis() >= std::max(rank, 1)) return Fail(id, "axis out of range");
        if (inst.start_size() != 1 || inst.stride_size() != 1) return Fail(id, "needs one start and one step");
        return absl::OkStatus();
      }
      case Opcode::kRngUniform:
      case Opcode::kRngNormal: {
        RETURN_IF_ERROR(want_operands(1));
        if (operand(0).type() != proto::S64 || operand(0).dims_size() != 0) return Fail(id, "the seed must be s64[]");
        if (!IsFloat(out.type())) return Fail(id, "needs a floating result");
        return absl::OkStatus();
      }
#define LAZYRT_X(name, ...) case Opcode::k##name:
        LAZYRT_UNARY_OPCODES(LAZYRT_X)
#undef LAZYRT_X
      case Opcode::kConvert: {
        RETURN_IF_ERROR(want_operands(1));
        if (!SameDims(operand(0), out)) {
          return Fail(id, absl::StrCat("operand ", ShapeText(operand(0)), " and result ", ShapeText(out), " differ"));
        }
        if (op != Opcode::kConvert && operand(0).type() != out.type())
          return Fail(id, "operand and result types differ");
        return CheckTypeClass(id, TypeClassOf(op), out.type());
      }
#define LAZYRT_X(name, ...) case Opcode::k##name:
        LAZYRT_BINARY_OPCODES(LAZYRT_X)
#undef LAZYRT_X
      case Opcode::kCompare: {
        RETURN_IF_ERROR(want_operands(2));
        if (!SameDims(operand(0), out) || !SameDims(operand(1), out) || operand(0).type() != operand(1).type()) {
          return Fail(id, absl::StrCat("operands ", ShapeText(operand(0)), " and ", ShapeText(operand(1)),
                                       " do not match the result ", ShapeText(out)));
        }
        const bool to_pred = op == Opcode::kCompare;
        if ((to_pred ? proto::PRED : operand(0).type()) != out.type()) return Fail(id, "wrong result type");
        if (to_pred) {
          if (!CompareDirectionFromNumber(inst.direction()).has_value())
            return Fail(id, "invalid comparison direction");
          return absl::OkStatus();
        }
        return CheckTypeClass(id, TypeClassOf(op), out.type());
      }
      case Opcode::kSelect: {
        RETURN_IF_ERROR(want_operands(3));
        if (operand(0).type() != proto::PRED) return Fail(id, "the condition must be pred");
        for (int i = 0; i < 3; ++i) {
          if (!SameDims(operand(i), out)) return Fail(id, "operand dims differ from the result");
        }
        if (operand(1).type() != out.type() || operand(2).type() != out.type()) return Fail(id, "value types differ");
        return absl::OkStatus();
      }
      case Opcode::kBroadcast: {
        RETURN_IF_ERROR(want_operands(1));
        const proto::Shape& in = operand(0);
        if (inst.dims_size() != in.dims_size() || in.type() != out.type())
          return Fail(id, "dims must map every operand dimension");
        for (int i = 0; i < inst.dims_size(); ++i) {
          const int64_t d = inst.dims(i);
          if (d < 0 || d >= rank || (i > 0 && d <= inst.dims(i - 1)))
            return Fail(id, "dims must increase within the result rank");
          if (in.dims(i) != out.dims(static_cast<int>(d)) && in.dims(i) != 1) {
            return Fail(id, absl::StrCat("cannot broadcast ", ShapeText(in), " to ", ShapeText(out)));
          }
        }
        return absl::OkStatus();
      }
      case Opcode::kReshape: {
        RETURN_IF_ERROR(want_operands(1));
        int64_t a = 1, b = 1;
        for (int64_t d : operand(0).dims()) a *= d;
        for (int64_t d : out.dims()) b *= d;
        if (a != b || operand(0).type() != out.type()) {
          return Fail(id, absl::StrCat("cannot reshape ", ShapeText(operand(0)), " to ", ShapeText(out)));
        }
        return absl::OkStatus();
      }
      case Opcode::kTranspose: {
        RETURN_IF_ERROR(want_operands(1));
        const proto::Shape& in = operand(0);
        if (inst.dims_size() != rank || in.dims_size() != rank || in.type() != out.type())
          return Fail(id, "bad permutation");
        std::vector<bool> used(static_cast<size_t>(rank), false);
        for (int i = 0; i < rank; ++i) {
          const int64_t p = inst.dims(i);
          if (p < 0 || p >= rank || used[static_cast<size_t>(p)] || in.dims(static_cast<int>(p)) != out.dims(i)) {
            return Fail(id, "bad permutation");
          }
          used[static_cast<size_t>(p)] = true;
        }
        return absl::OkStatus();
      }
      case Opcode::kSlice: {
        RETURN_IF_ERROR(want_operands(1));
        const proto::Shape& in = operand(0);
        if (in.dims_size() != rank || inst.start_size() != rank || inst.limit_size() != rank ||
            inst.stride_size() != rank || in.type() != out.type()) {
          return Fail(id, "needs a start, limit and stride per dimension");
        }
        for (int i = 0; i < rank; ++i) {
          const int64_t s = inst.start(i), l = inst.limit(i), st = inst.stride(i);
          // ceil((l - s) / st), written so that a huge stride cannot overflow.
          if (st < 1 || s < 0 || l < s || l > in.dims(i) || (l == s ? 0 : (l - s - 1) / st + 1) != out.dims(i)) {
            return Fail(id, absl::StrCat("slice of dimension ", i, " is out of range"));
          }
        }
        return absl::OkStatus();
      }
      case Opcode::kConcatenate: {
        if (inst.operands_size() < 1) return Fail(id, "needs operands");
        if (inst.axis() < 0 || inst.axis() >= rank) return Fail(id, "axis out of range");
        int64_t total = 0;
        for (int i = 0; i < inst.operands_size(); ++i) {
          const proto::Shape& in = operand(i);
          if (in.dims_size() != rank || in.type() != out.type()) return Fail(id, "operand rank or type differs");
          for (int d = 0; d < rank; ++d) {
            if (d != inst.axis() && in.dims(d) != out.dims(d)) return Fail(id, "operand dims differ");
          }
          total += in.dims(static_cast<int>(inst.axis()));
        }
        if (total != out.dims(static_cast<int>(inst.axis()))) return Fail(id, "sizes along the axis do not add up");
        return absl::OkStatus();
      }
      case Opcode::kIndexSelect:
      case Opcode::kGather: {
        RETURN_IF_ERROR(want_operands(2));
        const proto::Shape& in = operand(0);
        const proto::Shape& index = operand(1);
        if (in.dims_size() != rank || in.type() != out.type() || !IsInt(index.type())) return Fail(id, "bad operands");
        if (inst.axis() < 0 || inst.axis() >= rank) return Fail(id, "axis out of range");
        RETURN_IF_ERROR(CheckSite(id, inst));
        if (op == Opcode::kIndexSelect) {
          if (index.dims_size() != 1) return Fail(id, "the index must be 1-D");
          for (int d = 0; d < rank; ++d) {
            const int64_t want = d == inst.axis() ? index.dims(0) : in.dims(d);
            if (out.dims(d) != want) return Fail(id, "result dims are wrong");
          }
        } else {
          if (!SameDims(index, out)) return Fail(id, "the index must have the result's dims");
          for (int d = 0; d < rank; ++d) {
            if (d != inst.axis() && out.dims(d) > in.dims(d)) return Fail(id, "index larger than the operand");
          }
        }
        return absl::OkStatus();
      }
      case Opcode::kReduce:
      case Opcode::kArgmax: {
        RETURN_IF_ERROR(want_operands(1));
        const proto::Shape& in = operand(0);
        std::vector<int64_t> dims(inst.dims().begin(), inst.dims().end());
        if (op == Opcode::kArgmax) {
          if (inst.axis() < 0 || inst.axis() >= in.dims_size()) return Fail(id, "axis out of range");
          if (in.dims(static_cast<int>(inst.axis())) == 0) return Fail(id, "argmax over an empty dimension");
          if (out.type() != proto::S64) return Fail(id, "result must be s64");
          dims = {inst.axis()};
        } else if (in.type() != out.type()) {
          return Fail(id, "operand and result types differ");
        } else {
          const std::optional<Combiner> combiner = CombinerFromNumber(inst.combiner());
          if (!combiner.has_value()) return Fail(id, absl::StrCat("invalid combiner ", inst.combiner()));
          if (!Accepts(TypeClassOf(*combiner), FromProto(in.type()))) {
            return Fail(id, absl::StrCat("a ", CombinerName(*combiner), " takes ",
                                         TypeClassText(TypeClassOf(*combiner)), ", not ", ShapeText(in)));
          }
        }
        for (size_t i = 0; i < dims.size(); ++i) {
          if (dims[i] < 0 || dims[i] >= in.dims_size() || (i > 0 && dims[i] <= dims[i - 1])) {
            return Fail(id, "reduced dims must be sorted and in range");
          }
        }
        std::vector<int64_t> kept;
        for (int d = 0; d < in.dims_size(); ++d) {
          if (std::find(dims.begin(), dims.end(), d) == dims.end()) kept.push_back(in.dims(d));
        }
        if (!std::equal(kept.begin(), kept.end(), out.dims().begin(), out.dims().end())) {
          return Fail(id, absl::StrCat("result ", ShapeText(out), " does not match reducing ", ShapeText(in)));
        }
        return absl::OkStatus();
      }
      case Opcode::kScatterAdd:
      case Opcode::kIndexAdd: {
        RETURN_IF_ERROR(want_operands(3));
        const proto::Shape& in = operand(0);
        const proto::Shape& index = operand(1);
        const proto::Shape& src = operand(2);
        if (!(in.type() == out.type() && SameDims(in, out)) || src.type() != out.type() || !IsInt(index.type()) ||
            out.type() == proto::PRED) {
          return Fail(id, "needs x of the result's shape, src of its type (not pred) and an integer index");
        }
        if (inst.axis() < 0 || inst.axis() >= rank) return Fail(id, "axis out of range");
        RETURN_IF_ERROR(CheckSite(id, inst));
        if (src.dims_size() != rank) return Fail(id, "src must have the result's rank");
        if (op == Opcode::kScatterAdd) {
          if (!SameDims(index, src)) return Fail(id, "the index must have src's dims");
          for (int d = 0; d < rank; ++d) {
            if (d != inst.axis() && index.dims(d) > out.dims(d)) return Fail(id, "index larger than the operand");
          }
        } else {
          if (index.dims_size() != 1) return Fail(id, "the index must be 1-D");
          for (int d = 0; d < rank; ++d) {
            const int64_t want = d == inst.axis() ? index.dims(0) : out.dims(d);
            if (src.dims(d) != want) return Fail(id, "src dims are wrong");
          }
        }
        return absl::OkStatus();
      }
      case Opcode::kLayerNorm:
      case Opcode::kRmsNorm:
      case Opcode::kLayerNormGrad:
      case Opcode::kRmsNormGrad: {
        std::vector<ArrayShape> operands;
        for (int i = 0; i < inst.operands_size(); ++i) operands.push_back(FromProto(operand(i)));
        const absl::Status s = CheckNormalize(op, operands, FromProto(out), inst.axis(), inst.value());
        return s.ok() ? s : Fail(id, std::string(s.message()));
      }
      case Opcode::kCumsum:
      case Opcode::kArgsort: {
        RETURN_IF_ERROR(want_operands(1));
        const proto::Shape& in = operand(0);
        if (!SameDims(in, out))
          return Fail(id, absl::StrCat("result ", ShapeText(out), " must have the dims of ", ShapeText(in)));
        if (inst.axis() < 0 || inst.axis() >= rank)
          return Fail(id, absl::StrCat("axis ", inst.axis(), " is out of range for rank ", rank));
        if (op == Opcode::kArgsort) {
          if (out.type() != proto::S64) return Fail(id, "result must be s64");
          const std::optional<CompareDirection> direction = CompareDirectionFromNumber(inst.direction());
          if (direction != CompareDirection::kLt && direction != CompareDirection::kGt) {
            return Fail(id,
                        absl::StrCat("direction ", inst.direction(), " is neither lt (ascending) nor gt (descending)"));
          }
          return absl::OkStatus();
        }
        if (in.type() != out.type()) return Fail(id, "operand and result types differ");
        return CheckTypeClass(id, TypeClass::kNumeric, in.type());
      }
      case Opcode::kDot: {
        RETURN_IF_ERROR(want_operands(2));
        const proto::Shape& a = operand(0);
        const proto::Shape& b = operand(1);
        if (a.dims_size() < 2 || b.dims_size() < 2 || rank < 2 || a.type() != b.type() || a.type() != out.type() ||
            !IsFloat(a.type())) {
          return Fail(id, "needs floating operands of rank >= 2 and the same type");
        }
        const int ra = a.dims_size(), rb = b.dims_size();
        const int64_t m = a.dims(ra - (inst.transpose_lhs() ? 1 : 2));
        const int64_t ka = a.dims(ra - (inst.transpose_lhs() ? 2 : 1));
        const int64_t kb = b.dims(rb - (inst.transpose_rhs() ? 1 : 2));
        const int64_t n = b.dims(rb - (inst.transpose_rhs() ? 2 : 1));
        if (ka != kb || out.dims(rank - 2) != m || out.dims(rank - 1) != n) {
          return Fail(id, absl::StrCat("contraction of ", ShapeText(a), " and ", ShapeText(b), " does not give ",
                                       ShapeText(out)));
        }
        // Each operand either has the result's batch dims or none (it is then shared by every batch).
        for (const proto::Shape* s : {&a, &b}) {
          if (s->dims_size() == 2) continue;
          if (s->dims_size() != rank || !std::equal(s->dims().begin(), s->dims().end() - 2, out.dims().begin())) {
            return Fail(id, "batch dims must equal the result's");
          }
        }
        return absl::OkStatus();
      }
      case Opcode::kAttention:
      case Opcode::kAttentionGrad: {
        std::vector<ArrayShape> operands;
        for (int i = 0; i < inst.operands_size(); ++i) operands.push_back(FromProto(operand(i)));
        const AttentionParams params{inst.value(), inst.causal(), inst.dropout(), inst.stream()};
        absl::StatusOr<AttentionLayout> layout =
            CheckAttention(operands, FromProto(out), op == Opcode::kAttentionGrad, params);
        if (!layout.ok()) return Fail(id, std::string(layout.status().message()));
        return absl::OkStatus();
      }
        LAZYRT_COLLECTIVE_OPCODES(LAZYRT_CASE_OF_OPCODE) return CheckCollective(id, op, inst);
    }
    return Fail(id, "unsupported opcode");  // unreachable: the switch covers every opcode
  }

  // Shapes are per partition: a group of G members gathers G operands, scatters G pieces.
  absl::Status CheckCollective(int64_t id, Opcode op, const proto::Instruction& inst) const {
    if (inst.operands_size() != 1) return Fail(id, absl::StrCat("expects 1 operand, has ", inst.operands_size()));
    absl::StatusOr<ReplicaGroups> groups = CheckReplicaGroups(inst.replica_groups(), m_.num_partitions());
    if (!groups.ok()) return Fail(id, std::string(groups.status().message()));
    const int64_t size = static_cast<int64_t>((*groups)[0].size());
    const proto::Shape& in = ShapeOf(inst.operands(0));
    const proto::Shape& out = inst.shape();
    const int rank = in.dims_size();
    if (in.type() != out.type() || out.dims_size() != rank) {
      return Fail(
          id, absl::StrCat("operand ", ShapeText(in), " and result ", ShapeText(out), " must have one type and rank"));
    }
    if (op == Opcode::kAllReduce || op == Opcode::kReduceScatter) {
      const std::optional<Combiner> combiner = CombinerFromNumber(inst.combiner());
      if (!combiner.has_value()) return Fail(id, absl::StrCat("invalid combiner ", inst.combiner()));
      RETURN_IF_ERROR(CheckTypeClass(id, TypeClassOf(*combiner), in.type()));
    }
    if (op == Opcode::kAllToAll && inst.dims_size() != 2)
      return Fail(id, "dims must be [split dimension, concat dimension]");
    const bool all_to_all = op == Opcode::kAllToAll;
    absl::StatusOr<std::vector<int64_t>> dims =
        CollectiveResultDims(op, std::span<const int64_t>(in.dims().data(), static_cast<size_t>(rank)),
                             all_to_all ? inst.dims(0) : inst.axis(), all_to_all ? inst.dims(1) : 0, size);
    if (!dims.ok()) return Fail(id, absl::StrCat(dims.status().message(), " (operand ", ShapeText(in), ")"));
    const std::vector<int64_t>& want = *dims;
    if (!std::equal(want.begin(), want.end(), out.dims().begin(), out.dims().end())) {
      proto::Shape expected = out;
      expected.mutable_dims()->Assign(want.begin(), want.end());
      return Fail(id, absl::StrCat("result ", ShapeText(out), " should be ", ShapeText(expected), " for ",
                                   ShapeText(in), " over groups of ", size));
    }
    return absl::OkStatus();
  }

  // An index-checking op's site: 0 (none) or a number no larger than the module.
  absl::Status CheckSite(int64_t id, const proto::Instruction& inst) const {
    if (inst.site() < 0 || inst.site() > m_.instructions_size())
      return Fail(id, absl::StrCat("bad site ", inst.site()));
    return absl::OkStatus();
  }

  const proto::Module& m_;
};

}  // namespace

bool DimsInRange(std::span<const int64_t> dims) {
  int64_t product = 1;
  for (int64_t d : dims) {
    if (d < 0 || d > kMaxElements || product > kMaxElements / std::max<int64_t>(d, 1)) return false;
    product *= std::max<int64_t>(d, 1);
  }
  return true;
}

absl::Status VerifyModule(const proto::Module& module) { return Verifier(module).Run(); }

}  // namespace lazyrt::pjrt
