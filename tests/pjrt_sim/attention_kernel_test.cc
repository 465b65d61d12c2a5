// The ATTENTION and ATTENTION_GRAD kernels against a naive reference loop in f64 (every score of a row
// materialized), through verifier, compiler, serialization and loader; and the verifier's and loader's
// refusals of malformed attention instructions and kernels.
#include "pjrt_sim/kernels/attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/module_verifier.h"
#include "tests/pjrt_sim/pjrt_test_util.h"

namespace lazyrt::pjrt {
namespace attention_kernel_test {

using testing::Dims;
using testing::FloatsOf;
using ::testing::HasSubstr;
using testing::HostArray;
using testing::MakeArray;
using testing::ModuleBuilder;

struct Problem {
  Problem(Dims batch, int64_t l, int64_t s, int64_t e, int64_t ev, Dims mask = {}, bool pred_mask = false,
          bool causal = false)
      : batch(std::move(batch)),
        l(l),
        s(s),
        e(e),
        ev(ev),
        mask(std::move(mask)),
        pred_mask(pred_mask),
        causal(causal) {}

  Dims batch;
  int64_t l, s, e, ev;
  Dims mask;  // rank batch + 2, each dim 1 or the scores'; empty: none
  bool pred_mask;
  bool causal;
  double scale = 0.35;
  bool bf16 = false;  // q, k, v, d(output), the float mask and the gradients bf16; the forward result f32
};

int64_t Numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}
Dims With(Dims batch, std::initializer_list<int64_t> tail) {
  batch.insert(batch.end(), tail);
  return batch;
}

// Uniform in [-1, 1]; with `bf16`, each a bf16 value (so that the f64 reference sees the kernels' inputs).
std::vector<float> RandomFloats(std::mt19937_64& rng, int64_t n, bool bf16 = false) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = bf16 ? Bf16ToFloat(FloatToBf16(u(rng))) : u(rng);
  return v;
}

// `values` as an f32 array, or rounded to a bf16 one.
HostArray FloatArray(bool bf16, const Dims& dims, const std::vector<float>& values) {
  return bf16 ? testing::Bf16Array(dims, values) : MakeArray(PrimitiveType::kF32, dims, values);
}

// Host arrays of a problem: q, k, v, d(output) and the mask (as f64 for the reference).
struct Data {
  std::vector<float> q, k, v, dout, mask;
};

// The reference: out [B, L, Ev], lse [B, L], dq, dk, dv, in f64 from the definition.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference Compute(const Problem& p, const Data& d) {
  const int64_t batch = Numel(p.batch);
  Reference r;
  r.out.assign(static_cast<size_t>(batch * p.l * p.ev), 0);
  r.lse.assign(static_cast<size_t>(batch * p.l), 0);
  r.dq.assign(static_cast<size_t>(batch * p.l * p.e), 0);
  r.dk.assign(static_cast<size_t>(batch * p.s * p.e), 0);
  r.dv.assign(static_cast<size_t>(batch * p.s * p.ev), 0);
  // The mask's element for (batch b, i, j), its size-1 dims broadcast.
  const Dims full = With(p.batch, {p.l, p.s});
  auto mask_at = [&](int64_t b, int64_t i, int64_t j) {
    Dims coords = p.batch;
    for (size_t x = p.batch.size(); x-- > 0;) {
      coords[x] = b % p.batch[x];
      b /= p.batch[x];
    }
    coords.push_back(i);
    coords.push_back(j);
    int64_t at = 0;
    for (size_t x = 0; x < full.size(); ++x) at = at * p.mask[x] + (p.mask[x] == 1 ? 0 : coords[x]);
    return static_cast<double>(d.mask[static_cast<size_t>(at)]);
  };
  auto at = [](const std::vector<float>& a, int64_t i) { return static_cast<double>(a[static_cast<size_t>(i)]); };
  auto operand = [&](double x) { return p.bf16 ? Bf16ToFloat(FloatToBf16(static_cast<float>(x))) : x; };
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < p.l; ++i) {
      std::vector<double> prob(static_cast<size_t>(p.s)), dp(static_cast<size_t>(p.s));
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < p.s; ++j) {
        double x = 0;
        for (int64_t c = 0; c < p.e; ++c) x += at(d.q, (b * p.l + i) * p.e + c) * at(d.k, (b * p.s + j) * p.e + c);
        x *= p.scale;
        if (!p.mask.empty()) {
          const double m = mask_at(b, i, j);
          x = p.pred_mask ? (m != 0 ? x : -INFINITY) : x + m;
        }
        if (p.causal && j > i) x = -INFINITY;
        prob[static_cast<size_t>(j)] = x;
        max = std::max(max, x);
      }
      double total = 0;
      for (double& x : prob) total += (x = std::exp(x - max));
      for (double& x : prob) x /= total;
      r.lse[static_cast<size_t>(b * p.l + i)] = max + std::log(total);
      double delta = 0;
      for (int64_t c = 0; c < p.ev; ++c) {
        double o = 0;
        for (int64_t j = 0; j < p.s; ++j) o += prob[static_cast<size_t>(j)] * at(d.v, (b * p.s + j) * p.ev + c);
        r.out[static_cast<size_t>((b * p.l + i) * p.ev + c)] = o;
        delta += o * at(d.dout, (b * p.l + i) * p.ev + c);
      }
      for (int64_t j = 0; j < p.s; ++j) {
        double x = 0;
        for (int64_t c = 0; c < p.ev; ++c)
          x += at(d.dout, (b * p.l + i) * p.ev + c) * at(d.v, (b * p.s + j) * p.ev + c);
        // bf16: the backward's products read P and dS rounded to bf16 (their sums over up to a thousand
        // queries or keys move by a percent).
        const double pj = operand(prob[static_cast<size_t>(j)]);
        const double ds = operand(prob[static_cast<size_t>(j)] * (x - delta) * p.scale);
        for (int64_t c = 0; c < p.ev; ++c) {
          r.dv[static_cast<size_t>((b * p.s + j) * p.ev + c)] += pj * at(d.dout, (b * p.l + i) * p.ev + c);
        }
        for (int64_t c = 0; c < p.e; ++c) {
          r.dq[static_cast<size_t>((b * p.l + i) * p.e + c)] += ds * at(d.k, (b * p.s + j) * p.e + c);
          r.dk[static_cast<size_t>((b * p.s + j) * p.e + c)] += ds * at(d.q, (b * p.l + i) * p.e + c);
        }
      }
    }
  }
  return r;
}

// A module computing the forward result and the gradients of a problem.
ModuleBuilder Build(const Problem& p) {
  ModuleBuilder m;
  const proto::ElementType type = p.bf16 ? proto::BF16 : proto::F32;
  const int64_t q = m.Parameter(0, type, With(p.batch, {p.l, p.e}));
  const int64_t k = m.Parameter(1, type, With(p.batch, {p.s, p.e}));
  const int64_t v = m.Parameter(2, type, With(p.batch, {p.s, p.ev}));
  const int64_t dout = m.Parameter(3, type, With(p.batch, {p.l, p.ev}));
  std::vector<int64_t> mask;
  if (!p.mask.empty()) mask.push_back(m.Parameter(4, p.pred_mask ? proto::PRED : type, p.mask));
  auto attrs = [&](proto::Instruction& i) {
    i.set_value(p.scale);
    i.set_causal(p.causal);
  };
  std::vector<int64_t> operands = {q, k, v};
  operands.insert(operands.end(), mask.begin(), mask.end());
  const int64_t fwd = m.Op(Opcode::kAttention, operands, proto::F32, With(p.batch, {p.l, p.ev + 1}), attrs);
  operands = {q, k, v, fwd, dout};
  operands.insert(operands.end(), mask.begin(), mask.end());
  const int64_t grads =
      m.Op(Opcode::kAttentionGrad, operands, type, With(p.batch, {p.l * p.e + p.s * p.e + p.s * p.ev}), attrs);
  m.Output(fwd);
  m.Output(grads);
  return m;
}

class AttentionKernelTest : public ::testing::Test {
 protected:
  // `library`: the attention kernels' GEMM library, set in the compiled executable (else the compiler's).
  void Check(const Problem& p, const std::string& name, std::optional<GemmLibrary> library = std::nullopt) {
    SCOPED_TRACE(name);
    std::mt19937_64 rng(std::hash<std::string>{}(name));
    const int64_t batch = Numel(p.batch);
    Data d{RandomFloats(rng, batch * p.l * p.e, p.bf16),
           RandomFloats(rng, batch * p.s * p.e, p.bf16),
           RandomFloats(rng, batch * p.s * p.ev, p.bf16),
           RandomFloats(rng, batch * p.l * p.ev, p.bf16),
           {}};
    std::vector<HostArray> args = {
        FloatArray(p.bf16, With(p.batch, {p.l, p.e}), d.q), FloatArray(p.bf16, With(p.batch, {p.s, p.e}), d.k),
        FloatArray(p.bf16, With(p.batch, {p.s, p.ev}), d.v), FloatArray(p.bf16, With(p.batch, {p.l, p.ev}), d.dout)};
    if (!p.mask.empty()) {
      d.mask = RandomFloats(rng, Numel(p.mask), p.bf16);
      if (p.pred_mask) {
        std::vector<uint8_t> keep;
        for (float& x : d.mask) {
          x = x > -0.6f ? 1.0f : 0.0f;  // about 80% take part
          keep.push_back(static_cast<uint8_t>(x));
        }
        args.push_back(MakeArray(PrimitiveType::kPred, p.mask, keep));
      } else {
        args.push_back(FloatArray(p.bf16, p.mask, d.mask));
      }
    }
    const ModuleBuilder m = Build(p);
    ASSERT_TRUE(VerifyModule(m.module()).ok()) << VerifyModule(m.module());
    absl::StatusOr<std::shared_ptr<Executable>> exe = client_->Compile(m.module(), {});
    ASSERT_TRUE(exe.ok()) << exe.status();
    if (library) {
      proto::Executable chosen = (*exe)->proto();
      for (proto::Kernel& k : *chosen.mutable_kernels()) {
        if (k.kind() == proto::Kernel::ATTENTION || k.kind() == proto::Kernel::ATTENTION_GRAD) {
          k.set_gemm_library(static_cast<int32_t>(*library));
        }
      }
      exe = Executable::Load(std::move(chosen));
      ASSERT_TRUE(exe.ok()) << exe.status();
    }
    // Through the serialized form, as a persistent cache hit would load it.
    absl::StatusOr<std::shared_ptr<Executable>> loaded = client_->LoadSerializedExecutable((*exe)->Serialize());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    absl::StatusOr<std::vector<HostArray>> out = testing::ExecuteOnHost(*client_, **loaded, args);
    ASSERT_TRUE(out.ok()) << out.status();
    const Reference r = Compute(p, d);
    ASSERT_EQ((*out)[0].shape.type, PrimitiveType::kF32);
    ASSERT_EQ((*out)[1].shape.type, p.bf16 ? PrimitiveType::kBF16 : PrimitiveType::kF32);
    const std::vector<float> fwd = (*out)[0].values<float>(), grads = FloatsOf((*out)[1]);
    // f32 accumulation against f64: relative 1e-5 of the values' scale. bf16: the gradients rounded to
    // bf16 as they are stored (relative 2^-9), the output's probabilities as operands of its product (its
    // average of them moves less, but D = rowsum(dO * O) with it: the gradients' errors reach 2.4e-3); the
    // scores and the logsumexp are f32 sums of exact products.
    const double tol = p.bf16 ? 6e-3 : 2e-5;
    const auto near = [&](double got, double want) {
      return std::abs(got - want) <= tol * std::max(1.0, std::abs(want));
    };
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < p.l; ++i) {
        const float* row = fwd.data() + (b * p.l + i) * (p.ev + 1);
        for (int64_t c = 0; c < p.ev; ++c) {
          const double want = r.out[static_cast<size_t>((b * p.l + i) * p.ev + c)];
          ASSERT_TRUE(near(row[c], want)) << row[c] << " != " << want << " at " << b << " " << i << " " << c;
        }
        ASSERT_NEAR(row[p.ev], r.lse[static_cast<size_t>(b * p.l + i)], 2e-4) << "lse " << b << " " << i;
      }
      const float* g = grads.data() + b * (p.l * p.e + p.s * p.e + p.s * p.ev);
      auto expect = [&](const std::vector<double>& want, int64_t offset, int64_t n, const char* what) {
        for (int64_t x = 0; x < n; ++x) {
          const double w = want[static_cast<size_t>(b * n + x)];
          ASSERT_TRUE(near(g[offset + x], w)) << g[offset + x] << " != " << w << ": " << what << " " << b << " " << x;
        }
      };
      expect(r.dq, 0, p.l * p.e, "dq");
      expect(r.dk, p.l * p.e, p.s * p.e, "dk");
      expect(r.dv, p.l * p.e + p.s * p.e, p.s * p.ev, "dv");
    }
    bool saw_attention = false;
    for (const proto::Kernel& k : (*loaded)->proto().kernels()) {
      saw_attention |= k.kind() == proto::Kernel::ATTENTION;
      if (library && (k.kind() == proto::Kernel::ATTENTION || k.kind() == proto::Kernel::ATTENTION_GRAD)) {
        EXPECT_EQ(k.gemm_library(), static_cast<int32_t>(*library)) << "the library did not survive serialization";
      }
    }
    EXPECT_TRUE(saw_attention);
  }

  std::unique_ptr<Client> client_ = testing::MakeClient();
};

TEST_F(AttentionKernelTest, MatchesReferenceLoop) {
  Check({{2, 3}, 70, 70, 16, 16}, "square, two blocks");
  Check({{2}, 65, 129, 8, 24}, "L != S, Ev != E");
  Check({{}, 1, 1, 1, 1}, "one of everything");
  Check({{3}, 5, 200, 4, 3}, "many key blocks");
  Check({{1}, 130, 7, 4, 3}, "many query blocks");
  // Past the forward's step of keys and the backward's of queries (512): the online softmax rescales
  // between steps, and the gradients sum over steps.
  Check({{2}, 3, 1100, 4, 3}, "keys over three steps");
  Check({{2}, 1100, 5, 4, 3}, "queries over three steps");
}

// The block products run on the library the executable names: each computes the same attention.
TEST_F(AttentionKernelTest, EveryGemmLibraryMatchesTheReferenceLoop) {
  for (GemmLibrary library : kGemmLibraries) {
    const std::string name(GemmLibraryName(library));
    Check({{2, 3}, 70, 70, 16, 16}, name + ", square, two blocks", library);
    Check({{2}, 65, 129, 8, 24, {}, false, true}, name + ", causal, L != S, Ev != E", library);
    Check({{2, 3}, 33, 66, 8, 4, {1, 3, 33, 66}, false}, name + ", f32 mask per head", library);
  }
}

// bf16 q, k, v: products of bf16 with f32 sums (oneDNN's native ones where the CPU has them, else the
// operands widened for any library), softmax and sums in f32, the result f32 and the gradients bf16.
TEST_F(AttentionKernelTest, Bf16OperandsMatchTheReferenceLoopOnEveryLibrary) {
  const auto bf16 = [](Problem p) {
    p.bf16 = true;
    return p;
  };
  for (GemmLibrary library : kGemmLibraries) {
    const std::string name = "bf16, " + std::string(GemmLibraryName(library));
    Check(bf16({{2, 3}, 70, 70, 16, 16}), name + ", square, two blocks", library);
    Check(bf16({{2}, 65, 129, 8, 24, {}, false, true}), name + ", causal, L != S, Ev != E", library);
    Check(bf16({{2, 3}, 33, 66, 8, 4, {1, 3, 33, 66}, false}), name + ", bf16 mask per head", library);
    Check(bf16({{2, 3}, 70, 90, 8, 8, {2, 1, 1, 90}, true}), name + ", pred key padding", library);
  }
  Check(bf16({{2}, 3, 1100, 4, 3}), "bf16, keys over three steps");
  Check(bf16({{2}, 1100, 5, 4, 3}), "bf16, queries over three steps");
}

TEST_F(AttentionKernelTest, CausalSkipsBlocksAboveTheDiagonal) {
  Check({{2, 2}, 130, 130, 8, 8, {}, false, true}, "square");
  Check({{2}, 70, 150, 8, 4, {}, false, true}, "L < S");
  Check({{2}, 150, 70, 8, 4, {}, false, true}, "L > S");
  Check({{1}, 600, 600, 4, 4, {}, false, true}, "queries and keys over two steps");
}

TEST_F(AttentionKernelTest, MasksBroadcastWithStrideZero) {
  Check({{2, 3}, 70, 90, 8, 8, {2, 3, 70, 90}, true}, "pred, full");
  Check({{2, 3}, 70, 90, 8, 8, {2, 1, 1, 90}, true}, "pred, key padding");
  Check({{2, 3}, 33, 66, 8, 4, {1, 3, 33, 66}, false}, "f32 per head");
  Check({{2, 3}, 33, 66, 8, 4, {2, 1, 33, 1}, false}, "f32 per row");
  Check({{2}, 70, 70, 8, 8, {1, 70, 70}, false, true}, "f32 and causal");
  Check({{2}, 3, 600, 4, 4, {2, 1, 600}, true}, "pred, keys over two steps");
  Check({{1}, 20, 600, 4, 4, {1, 20, 600}, false}, "f32 per row and key, keys over two steps");
}

// The projections' layout: q, k and v are heads of one [B, T, 3, H, D] array and d(output) a [B, T, H, D]
// one, each taken as [B, H, T, D] by a slice, a unit dim reshape and a transpose (as the GPT's attention
// reads them). The attention kernels read them where they are, through operand views: no kernel copies
// a head first, and the results are the bits of the same attention on contiguous copies. The gradients
// go back the same way, concatenated into the projections' [B, T, 3, H, D] (as the GPT's backward puts
// them): the gradient kernel writes them there, through result views, and no kernel concatenates.
class AttentionViewTest : public AttentionKernelTest {
 protected:
  enum class Gradients {
    kPacked,                 // the attention gradient's own [B, H, 3 T D]
    kConcatenated,           // in [B, T, 3, H, D]
    kConcatenatedAndDq,      // in [B, T, 3, H, D], and dq [B, T, H, D] a result too: a concatenation kernel copies
    kConcatenatedAndPacked,  // in [B, T, 3, H, D], and the packed ones a result too: as kConcatenatedAndDq
    kConcatenatedReordered,  // dv, dq, dk in [B, T, 3, H, D]: not the parts in place, so concatenated
  };
  // `keep_q`: q [B, H, T, D] is also a result, so stored by a kernel of its own, which the attention
  // then reads as it is.
  // `bf16`: the projections, d(output) and the gradients bf16.
  void Check(int64_t b, int64_t t, int64_t h, int64_t d, bool causal, bool keep_q,
             Gradients gradients = Gradients::kPacked, bool bf16 = false) {
    SCOPED_TRACE(absl::StrCat("b ", b, " t ", t, " h ", h, " d ", d, causal ? " causal" : "", keep_q ? ", q kept" : "",
                              ", gradients ", static_cast<int>(gradients), bf16 ? ", bf16" : ""));
    const proto::ElementType type = bf16 ? proto::BF16 : proto::F32;
    std::mt19937_64 rng(static_cast<uint64_t>(b * 1000 + t * 10 + h + causal));
    const std::vector<int64_t> order =  // the parts' order in the concatenation
        gradients == Gradients::kConcatenatedReordered ? std::vector<int64_t>{2, 0, 1} : std::vector<int64_t>{0, 1, 2};
    const std::vector<float> qkv = RandomFloats(rng, b * t * 3 * h * d), dout = RandomFloats(rng, b * t * h * d);
    const auto attrs = [&](proto::Instruction& i) {
      i.set_value(0.3);
      i.set_causal(causal);
    };
    ModuleBuilder m;
    const int64_t packed = m.Parameter(0, type, {b, t, 3, h, d});
    const int64_t dout_btd = m.Parameter(1, type, {b, t, h, d});
    std::vector<int64_t> heads;  // q, k, v as [B, H, T, D]
    for (int64_t part = 0; part < 3; ++part) {
      const int64_t slice = m.Slice(packed, {0, 0, part, 0, 0}, {b, t, part + 1, h, d}, {1, 1, 1, 1, 1});
      heads.push_back(m.Transpose(m.Reshape(slice, {b, t, h, d}), {0, 2, 1, 3}));
    }
    const int64_t dout_bhtd = m.Transpose(dout_btd, {0, 2, 1, 3});
    const int64_t fwd = m.Op(Opcode::kAttention, heads, proto::F32, {b, h, t, d + 1}, attrs);
    const int64_t grads =
        m.Op(Opcode::kAttentionGrad, {heads[0], heads[1], heads[2], fwd, dout_bhtd}, type, {b, h, 3 * t * d}, attrs);
    m.Output(fwd);
    if (gradients == Gradients::kPacked) {
      m.Output(grads);
    } else {
      // As the lazy layer's backward of the heads: the three parts, each transposed back and concatenated.
      const int64_t parts = m.Reshape(grads, {b, h, 3, t, d});
      std::vector<int64_t> back;
      for (int64_t part : order) {
        const int64_t slice = m.Slice(parts, {0, 0, part, 0, 0}, {b, h, part + 1, t, d}, {1, 1, 1, 1, 1});
        back.push_back(m.Reshape(m.Transpose(m.Reshape(slice, {b, h, t, d}), {0, 2, 1, 3}), {b, t, 1, h, d}));
      }
      m.Output(m.Op(Opcode::kConcatenate, back, type, {b, t, 3, h, d}, [](proto::Instruction& i) { i.set_axis(2); }));
      if (gradients == Gradients::kConcatenatedAndDq) m.Output(m.Reshape(back[0], {b, t, h, d}));
      if (gradients == Gradients::kConcatenatedAndPacked) m.Output(grads);
    }
    if (keep_q) m.Output(heads[0]);
    ASSERT_TRUE(VerifyModule(m.module()).ok()) << VerifyModule(m.module());
    absl::StatusOr<std::shared_ptr<Executable>> exe = client_->Compile(m.module(), {});
    ASSERT_TRUE(exe.ok()) << exe.status();
    absl::StatusOr<std::shared_ptr<Executable>> loaded = client_->LoadSerializedExecutable((*exe)->Serialize());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    // No time steps: nothing to write, and the concatenation of nothing is left as it is.
    const bool written_in_place = gradients == Gradients::kConcatenated && t > 0;
    int views = 0, result_views = 0, concatenations = 0;
    for (const proto::Kernel& k : (*loaded)->proto().kernels()) {
      result_views += k.result_views_size();
      if (k.kind() == proto::Kernel::CONCATENATE) ++concatenations;
      if (k.kind() != proto::Kernel::ATTENTION && k.kind() != proto::Kernel::ATTENTION_GRAD) {
        EXPECT_TRUE(keep_q || (gradients != Gradients::kPacked && !written_in_place))
            << "a kernel besides the attentions: " << k.label();
        continue;
      }
      for (const proto::OperandView& v : k.operand_views()) views += v.dims_size() > 0 ? 1 : 0;
    }
    EXPECT_EQ(views, keep_q ? 3 + 4 - 2 : 3 + 4);  // k, v (and q unless it is stored) in each, d(output)
    EXPECT_EQ(result_views, written_in_place ? 3 : 0);
    EXPECT_EQ(concatenations, gradients != Gradients::kPacked && !written_in_place ? 1 : 0);
    absl::StatusOr<std::vector<HostArray>> out = testing::ExecuteOnHost(
        *client_, **loaded, {FloatArray(bf16, {b, t, 3, h, d}, qkv), FloatArray(bf16, {b, t, h, d}, dout)});
    ASSERT_TRUE(out.ok()) << out.status();

    // The same attention on contiguous [B, H, T, D] copies made on the host.
    auto head = [&](const std::vector<float>& from, int64_t parts, int64_t part) {
      std::vector<float> x;
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t hi = 0; hi < h; ++hi)
          for (int64_t ti = 0; ti < t; ++ti)
            for (int64_t di = 0; di < d; ++di)
              x.push_back(from[static_cast<size_t>((((bi * t + ti) * parts + part) * h + hi) * d + di)]);
      return x;
    };
    Problem p({b, h}, t, t, d, d, {}, false, causal);
    p.scale = 0.3;
    p.bf16 = bf16;
    const ModuleBuilder contiguous = Build(p);
    absl::StatusOr<std::shared_ptr<Executable>> plain = client_->Compile(contiguous.module(), {});
    ASSERT_TRUE(plain.ok()) << plain.status();
    absl::StatusOr<std::vector<HostArray>> want = testing::ExecuteOnHost(
        *client_, **plain,
        {FloatArray(bf16, {b, h, t, d}, head(qkv, 3, 0)), FloatArray(bf16, {b, h, t, d}, head(qkv, 3, 1)),
         FloatArray(bf16, {b, h, t, d}, head(qkv, 3, 2)), FloatArray(bf16, {b, h, t, d}, head(dout, 1, 0))});
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ((*out)[0].values<float>(), (*want)[0].values<float>()) << "forward";
    const std::vector<float> grads_bhtd = FloatsOf((*want)[1]);
    if (gradients == Gradients::kPacked) {
      EXPECT_EQ(FloatsOf((*out)[1]), grads_bhtd) << "gradients";
    } else {
      // [B, H, 3, T, D] back to [B, T, 3, H, D].
      std::vector<float> concatenated, dq;
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t ti = 0; ti < t; ++ti)
          for (int64_t part : order)
            for (int64_t hi = 0; hi < h; ++hi)
              for (int64_t di = 0; di < d; ++di) {
                const float x = grads_bhtd[static_cast<size_t>((((bi * h + hi) * 3 + part) * t + ti) * d + di)];
                concatenated.push_back(x);
                if (part == 0) dq.push_back(x);
              }
      EXPECT_EQ(FloatsOf((*out)[1]), concatenated) << "gradients";
      if (gradients == Gradients::kConcatenatedAndDq) {
        EXPECT_EQ(FloatsOf((*out)[2]), dq) << "dq";
      }
      if (gradients == Gradients::kConcatenatedAndPacked) {
        EXPECT_EQ(FloatsOf((*out)[2]), grads_bhtd) << "packed gradients";
      }
    }
    if (keep_q) {
      EXPECT_EQ(FloatsOf(out->back()), FloatsOf(FloatArray(bf16, {b, h, t, d}, head(qkv, 3, 0)))) << "q";
    }
  }
};

TEST_F(AttentionViewTest, ReadsTheHeadsOfTheProjectionsWhereTheyAre) {
  Check(2, 70, 3, 8, false, false);
  Check(2, 130, 2, 16, true, false);
  Check(1, 5, 4, 4, true, false);
  Check(1, 600, 2, 8, false, false);  // copies of more rows than one step reads
  Check(2, 0, 3, 8, true, false);     // no time steps: views of an empty array
}

TEST_F(AttentionViewTest, ReadsAStoredHeadAsItIs) { Check(2, 70, 3, 8, true, true); }

TEST_F(AttentionViewTest, WritesTheHeadsGradientsWhereTheyAreConcatenated) {
  Check(2, 70, 3, 8, false, false, Gradients::kConcatenated);
  Check(2, 130, 2, 16, true, false, Gradients::kConcatenated);
  Check(1, 5, 4, 4, true, true, Gradients::kConcatenated);
  Check(1, 600, 2, 8, false, false, Gradients::kConcatenated);  // more rows than one step of queries
  Check(3, 9, 1, 4, true, false, Gradients::kConcatenated);     // one head: a task per batch element
  Check(1, 600, 3, 64, true, false, Gradients::kConcatenated);  // 3 heads, sums for 2 in half an L2: 1 a task
  Check(2, 0, 3, 8, true, false, Gradients::kConcatenated);     // no time steps
}

TEST_F(AttentionViewTest, Bf16HeadsAreReadAndTheirGradientsWrittenWhereTheyAre) {
  Check(2, 70, 3, 8, true, false, Gradients::kPacked, true);
  Check(2, 70, 3, 8, true, true, Gradients::kConcatenated, true);
  Check(1, 600, 3, 64, true, false, Gradients::kConcatenated, true);
  Check(2, 70, 3, 8, true, false, Gradients::kConcatenatedAndDq, true);
}

// Gradients read elsewhere too (a part, or all packed) are no views of the concatenation alone, and parts
// out of their order no layout of one array: a kernel concatenates them, as before.
TEST_F(AttentionViewTest, ConcatenatesGradientsAlsoReadElsewhereOrOutOfOrder) {
  Check(2, 70, 3, 8, true, false, Gradients::kConcatenatedAndDq);
  Check(2, 70, 3, 8, true, false, Gradients::kConcatenatedAndPacked);
  Check(2, 70, 3, 8, true, false, Gradients::kConcatenatedReordered);
}

// Malformed instructions: each refused by the verifier with what is wrong.
TEST(AttentionVerifier, RefusesMalformedInstructions) {
  const Problem p({2}, 4, 6, 8, 3, {2, 4, 6}, true);
  auto refuse = [](const proto::Module& m, const std::string& part) {
    const absl::Status s = VerifyModule(m);
    EXPECT_FALSE(s.ok()) << part;
    EXPECT_THAT(std::string(s.message()), HasSubstr(part));
  };
  const ModuleBuilder good = Build(p);
  ASSERT_TRUE(VerifyModule(good.module()).ok()) << VerifyModule(good.module());
  const int64_t fwd = good.module().instructions_size() - 2, grad = fwd + 1;
  {
    ModuleBuilder m = good;
    m.inst(fwd).mutable_shape()->set_dims(2, 5);
    refuse(m.module(), "the result must be f32[2,4,4]");
  }
  {
    ModuleBuilder m = good;
    m.inst(fwd).set_value(std::numeric_limits<double>::quiet_NaN());
    refuse(m.module(), "not finite");
  }
  {
    ModuleBuilder m = good;
    m.inst(fwd).mutable_operands()->RemoveLast();
    m.inst(fwd).mutable_operands()->RemoveLast();
    refuse(m.module(), "expects 3 or 4 operands");
  }
  {
    ModuleBuilder m = good;
    m.inst(fwd).set_operands(1, 2);  // v as k: [2, 6, 3] is not [B, S, E]
    refuse(m.module(), "k must be [B..., S, E]");
  }
  {
    ModuleBuilder m = good;
    m.inst(grad).set_operands(3, 0);  // q as the forward result
    refuse(m.module(), "the forward result must be");
  }
  {
    ModuleBuilder m = good;
    m.inst(4).mutable_shape()->set_dims(1, 3);  // mask [2, 3, 6]
    m.inst(4).mutable_shape()->set_type(proto::PRED);
    refuse(m.module(), "does not broadcast");
  }
  {
    ModuleBuilder m = good;
    m.inst(4).mutable_shape()->set_type(proto::S32);
    refuse(m.module(), "pred or q's type");
  }
  {
    ModuleBuilder m = good;
    m.inst(fwd).set_dropout(1.5);
    refuse(m.module(), "the dropout probability 1.5 is not in [0, 1]");
  }
  {
    ModuleBuilder m = good;
    m.inst(fwd).set_dropout(0.5);  // the mask is no s64[] seed
    refuse(m.module(), "the last operand must be the s64[] seed");
  }
  {
    ModuleBuilder m = good;
    m.inst(grad).mutable_shape()->set_dims(1, 1);
    refuse(m.module(), "the result must be f32[2,98]");
  }
}

// A loaded executable is checked as strictly as a module: a kernel whose slots do not fit is refused.
TEST(AttentionLoader, RefusesKernelsThatDoNotFitTheirSlots) {
  const std::vector<ArrayShape> operands = {
      {PrimitiveType::kF32, {2, 4, 8}}, {PrimitiveType::kF32, {2, 6, 8}}, {PrimitiveType::kF32, {2, 6, 3}}};
  proto::Kernel k;
  k.set_kind(proto::Kernel::ATTENTION);
  k.set_scale(0.5);
  EXPECT_TRUE(BuildKernel(k, operands, {PrimitiveType::kF32, {2, 4, 4}}).ok());
  EXPECT_FALSE(BuildKernel(k, operands, {PrimitiveType::kF32, {2, 4, 3}}).ok());
  EXPECT_FALSE(BuildKernel(k, std::span(operands).first(2), {PrimitiveType::kF32, {2, 4, 4}}).ok());
  k.set_scale(std::numeric_limits<double>::infinity());
  EXPECT_FALSE(BuildKernel(k, operands, {PrimitiveType::kF32, {2, 4, 4}}).ok());
  k.set_scale(0.5);
  k.set_dropout(0.2);  // without a seed
  EXPECT_FALSE(BuildKernel(k, operands, {PrimitiveType::kF32, {2, 4, 4}}).ok());
  k.set_dropout(std::numeric_limits<double>::quiet_NaN());
  EXPECT_FALSE(BuildKernel(k, operands, {PrimitiveType::kF32, {2, 4, 4}}).ok());
  k.set_dropout(0);
  k.set_scale(0.5);
  k.set_kind(proto::Kernel::ATTENTION_GRAD);
  EXPECT_FALSE(BuildKernel(k, operands, {PrimitiveType::kF32, {2, 98}}).ok());
}

// Views as (dims, offset, strides), added to a kernel's operand or result views.
using ViewSpecs = std::vector<std::tuple<std::vector<int64_t>, int64_t, std::vector<int64_t>>>;
void AddViews(const ViewSpecs& views, google::protobuf::RepeatedPtrField<proto::OperandView>& to) {
  for (const auto& [dims, offset, strides] : views) {
    proto::OperandView* v = to.Add();
    v->mutable_dims()->Assign(dims.begin(), dims.end());
    v->set_offset(offset);
    v->mutable_strides()->Assign(strides.begin(), strides.end());
  }
}

// An operand view is checked against the input it reads: inside it, rows contiguous, of q, k, v or a
// gradient operand only, a stride per dim; the error names the view and what is wrong.
TEST(AttentionLoader, RefusesOperandViewsOutsideTheirRules) {
  // q, k, v as [2, 4, 8] heads of one [2, 4, 3, 8] input (its slot, three times).
  const ArrayShape packed{PrimitiveType::kF32, {2, 4, 3, 8}};
  const std::vector<ArrayShape> operands = {packed, packed, packed};
  const ArrayShape result{PrimitiveType::kF32, {2, 4, 9}};
  auto kernel = [](const ViewSpecs& views) {
    proto::Kernel k;
    k.set_kind(proto::Kernel::ATTENTION);
    k.set_scale(0.5);
    AddViews(views, *k.mutable_operand_views());
    return k;
  };
  const std::vector<int64_t> dims = {2, 4, 8}, strides = {96, 24, 1};
  EXPECT_TRUE(
      BuildKernel(kernel({{dims, 0, strides}, {dims, 8, strides}, {dims, 16, strides}}), operands, result).ok());
  auto refuse = [&](const proto::Kernel& k, const std::string& part) {
    const absl::StatusOr<std::unique_ptr<Kernel>> built = BuildKernel(k, operands, result);
    ASSERT_FALSE(built.ok()) << part;
    EXPECT_THAT(std::string(built.status().message()), HasSubstr(part));
  };
  refuse(kernel({{dims, 0, strides}, {dims, 8, strides}, {dims, 17, strides}}), "reaches outside its input");
  refuse(kernel({{dims, 0, strides}, {dims, -1, strides}, {dims, 16, strides}}), "reaches outside its input");
  refuse(kernel({{dims, 0, {96, 24, 2}}, {dims, 8, strides}, {dims, 16, strides}}), "rows that are not contiguous");
  refuse(kernel({{dims, 0, {96, 1}}, {dims, 8, strides}, {dims, 16, strides}}), "a stride per dim");
  refuse(kernel({{dims, 0, {int64_t{1} << 62, 24, 1}}, {dims, 8, strides}, {dims, 16, strides}}),
         "reaches outside its input");
  refuse(kernel({{{2, 4, 800}, 0, strides}, {dims, 8, strides}, {dims, 16, strides}}), "more elements than its input");
  // A view of nothing still has dims bounded as a slot's (their products feed the kernel's sizes).
  refuse(kernel({{{0, int64_t{1} << 62, 8}, 0, strides}, {dims, 8, strides}, {dims, 16, strides}}),
         "has a dimension out of range");
  refuse(kernel({{{0, int64_t{1} << 30, int64_t{1} << 30}, 0, strides}, {dims, 8, strides}, {dims, 16, strides}}),
         "has more elements than a slot may have");
  refuse(kernel({{dims, 0, strides}, {dims, 8, strides}, {dims, 16, strides}, {dims, 0, strides}}),
         "4 operand views for 3 inputs");
  // A view of the mask (the fourth operand of a forward attention).
  std::vector<ArrayShape> with_mask = operands;
  with_mask.push_back(packed);
  const absl::StatusOr<std::unique_ptr<Kernel>> masked =
      BuildKernel(kernel({{}, {}, {}, {dims, 0, strides}}), with_mask, result);
  ASSERT_FALSE(masked.ok());
  EXPECT_THAT(std::string(masked.status().message()), HasSubstr("only q, k, v and the gradient operands"));
}

// Result views (where an attention's gradient writes dq, dk and dv) are checked against the result: one
// each, of the parts' dims, inside it, rows contiguous, and together writing each element once.
TEST(AttentionLoader, RefusesResultViewsOutsideTheirRules) {
  // q, k, v, d(output) [2, 4, 8] and the forward result [2, 4, 9]; the gradients written as [2, 4, 3, 8].
  const ArrayShape head{PrimitiveType::kF32, {2, 4, 8}};
  const std::vector<ArrayShape> operands = {head, head, head, {PrimitiveType::kF32, {2, 4, 9}}, head};
  auto kernel = [](proto::Kernel::Kind kind, const ViewSpecs& views) {
    proto::Kernel k;
    k.set_kind(kind);
    k.set_scale(0.5);
    AddViews(views, *k.mutable_result_views());
    return k;
  };
  const std::vector<int64_t> dims = {2, 4, 8}, strides = {96, 24, 1};
  const ArrayShape result{PrimitiveType::kF32, {2, 4, 3, 8}};
  const ViewSpecs good = {{dims, 0, strides}, {dims, 8, strides}, {dims, 16, strides}};
  EXPECT_TRUE(BuildKernel(kernel(proto::Kernel::ATTENTION_GRAD, good), operands, result).ok());
  auto refuse = [&](const proto::Kernel& k, const std::string& part, const ArrayShape& out) {
    const absl::StatusOr<std::unique_ptr<Kernel>> built = BuildKernel(k, operands, out);
    ASSERT_FALSE(built.ok()) << part;
    EXPECT_THAT(std::string(built.status().message()), HasSubstr(part));
  };
  const proto::Kernel::Kind grad = proto::Kernel::ATTENTION_GRAD;
  refuse(kernel(grad, {{dims, 0, strides}, {dims, 0, strides}, {dims, 16, strides}}), "exactly once", result);
  refuse(kernel(grad, {{dims, 0, strides}, {dims, 4, strides}, {dims, 8, strides}}), "exactly once", result);
  refuse(kernel(grad, good), "exactly once", {PrimitiveType::kF32, {2, 4, 4, 8}});  // a gap
  refuse(kernel(grad, {{dims, 0, strides}, {dims, 8, strides}, {dims, 17, strides}}), "reaches outside", result);
  refuse(kernel(grad, {{dims, 0, strides}, {{2, 4, 4}, 8, strides}, {dims, 16, strides}}),
         "result view 1 (of dk): has dims other than [2,4,8]", result);
  refuse(kernel(grad, {{dims, 0, strides}, {dims, 8, strides}, {dims, 16, {96, 24, 2}}}), "not contiguous", result);
  refuse(kernel(grad, {{dims, 0, strides}, {dims, 8, strides}}), "one each for dq, dk and dv", result);
  refuse(kernel(grad, good), "the result must be f32", {PrimitiveType::kF64, {2, 4, 3, 8}});
  // A forward attention writes its result as it is.
  proto::Kernel forward = kernel(proto::Kernel::ATTENTION, good);
  const absl::StatusOr<std::unique_ptr<Kernel>> built =
      BuildKernel(forward, std::span(operands).first(3), {PrimitiveType::kF32, {2, 4, 9}});
  ASSERT_FALSE(built.ok());
  EXPECT_THAT(std::string(built.status().message()), HasSubstr("only an attention's gradient writes"));
}

}  // namespace attention_kernel_test
}  // namespace lazyrt::pjrt
